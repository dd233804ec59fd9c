"""The HTML report: built from a fixture database (a survey with a complete
latency-like run, a failed run and an interrupted run, markup injected in the
machine and the parameters), checked with a strict little HTML checker:
balanced tags, one h1, every section, escaping, embedded images only."""
import base64
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from memfx.analysis.results import document
from memfx.cli.main import main
from memfx.model.errors import MemfxError, StoreError
from memfx.report import plots, report
from memfx.store.store import Store

DATA = Path(__file__).parent / "data"
EVIL_CPU = "Evil CPU <script>alert(1)</script> & co"
EVIL_PARAM = "<b>x</b>"
FAILED_ERROR = ("worker crashed: SIGSEGV in kernel rep_movsb_loop\n"
                "Traceback (most recent call last):\n  File \"_worker.py\", line 1")
ADVICE = {
    "gcc": [{"flag": "-mmemcpy-strategy=libcall:-1:align", "gain": 0.08, "ci_low": 0.05,
             "ci_high": 0.11, "checked": True}],
    "glibc_tunables": [{"tunable": "glibc.cpu.x86_rep_movsb_threshold", "value": 4096,
                        "gain": 0.04, "checked": True}],
    "environment": "GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4096",
    "note": "<i>checked by re-measuring</i>",
}


# ---- the fixture database -------------------------------------------------------

def machine():
    fp = json.loads((DATA / "report_machine.json").read_text())
    fp["cpu"]["model_name"] = EVIL_CPU
    return fp


def latency_ns(arm, size):
    """A three-level staircase for the random arm; flat for sequential."""
    if arm == "sequential":
        return 2.0
    return 2.0 if size < 48 << 10 else 7.0 if size < 2 << 20 else 90.0


def latency_samples(rng):
    out = []
    sizes = [int(1024 * 2 ** (k / 2)) for k in range(0, 25)]        # 1K .. 4M
    for size in sizes:
        for arm in ("random", "sequential"):
            point = {"size_bytes": size, "pages": "4k", "npad": 7, "label": EVIL_PARAM}
            for length in (1000, 2000):
                for i in range(5):
                    ns = length * latency_ns(arm, size) * rng.normal(1, 0.01) + 40
                    out.append({"arm": arm, "point": point, "metric": "ns_per_load", "unit": "ns",
                                "value": ns / length, "length": length, "ns": ns,
                                "ticks": int(ns * 2), "cycles_est": ns * 2.5,
                                "counters": {"context_switches": 0}})
            out.append({"arm": arm, "point": point, "metric": "ns_per_load", "unit": "ns",
                        "value": 999.0, "length": 2000, "ns": 1.0e6, "rejected": True,
                        "reason": "context switch"})
    return out


def build_db(path, advice=True, note=None):
    """A survey (interrupted) with one complete, one failed and one interrupted
    run; returns (survey id, {kind: run id})."""
    rng = np.random.default_rng(3)
    fp = machine()
    with Store(path, memfx_version="test") as store:
        sid = store.begin_survey("quick", ["survey", "--quick"], note=note)
        params = {"min_size": 1024, "max_size": 4 << 20, "per_octave": 2, "npad": 7,
                  "pages": ["4k"], "refine": False, "samples": 5, "min_sample_ms": 0.5,
                  "cpu": -1, "seed": 1, "label": EVIL_PARAM}
        lat = store.begin_run("latency", params, "quick", fp, survey_id=sid)
        store.add_samples(lat, latency_samples(rng))
        store.finish_run(lat, "complete")

        failed = store.begin_run("copy", {"sizes": "1K,4K"}, "quick", fp, survey_id=sid)
        store.finish_run(failed, "failed", error=FAILED_ERROR)

        partial = store.begin_run("fill", {"values": "0,1"}, "quick", fp, survey_id=sid)
        store.add_samples(partial, [
            {"arm": arm, "point": {"size_bytes": size, "value": 0}, "metric": "gb_per_s",
             "unit": "GB/s", "value": float(rng.normal(20 if arm == "zero" else 17, 0.3)),
             "length": 1, "ns": 1e6}
            for size in (4096, 65536, 1 << 20) for arm in ("zero", "ones") for _ in range(4)])
        store.finish_run(partial, "interrupted", error="interrupted by Ctrl-C")
        if advice:
            store.set_artifact(lat, "advice", ADVICE)
        store.finish_survey(sid, "interrupted")
    return sid, {"latency": lat, "failed": failed, "interrupted": partial}


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "fixture.db"
    sid, runs = build_db(path)
    return path, sid, runs


@pytest.fixture(scope="module")
def written(fixture_db, tmp_path_factory):
    path, sid, runs = fixture_db
    out = tmp_path_factory.mktemp("out") / "report.html"
    with Store(path) as store:
        assert report.write_report(store, [], out) == str(out)
    return out.read_text(encoding="utf-8")


# ---- a strict little HTML checker ------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Checker(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.ids, self.images, self.links = [], [], [], [], []
        self.doctype, self.h1, self.tags = None, 0, {}
        self.first_tag_attrs = None
        self.text_by_id = {}
        self._open_ids = []          # (id, depth at which it was opened)

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.first_tag_attrs is None:
            self.first_tag_attrs = (tag, a)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.h1 += tag == "h1"
        if tag == "img":
            self.images.append(a.get("src") or "")
        if tag == "a":
            self.links.append(a.get("href") or "")
        if "id" in a:
            if a["id"] in self.ids:
                self.errors.append(f"duplicate id {a['id']}")
            self.ids.append(a["id"])
        if tag not in VOID:
            self.stack.append(tag)
            if "id" in a:
                self._open_ids.append((a["id"], len(self.stack)))
                self.text_by_id[a["id"]] = []

    def handle_startendtag(self, tag, attrs):
        if tag not in VOID:
            self.errors.append(f"self-closed non-void <{tag}/>")
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        if tag in VOID:
            self.errors.append(f"end tag for void element </{tag}>")
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        while self._open_ids and self._open_ids[-1][1] == len(self.stack):
            self._open_ids.pop()
        self.stack.pop()

    def handle_data(self, data):
        for i, _ in self._open_ids:
            self.text_by_id[i].append(data)

    def text(self, element_id):
        return " ".join(" ".join(self.text_by_id.get(element_id, [])).split())


def check(html_text):
    c = Checker()
    c.feed(html_text)
    c.close()
    assert c.errors == []
    assert c.stack == [], f"unclosed: {c.stack}"
    assert c.doctype and c.doctype.lower() == "doctype html"
    assert c.first_tag_attrs == ("html", {"lang": "en"})
    assert c.h1 == 1
    assert re.search(r'<meta charset="utf-8">', html_text)
    for href in c.links:        # every link is internal and lands somewhere
        assert href.startswith("#") and href[1:] in c.ids, href
    return c


# ---- the tests ---------------------------------------------------------------------

def test_report_is_valid_html_with_every_section(written):
    c = check(written)
    # the cards lead; the tall lists (every answer, the noise warnings, the
    # parameters) come last; a round-1 verdicts section exists only while
    # some run's experiment declares no questions
    order = ["summary", "machine", "advice", "experiments", "raw-data", "answers", "warnings",
             "presets"]
    for section in order:
        assert section in c.ids
    assert [c.ids.index(s) for s in order] == sorted(c.ids.index(s) for s in order)
    if "verdicts" in c.ids:
        assert c.ids.index("summary") < c.ids.index("verdicts") < c.ids.index("machine")
    assert "script" not in c.tags and "link" not in c.tags and "iframe" not in c.tags


def _section(html_text, section_id):
    start = html_text.index(f'<section id="{section_id}">')
    return html_text[start:html_text.index("</section>", start)]


def test_the_tall_lists_are_folded_at_the_end(written):
    """Every answer, the noise warnings and every run's parameters are each
    in a <details> that is closed until clicked; its summary says what is in
    it, and the machine section says where the warnings went."""
    for section_id, inner in (("answers", '<table class="answers">'),
                              ("warnings", '<table class="warnings">'),
                              ("presets", '<table class="params">')):
        html_text = _section(written, section_id)
        fold = html_text.index('<details class="fold"><summary>')
        assert fold < html_text.index(inner), section_id
        assert "<details open" not in html_text and 'class="fold" open' not in html_text
    assert re.search(r"<summary>\d+ answer\(s\): \d+ ", _section(written, "answers"))
    assert re.search(r"<summary>\d+ warning\(s\)", _section(written, "warnings"))
    assert "Every run&#x27;s parameters" in _section(written, "presets")
    # what stays open in the presets section: the survey and what quick traded away
    presets = _section(written, "presets")
    assert presets.index("What the quick preset traded away") < presets.index("<details")
    assert re.search(r'noise warning\(s\) from the machine and the samples: '
                     r'<a href="#warnings">at the end</a>', _section(written, "machine"))


def test_injected_markup_shows_only_as_text(written):
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in written
    assert "<script" not in written.lower()
    assert "&lt;b&gt;x&lt;/b&gt;" in written and "<b>x</b>" not in written
    assert "&lt;i&gt;checked by re-measuring&lt;/i&gt;" in written and "<i>checked" not in written
    c = check(written)
    assert EVIL_CPU in c.text("machine")          # shown, as text
    assert EVIL_PARAM in c.text("experiments")


def test_images_are_embedded_small_pngs_with_their_size(written):
    """Plots are PNG data URIs (text in an image cannot inject markup), drawn
    at the report's resolution and reduced to a palette, each with its pixel
    size in the tag so the page does not jump while it loads."""
    import io

    from PIL import Image
    c = check(written)
    assert c.images, "no plot embedded"
    assert all(src.startswith("data:image/png;base64,") for src in c.images)
    for src in c.images:
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as im:
            im.load()
            assert im.mode == "P" and len(im.getpalette()) // 3 <= report.PLOT_COLOURS
            assert f'width="{im.width}" height="{im.height}"' in written
            assert im.width in (round(plots.ONE_PANEL[0] * report.PLOT_DPI),
                                round(plots.FIGURE_WIDTH * report.PLOT_DPI))


def test_no_external_resources(written):
    assert not re.search(r"https?://", written)
    assert not re.search(r'\b(src|href)\s*=\s*"(?!data:|#)', written)
    assert "@import" not in written and "url(" not in written


def test_failed_and_interrupted_runs_are_labelled(written, fixture_db):
    c = check(written)
    _, _, runs = fixture_db
    text = c.text("experiments")
    assert "failed: worker crashed: SIGSEGV in kernel rep_movsb_loop" in text
    assert "interrupted: partial results" in text
    assert "Traceback" in text                     # the full error, in a <details>
    assert "Survey incomplete (interrupted)" in written
    raw = c.text("raw-data")
    for run_id in runs.values():
        assert f"memfx export {run_id} --format json" in raw
        assert f"memfx export {run_id} --format csv" in raw


def test_verdicts_list_every_finding_with_its_seed(written, fixture_db):
    path, _, runs = fixture_db
    with Store(path) as store:
        run = store.run(runs["latency"])
        doc = document(run, store.samples(run["id"]))
    assert doc["answers"], "the synthetic staircase should give answers"
    c = check(written)
    answers = c.text("answers")
    for a in doc["answers"]:
        assert a["question"] in answers
        assert " ".join(a["because"].split()) in answers
    assert "measured" in answers
    assert re.search(r"\d+(\.\d)? KiB", answers)
    # the failed run (copy: it declares questions) has no answers and says why
    assert "no verdict: failed: worker crashed" in c.text("answers")


def test_run_section_shows_question_table_params_and_duration(written, fixture_db):
    _, _, runs = fixture_db
    c = check(written)
    section_id = next(i for i in c.ids if i.endswith(runs["latency"]))
    text = c.text(section_id)
    assert "How long does a load take" in text
    for column in ("size_bytes", "arm", "median", "95% CI", "n", "rejected"):
        assert column in text
    assert "every point has" in text and "npad = 7" in text       # constant params said once
    assert re.search(r"took \d+(\.\d)? s", text)
    assert "preset quick" in text
    # the parameters and what quick traded away are at the end, after the
    # raw data, with a link from the run's section
    assert "per_octave" not in text
    assert c.ids.index("raw-data") < c.ids.index("presets")
    params = c.text("presets")
    assert "per_octave" in params and "in --full" in params
    assert "What the quick preset traded away" in params
    assert re.search(r"samples 5 \(full: \d+\)", params)
    assert f'href="#params-{section_id}"' in written


def test_advice_is_rendered_from_its_artifact(written):
    c = check(written)
    text = c.text("advice")
    assert "-mmemcpy-strategy=libcall:-1:align" in text
    assert "glibc.cpu.x86_rep_movsb_threshold" in text
    assert "gain" in text and "0.08" in text


def test_no_advice_section_without_advice(tmp_path):
    db = tmp_path / "plain.db"
    sid, _ = build_db(db, advice=False, note="quick keeps 2 sizes per octave <small>")
    with Store(db) as store:
        text = report.build_report(store, [sid[:6]])
    c = check(text)
    assert "advice" not in c.ids
    assert "quick keeps 2 sizes per octave &lt;small&gt;" in text    # the survey note


def test_advice_from_a_later_run_on_the_same_machine(tmp_path):
    db = tmp_path / "later.db"
    sid, _ = build_db(db, advice=False)
    with Store(db) as store:
        other = store.begin_run("advise", {}, "quick", machine())
        store.finish_run(other, "complete")
        store.set_artifact(other, "advice", {"gcc": "-mmemset-strategy=rep_byte:-1:align"})
        text = report.build_report(store, [sid])
    c = check(text)
    assert "advice" in c.ids
    assert "not part of this report" in c.text("advice")
    assert "-mmemset-strategy=rep_byte:-1:align" in c.text("advice")


def test_ids_resolve_to_surveys_and_runs(fixture_db):
    path, sid, runs = fixture_db
    with Store(path) as store:
        assert [r["id"] for r in report.resolve(store, []).runs] == \
            [runs["latency"], runs["failed"], runs["interrupted"]]
        sel = report.resolve(store, [runs["failed"][:-2], sid])
        assert [r["id"] for r in sel.runs][0] == runs["failed"]
        assert len(sel.runs) == 3 and len(sel.surveys) == 1       # no duplicates
        with pytest.raises(StoreError) as err:
            report.resolve(store, ["nope-123"])
        assert "nope-123" in str(err.value) and "\n" not in str(err.value)


def test_without_a_survey_the_latest_run_of_each_experiment(tmp_path):
    db = tmp_path / "runs.db"
    fp = machine()
    with Store(db) as store:
        ids = []
        for exp in ("latency", "fill", "latency"):
            rid = store.begin_run(exp, {}, "quick", fp)
            store.finish_run(rid, "complete")
            ids.append(rid)
        chosen = {r["id"] for r in report.resolve(store, []).runs}
        assert chosen == {ids[1], ids[2]}
        c = check(report.build_report(store, []))
        assert "no verdict" in c.text("verdicts" if "verdicts" in c.ids else "answers")
    with Store(tmp_path / "empty.db") as store:
        with pytest.raises(StoreError):
            report.resolve(store, [])


def test_key_table_is_capped_with_a_note():
    points = [{"arm": "a", "params": {"size_bytes": 64 * (i + 1)}, "metric": "ns_per_op",
               "unit": "ns", "median": 1.0 + i, "ci_low": 0.9, "ci_high": 1.1 + i, "n": 5,
               "rejected": 0, "cv": 0.01} for i in range(150)]
    view = report.RunView({"id": "r1", "experiment": "x"}, {"points": points}, None, None, "run-1")
    html_text = report.points_html(view, None)
    assert html_text.count("<tr>") == report.MAX_TABLE_ROWS + 1          # + header
    assert f"Showing {report.MAX_TABLE_ROWS} of 150 points" in html_text
    assert "memfx export r1 --format csv" in html_text
    assert "64 B" in html_text and "9.4 KiB" in html_text               # first and last rows


def test_exact_bytes_and_status_text():
    # sizes and values are memfx.model.units' (tests/test_formatting.py)
    assert report.exact_bytes_text(2112) == "2.1 KiB (2,112 B)"
    assert report.exact_bytes_text(49152) == "48 KiB"
    assert report.status_label({"status": "failed", "error": "boom\nmore"}) == ("bad", "failed: boom")
    assert report.status_label({"status": "interrupted"})[1] == "interrupted: partial results"
    assert report.seed_text("003") == "003 · store forwarding (a tale of two copies)"


def test_cli_report_writes_the_file(fixture_db, tmp_path, capsys):
    path, sid, _ = fixture_db
    out = tmp_path / "cli.html"
    assert main(["report", sid, "--db", str(path), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    check(out.read_text(encoding="utf-8"))


def test_cli_report_errors_are_one_line(fixture_db, tmp_path, capsys):
    assert main(["report", "--db", str(tmp_path / "missing.db"), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no results database" in err
    assert not (tmp_path / "missing.db").exists() and not (tmp_path / "x.html").exists()
    path, _, _ = fixture_db
    assert main(["report", "zzz", "--db", str(path), "-o", str(tmp_path / "y.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zzz" in err


def test_unwritable_output_is_one_line_error(fixture_db, tmp_path):
    path, sid, _ = fixture_db
    with Store(path) as store, pytest.raises(MemfxError) as err:
        report.write_report(store, [sid], tmp_path / "no" / "such" / "dir" / "r.html")
    assert "cannot write report" in str(err.value) and "\n" not in str(err.value)


def test_advise_documents_get_a_summary_of_decisions_and_gains(tmp_path):
    db = tmp_path / "advise.db"
    sid, runs = build_db(db, advice=False)
    advice = json.loads((DATA / "report_advice.json").read_text())
    with Store(db) as store:
        store.set_artifact(runs["latency"], "advice", advice)
        text = report.build_report(store, [sid])
    c = check(text)
    section = c.text("advice")
    assert "-mmemcpy-strategy=unrolled_loop:256:noalign,libcall:-1:noalign" in section
    assert "+8.7% [+5.3%, +12.4%]" in section            # 1 / ratio - 1, CI from 1 / ci_high - 1
    assert "glibc.cpu.x86_rep_movsb_threshold=4096" in section and "(now 2112)" in section
    assert "keep 2048" in section                         # no proposal: keep the default
    assert "advise" in section and "no measurable difference" in section
    assert "&lt;em&gt;another&lt;/em&gt;" in text and "<em>another" not in text
    assert "everything memfx advise stored" in section    # the full document, folded


def test_advice_of_unknown_shape_is_shown_as_stored():
    html_text = report.advice_html([({"id": "r1", "experiment": "copy", "started": "t"},
                                     {"kind": "memfx-advice", "gcc": 42}, True)], [])
    assert "42" in html_text                              # summary failed: generic view
    assert report.advice_summary_html({"other": 1}) is None


def test_group_findings_folds_numbered_series():
    from memfx.report.report import group_findings
    fs = [{"id": "level1_latency", "verdict": "measured"},
          {"id": "crossover_copy_a_vs_b", "verdict": "detected"},
          {"id": "crossover_copy_a_vs_b_2", "verdict": "detected"},
          {"id": "crossover_copy_a_vs_b_3", "verdict": "detected"},
          {"id": "knee_1", "verdict": "detected"},
          {"id": "knee_2", "verdict": "detected"}]
    groups = group_findings(fs)
    assert [g[0]["id"] for g in groups] == ["level1_latency", "crossover_copy_a_vs_b", "knee_1", "knee_2"]
    assert [m["id"] for m in groups[1][1]] == ["crossover_copy_a_vs_b_2", "crossover_copy_a_vs_b_3"]
    assert sum(1 + len(more) for _, more in groups) == len(fs)      # nothing lost


def test_a_card_leads_with_the_value_and_its_ci_in_brackets_and_the_verdict_in_words():
    from memfx.report.sections import _card, summary_html
    view = report.RunView({"id": "r1", "experiment": "latency"}, {"points": [{}]}, None, None,
                          "run-1-r1")
    a = {"question": "latency.memory", "asks": "Load-to-use latency of memory?", "seed": "004",
         "verdict": "measured", "value": 182.4, "unit": "ns", "ci_low": 177.2, "ci_high": 188.0,
         "because": "the DRAM plateau <b>", "headline": True}
    html_text = _card(view, a)
    c = Checker()
    c.feed(html_text)
    text = " ".join("".join(c.text_by_id.get("card-latency.memory", [])).split())
    assert "182 ns [177–188]" in text
    assert "measured" in text and "seed 004" in text and "&lt;b&gt;" in html_text
    sized = _card(view, dict(a, verdict="detected", value=49152, unit="bytes", ci_low=45056,
                             ci_high=53248))
    assert "48 KiB" in sized and "[44 KiB–52 KiB]" in sized and "yes: detected" in sized
    assert "[" not in _card(view, dict(a, ci_low=None, ci_high=None)).split("because")[0]
    # the seed stories lead, Drepper's (004) questions follow
    first = dict(a, question="fill.zero", seed="000", verdict="inconclusive")
    views = [report.RunView({"id": "r1", "experiment": "x"},
                            {"points": [{}], "answers": [a, first]}, None, None, "run-1")]
    page = summary_html(views, "<h3>Advice</h3>")
    assert page.index("card-fill.zero") < page.index("card-latency.memory") < page.index("Advice")
    assert "not sure: inconclusive" in page


def test_the_report_shows_what_the_document_says_of_experiment_and_machine():
    """The run section's title and parameters' meaning and the machine's
    capabilities and cautions come from the document (version 4), not from
    the registry or the machine module."""
    from memfx.analysis.documents import experiment_about
    from memfx.report.sections import machine_html, params_html, run_html, warnings_html
    fp = {"cpu": {"model_name": "Doc CPU"}, "flags": {}}
    caution = {"id": "from_doc", "message": "a caution the document holds", "advice": "none",
               "source": "machine"}
    doc = {"points": [], "answers": [], "warnings": [caution],
           "capabilities": {"avx2": True, "numa_nodes": 3},
           "experiment_info": {"title": "Told by the document", "question": "Asked here?",
                               "seeds": ["042"], "full_preset": {"n": 9},
                               "params": [{"name": "n", "kind": "int", "help": "how many"}]}}
    run = {"id": "r1", "experiment": "latency", "status": "complete", "machine": fp,
           "params": {"n": 2}, "preset": "quick"}
    view = report.RunView(run, doc, None, experiment_about(doc, "latency"), "run-1-r1")
    section = run_html(view, None, lambda v: "")
    assert "Told by the document" in section and "Asked here?" in section
    assert "how many" in params_html(view)
    machine = machine_html([view])
    assert "avx2 ✓" in machine and ">3<" in machine          # the flags say no AVX2
    warnings = warnings_html([view])
    assert warnings.count("from_doc") == 1                  # listed once, as the machine's


def test_a_document_before_version_4_is_described_by_the_analysis_layer():
    from memfx.analysis.documents import experiment_about, machine_facts
    about = experiment_about({"points": []}, "latency")
    assert about.title and "min_size" in {p.name for p in about.all_params()}
    assert experiment_about(None, "from_the_future") is None
    caps, cautions = machine_facts({"flags": {"avx2": True}}, [None, {"points": []}])
    assert caps["avx2"] is True and all(c["source"] == "machine" for c in cautions)


def test_a_drawn_figure_is_kept_beside_its_document_and_read_back(tmp_path, monkeypatch):
    """A report of stored documents reads their figures instead of drawing
    them; a figure is drawn again once its document changes."""
    import shutil

    from memfx.analysis.documents import stored_document
    path = tmp_path / "keep.db"
    sid, runs = build_db(path)
    with Store(path) as store:
        first = report.build_report(store, [sid], jobs=1)
    assert first.count("<figure>") >= 1
    figures = re.findall(r"<figure>.*?</figure>", first, flags=re.S)
    with Store(path) as store:
        name = report.figure_name()
        kept = store.derived(runs["latency"], name)
        assert kept["html"] in figures

    def no_drawing(*args, **kwargs):
        raise AssertionError("drew a figure that was kept")
    monkeypatch.setattr(plots, "draw", no_drawing)
    with Store(path) as store:
        again = report.build_report(store, [sid], jobs=1)
    assert re.findall(r"<figure>.*?</figure>", again, flags=re.S) == figures

    # the document changes (analysed again, here: one median moved): the
    # kept figure no longer matches it and is drawn again
    copy = tmp_path / "changed.db"
    shutil.copyfile(path, copy)
    with Store(copy) as store:
        run = store.run(runs["latency"])
        doc = stored_document(store, run)
        doc["points"][0]["median"] *= 2
        from memfx.analysis.answer_cache import analysis_key
        store.save_analysis(run["id"], analysis_key(), doc)
        assert store.derived(run["id"], name) is None      # went with the old document
        drawn = []
        monkeypatch.setattr(plots, "draw", lambda doc, save, **kw: drawn.append(doc["run_id"])
                            or ("data:image/png;base64,", 1, 1))
        report.build_report(store, [sid], jobs=1)
    assert runs["latency"] in drawn
    with Store(path) as store:
        before = stored_document(store, store.run(runs["latency"]))
    assert report.document_digest(doc) != report.document_digest(before)


def test_how_to_read_this_folds_every_term_under_the_first_screen(written):
    """Issue 42 item 4: a "how to read this" fold defines every term the
    report uses (the glossary's, one source), closed, after the summary."""
    from memfx.report.glossary import TERMS
    c = check(written)
    assert c.ids.index("summary") < c.ids.index("how-to-read") < c.ids.index("machine")
    fold = _section(written, "how-to-read")
    assert '<details class="fold"><summary>' in fold and "<details open" not in fold
    for term, _, _ in TERMS:
        assert f"<dt>{html.escape(term)}" in fold, term
    assert "<td>002</td>" in fold and '<a href="#how-to-read">' in written
