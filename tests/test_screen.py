"""The terminal screens (screen.py): one line per answer within the width,
ids never cut, the headline answers of a whole survey on the first 40-line
screen, compare's summary and changed rows, and Markdown in 40 lines."""
import itertools

import pytest
from rich.cells import cell_len

from memfx.analysis import compare as cmp
from memfx.experiments import all_experiments
from memfx.report import screen

LONG = ("a sentence far longer than any terminal is wide, which the screen must shorten to "
        "one line while the whole of it stays available under --details " * 3).strip()


def fake_survey():
    """A survey document answering every declared question of every
    experiment, with wide values, CIs and sentences (the worst case)."""
    verdicts = itertools.cycle(["detected", "not_detected", "inconclusive", "measured",
                                "not_measured"])
    answers, documents = [], []
    for e in all_experiments():
        run_id = f"20260101-000000-{e.name}-abcd"
        mine = []
        for q in e.questions:
            a = q.as_dict()
            v = next(verdicts)
            a.update(verdict=v, because=f"{q.id}: {LONG}", run_id=run_id, experiment=e.name,
                     value=None if v == "not_measured" else 123456.789,
                     ci_low=None if v == "not_measured" else 0.000123,
                     ci_high=None if v == "not_measured" else 98765432.1)
            mine.append(a)
        answers += mine
        points = [{"n": 10, "rejected": 5 if i % 3 == 0 else 0} for i in range(9)]
        documents.append({"run_id": run_id, "experiment": e.name, "answers": mine,
                          "points": points, "warnings": [{"id": "hypervisor",
                                                          "message": LONG}]})
    return {"kind": "survey", "survey_id": "s-20260101-000000-abcd", "status": "complete",
            "preset": "quick", "machine_id": "m-0123456789abcdef", "answers": answers,
            "documents": documents}


ADVICE = {
    "gcc": {"memcpy": {"string": "libcall:-1:noalign", "decision": "advise",
                       "check_reason": "faster at 3 of 4 sizes " + LONG,
                       "check": {"overall": {"ratio": 0.97, "gain": 0.03, "ci_low": 0.95,
                                             "ci_high": 0.99}}},
            "memset": {"string": None, "reason": "no strategy beats the default"}},
    "glibc": {"tunables": [{"tunable": "glibc.cpu.x86_rep_movsb_threshold", "current": 2048,
                            "proposed": 8192, "decision": "keep",
                            "check": {"overall": {"ratio": 1.0, "gain": 0.0, "ci_low": 0.98,
                                                  "ci_high": 1.02}}}]},
    "prefetch": {"items": [{"topic": "null", "advice": "no need to guard " + LONG,
                            "decision": "confirmed",
                            "check": {"ratio": 1.004, "ratio_is": "unguarded / guarded"}}]},
}


def test_survey_screen_fits_80_columns_with_every_headline_in_40_lines():
    doc = fake_survey()
    lines = screen.survey_screen(doc, 80, advice=ADVICE)
    assert all(cell_len(line) <= 80 for line in lines), max(lines, key=cell_len)
    heads = [a["question"] for a in doc["answers"] if a.get("headline")]
    assert len(heads) >= 10                      # every experiment's seed questions
    first = lines[:screen.SCREEN_LINES]
    for qid in heads:                            # each whole, on a line of its own
        assert sum(line.split()[0] == qid for line in first if line.strip()) == 1, qid
    # grouped by seed story, in seed order, each group under its heading
    headings = [line for line in first if line[:3].isdigit()]
    assert [h[:3] for h in headings] == sorted({a["seed"] for a in doc["answers"]
                                                if a.get("headline")})
    # the advice with its measured gain, one data-quality line, the way to the rest
    text = "\n".join(lines)
    assert "advise -mmemcpy-strategy=libcall:-1:noalign: measured +3.1% [+1.0%, +5.3%]" in text
    assert "keep glibc's x86_rep_movsb_threshold 2048; 8192 measured +0.0%" in text
    assert sum(line.startswith("data quality:") for line in lines) == 1
    rest = len(doc["answers"]) - len(heads)
    assert lines[-1].startswith(f"{rest} more answers: memfx show {doc['survey_id']} --all")
    # --all lists every answer, still one line each and within the width
    everything = screen.survey_screen(doc, 80, show_all=True)
    assert all(cell_len(line) <= 80 for line in everything)
    for a in doc["answers"]:
        assert any(line.split() and line.split()[0] == a["question"] for line in everything)


def test_the_data_quality_line_counts_noisy_points():
    doc = fake_survey()
    line = screen.quality_line(doc["documents"], doc["survey_id"], 200)
    n_docs = len(doc["documents"])
    assert line.startswith(f"data quality: {3 * n_docs} of {9 * n_docs} points had > 20%")
    assert f"memfx show {doc['survey_id']} --warnings" in line


def test_a_sentence_is_shown_whole_or_not_at_all_and_whole_under_details():
    a = {"question": "fill_alloc.calloc_vs_memset_recycled", "verdict": "inconclusive",
         "value": 0.99, "ci_low": 0.9, "ci_high": 1.1, "unit": "ratio", "because": LONG}
    (line,) = screen.answer_lines([a], 80)
    assert line == "fill_alloc.calloc_vs_memset_recycled  inconclusive 0.99x [0.9–1.1]"
    (line,) = screen.answer_lines([a], 100 + len(LONG))   # room for all of it: all of it
    assert line.endswith(LONG)
    full = screen.answer_lines([a], 80, full=True)
    assert " ".join(x.strip() for x in full[1:]) == LONG and all(cell_len(x) <= 80 for x in full)


def test_an_id_wider_than_the_room_is_never_cut():
    a = {"question": "experiment_with_a_long_name.question_with_an_even_longer_name_here",
         "verdict": "measured", "value": 1.5, "ci_low": 1.25, "ci_high": 1.75, "unit": "ns",
         "because": LONG}
    first, second = screen.answer_lines([a], 80, indent="  ")
    assert first == "  " + a["question"] and cell_len(first) <= 80
    assert second.strip() == "1.5 ns [1.25–1.75]"


def test_glob_selects_by_question_id():
    doc = fake_survey()
    lines = screen.survey_screen(doc, 80, pattern="fill.*")
    # after the heading (which may wrap: its continuation is indented)
    ids = [line.split()[0] for line in lines[1:] if not line.startswith("    ")]
    assert ids and all(i.startswith("fill.") for i in ids)
    assert len(ids) == sum(a["question"].startswith("fill.") for a in doc["answers"])


def _rows(n_changed, n_unchanged):
    a = [{"question": f"x.q{i:03d}", "asks": "?", "unit": "ns", "better": "lower",
          "verdict": "measured", "value": 10.0, "ci_low": 9.9, "ci_high": 10.1}
         for i in range(n_changed + n_unchanged)]
    b = [dict(x, value=15.0, ci_low=14.9, ci_high=15.1) if i < n_changed else dict(x)
         for i, x in enumerate(a)]
    return cmp.compare(a, b, 0.05, "run A", "run B")


def test_compare_lines_summary_first_and_only_changed_rows():
    doc = _rows(3, 40)
    lines = screen.compare_lines(doc, 80)
    assert lines[0].startswith("3 regressed, 40 unchanged")
    listed = [line.split()[0] for line in lines[2:-1]]
    assert listed == ["x.q000", "x.q001", "x.q002"]
    assert lines[-1].startswith("40 rows unchanged")
    every = screen.compare_lines(doc, 80, show_all=True)
    assert len(every) == 2 + 43 and all(cell_len(line) <= 80 for line in every)


def test_markdown_fits_40_lines_and_folds_the_rest():
    for changed, unchanged in ((3, 150), (60, 100), (0, 5)):
        doc = _rows(changed, unchanged)
        md = cmp.markdown(doc)
        lines = md.splitlines()
        assert len(lines) <= 40, (changed, unchanged, len(lines))
        assert lines[0].startswith("**memfx compare: ")
        for i in range(changed + unchanged):        # every row is somewhere
            assert f"`x.q{i:03d}`" in md
        if changed:
            assert "| `x.q000` |" in md              # changed rows in the table
        if unchanged:
            assert "<details>" in md and md.rstrip().endswith("</details>")
            assert "| `x.q%03d` |" % (changed + unchanged - 1) not in md


def test_a_tunable_with_nothing_proposed_says_why_not_none():
    advice = {"glibc": {"tunables": [
        {"tunable": "glibc.cpu.x86_rep_movsb_threshold", "current": 2112, "proposed": None,
         "decision": "keep", "reason": "already at the measured optimum"}]}}
    (line,) = screen.advice_lines(advice, 80)
    assert "None" not in line and "already at the measured optimum" in line
    assert "x86_rep_movsb_threshold 2112" in line


LONG_GCC = ("vector_loop:124:noalign,libcall:393216:noalign,unrolled_loop:917504:noalign,"
            "libcall:-1:noalign")


@pytest.mark.parametrize("width", [80, 100, 250])
def test_every_flag_and_tunable_is_printed_verbatim_at_any_width(width):
    """Issue 42: a flag longer than the screen stands whole on its own line
    (never cut, never broken), and the console prints `:-1:` and `[/dim]` as
    typed (no emoji, no markup)."""
    import io
    advice = {
        "gcc": {"memcpy": {"string": LONG_GCC, "decision": "advise",
                           "check": {"overall": {"ratio": 0.9, "ci_low": 0.85, "ci_high": 0.95}}},
                "memset": {"string": "vector_loop:224:noalign,libcall:-1:noalign",
                           "decision": "keep",
                           "check": {"overall": {"ratio": 1.0, "ci_low": 0.98, "ci_high": 1.02}}}},
        "glibc": {"tunables": [{"tunable": "glibc.cpu.x86_non_temporal_threshold",
                                "current": 3145728, "proposed": 1310720, "decision": "advise",
                                "check": {"overall": {"ratio": 0.8, "ci_low": 0.7,
                                                      "ci_high": 0.9}}}]}}
    lines = screen.advice_lines(advice, width)
    tokens = {t for line in lines for t in line.split()}
    for flag in (f"-mmemcpy-strategy={LONG_GCC}",
                 "-mmemset-strategy=vector_loop:224:noalign,libcall:-1:noalign",
                 "GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=1310720"):
        assert flag in tokens or flag + ":" in tokens or flag + ";" in tokens, (flag, lines)
    # a line is only ever wider than the screen when one word alone is
    for line in lines:
        assert cell_len(line) <= width or len(line.split()) == 1, line
    assert not any("…" in line for line in lines)
    con = screen.console()
    con.file = io.StringIO()
    for line in lines + ["[/dim] :-1: [bold]x"]:
        con.print(line, markup=False, soft_wrap=True)
    printed = con.file.getvalue()
    assert f"-mmemcpy-strategy={LONG_GCC}" in printed and "[/dim] :-1: [bold]x" in printed
    assert "👎" not in printed


def test_a_count_is_compared_as_equal_or_different_never_as_a_ratio():
    """Issue 42: compare printed `copy.best_strategy 0.429` (3 ranges / 7)."""
    from memfx.analysis.compare import ratio_text
    row = {"question": "copy.best_strategy", "unit": "ranges", "verdict": "changed-answer",
           "a": 7.0, "b": 3.0, "ratio": 3 / 7, "ratio_ci_low": None, "ratio_ci_high": None}
    assert ratio_text(row) == "–"
    doc = {"rows": [row], "counts": {"changed-answer": 1}, "threshold": 0.05, "a": "A", "b": "B"}
    line = next(x for x in screen.compare_lines(doc, 100)
                if "copy.best_strategy" in x)
    assert "0.429" not in line and "7 ranges -> 3 ranges" in line
    assert ratio_text(dict(row, unit="ns")) == "0.429"


def test_one_formatter_for_parameters_and_gains():
    """Issue 44: a parameter's value and a check's gain read alike wherever
    they are printed (units.param_value_text, units.gain_text)."""
    from memfx.model.units import gain_text, param_value_text
    from memfx.report import html as report_html
    from memfx.report import render
    assert param_value_text("size_bytes", 4096) == "4 KiB"
    assert param_value_text("max_size", 1 << 26, "size") == "64 MiB"
    assert param_value_text("arms", ["a", "b"], "list:str") == "a,b"
    assert param_value_text("refine", True) == "true"
    assert report_html.param_text("arms", ["a", "b"], "list:str") == "a, b"
    assert report_html.param_text("size_bytes", 4096) == "4 KiB"
    assert not hasattr(render, "_param_text")
    assert gain_text(0.8, 0.7, 0.9) == "+25.0% [+11.1%, +42.9%]"
    assert gain_text(1.0, 0.966, 3.23).startswith("+0.0% [-69.0%")      # never below -100 %
    assert gain_text(None) == "–"
