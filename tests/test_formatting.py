"""One formatter (memfx.model.units) for sizes, numbers and values: its rules, and
the terminal and the HTML report printing the same answer the same way."""
import html

import pytest

from memfx.model.units import (
    MISSING,
    NOT_FINITE,
    format_change,
    format_ci,
    format_estimate,
    format_number,
    format_ratio,
    format_size,
    format_value,
    parse_size,
)


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (1025, "1 KiB"), (1536, "1.5 KiB"),
    (49152, "48 KiB"), (888373, "867.6 KiB"), (5 << 18, "1.25 MiB"), (2 << 20, "2 MiB"),
    (960 << 20, "960 MiB"), (3 << 29, "1.5 GiB"), (25276502016, "23.5 GiB"), (1 << 40, "1 TiB"),
    (-49152, "-48 KiB"), (-512, "-512 B"), (49152.4, "48 KiB"),
    (None, MISSING), (float("nan"), NOT_FINITE), (float("inf"), NOT_FINITE)])
def test_format_size(n, text):
    assert format_size(n) == text


@pytest.mark.parametrize("n", [1023, 1024, 49152, 1536 << 10, 5 << 18, 3 << 29, 1 << 40])
def test_a_size_printed_exactly_parses_back(n):
    assert parse_size(format_size(n)) == n


@pytest.mark.parametrize("v, text", [
    (0.012345, "0.0123"), (1.0, "1"), (0.0, "0"), (-2.345, "-2.35"), (158.58, "159"),
    (1234.56, "1,235"), (-1234.56, "-1,235"), (123456.7, "123,457"), (9999, "9999"),
    (10000, "10,000"), (None, MISSING), (float("nan"), NOT_FINITE), (True, "True"), ("abc", "abc")])
def test_format_number(v, text):
    assert format_number(v) == text


def test_format_number_digits():
    assert format_number(1.23456, digits=5) == "1.2346"


@pytest.mark.parametrize("v, unit, text", [
    (182.4, "ns", "182 ns"), (45.26, "GB/s", "45.3 GB/s"), (6.612, "x", "6.61x"),
    (1.1734, "ratio", "1.17x"), (12.5, "%", "12.5%"), (49152, "bytes", "48 KiB"),
    (1023, "bytes", "1023 B"), (7, "", "7"), (7, None, "7"), (3, "ways", "3 ways"),
    (-0.5, "ns", "-0.5 ns"), (None, "ns", MISSING), (float("nan"), "bytes", NOT_FINITE)])
def test_format_value(v, unit, text):
    assert format_value(v, unit) == text


@pytest.mark.parametrize("lo, hi, unit, text", [
    (177.2, 188.4, "ns", "177–188 ns"), (6.4, 6.8, "x", "6.4–6.8x"),
    (0.95, 1.05, "ratio", "0.95–1.05x"), (0.95, 1.05, "", "0.95–1.05"),
    (42496, 46387, "bytes", "41.5 KiB–45.3 KiB"), (None, 2.0, "ns", MISSING),
    (1.0, None, "x", MISSING)])
def test_format_ci(lo, hi, unit, text):
    assert format_ci(lo, hi, unit) == text


def test_format_estimate():
    assert format_estimate(182.4, 177.2, 188.4, "ns") == "182 ns [177–188]"
    assert format_estimate(6.612, 6.4, 6.8, "x") == "6.61x [6.4–6.8]"
    assert format_estimate(49152, 45056, 53248, "bytes") == "48 KiB [44 KiB–52 KiB]"
    assert format_estimate(182.4, None, None, "ns") == "182 ns"
    # a CI that reads as the value says nothing more
    assert format_estimate(4.0, 4.0001, 3.9999, "ns") == "4 ns"
    assert format_estimate(None, 1.0, 2.0, "ns") == ""


def test_ratios_and_changes():
    assert format_ratio(1.0031, 0.998, 1.01) == "1.003 [0.998–1.010]"
    assert format_ratio(0.5) == "0.500"
    assert format_ratio(None, 1.0, 2.0) == MISSING
    assert format_change(0.08, 0.05, 0.11) == "+8.0% [+5.0%, +11.0%]"
    assert format_change(-0.02, -0.05, None) == "-2.0%"


# ---- the terminal and the HTML report print the same strings ------------------------

ANSWERS = [
    {"question": "latency.memory", "asks": "Load-to-use latency of memory?", "verdict": "measured",
     "value": 182.4, "unit": "ns", "ci_low": 177.2, "ci_high": 188.0, "because": "the plateau",
     "details": [{"label": "plateau", "value": 1234.5678, "size_bytes": 960 << 20}]},
    {"question": "latency.l2_capacity", "asks": "L2 capacity?", "verdict": "measured",
     "value": 1310720, "unit": "bytes", "ci_low": 1048576, "ci_high": 1572864,
     "because": "a knee"},
    {"question": "copy.aliasing", "asks": "4K aliasing?", "verdict": "detected",
     "value": 6.612, "unit": "x", "ci_low": 6.4, "ci_high": 6.8, "because": "slower"},
]


def _terminal_text(answers):
    from rich.console import Console

    from memfx.report.render import details_tables
    from memfx.report.screen import answer_lines
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    for t in details_tables(answers, width=200):
        console.print(t)
    return "\n".join(answer_lines(answers, 200, full=True)) + "\n" + console.export_text()


def _html_text(answers):
    from memfx.report import report
    view = report.RunView({"id": "r1", "experiment": "latency"},
                          {"points": [{}], "answers": answers}, None, None, "run-1-r1")
    return html.unescape(report.answers_html([view]))


def test_terminal_and_html_show_an_answer_with_the_same_strings():
    terminal, page = _terminal_text(ANSWERS), _html_text(ANSWERS)
    shown = ["182 ns [177–188]", "1.25 MiB [1 MiB–1.5 MiB]", "6.61x [6.4–6.8]", "1,235"]
    for a in ANSWERS:
        assert format_estimate(a["value"], a["ci_low"], a["ci_high"], a["unit"]) in shown
    for s in shown:
        assert s in terminal, s
        assert s in page, s
    # no older style left on either side
    for old in ("1280K", "1.25MB", "6.61×", "[177, 188]"):
        assert old not in terminal and old not in page


def test_a_findings_row_and_the_report_agree_on_value_and_ci():
    from rich.console import Console

    from memfx.report import report
    from memfx.report.render import findings_table
    from memfx.report.sections import verdicts_html
    f = {"id": "buffer", "verdict": "detected", "claim": "buffer", "value": 49152,
         "unit": "bytes", "ci_low": 45056, "ci_high": 53248}
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(findings_table([f]))
    view = report.RunView({"id": "r1", "experiment": "x", "status": "complete"},
                          {"points": [{}], "findings": [f]}, None, None, "run-1-r1")
    terminal, page = console.export_text(), html.unescape(verdicts_html([view]))
    for s in ("48 KiB", "44 KiB–52 KiB"):
        assert s in terminal and s in page


def test_a_long_table_prints_as_aligned_plain_lines_with_its_cells_cleaned():
    from memfx.report.render import PLAIN_TABLE_ROWS, long_table_lines
    rows = [(f"m-{i}", "CPU\x1b[2J name", str(i)) for i in range(PLAIN_TABLE_ROWS + 1)]
    lines = long_table_lines("Machines", ("machine", "CPU", "runs"), rows)
    assert lines[0] == "Machines" and lines[1].split() == ["machine", "CPU", "runs"]
    assert len(lines) == 3 + len(rows)
    assert all("\x1b" not in line for line in lines)
    # every row's columns start where the header's do
    start = lines[1].index("CPU")
    assert all(line[start:start + 3] == "CPU" for line in lines[3:])
    assert lines[-1].endswith(str(PLAIN_TABLE_ROWS))
