"""The fleet report of a thousand machines in a real browser (the driver of
tests/test_report_browser.py: headless Chromium by Selenium; skipped
without it, except under CI): at 1280 px nothing scrolls sideways, not
even inside a table's own box, and every question shows each CPU model's
spread across its hosts as a visible bar on the question's scale."""
import pytest

from memfx.report.fleet import fleet_html
from test_fleet import _synthetic_fleet
from test_report_browser import _load, _missing, _no_horizontal_scroll, browser  # noqa: F401 (fixture)

pytestmark = pytest.mark.measuring

MODELS = 24
QUESTIONS = 80


@pytest.fixture(scope="module", params=["machine", "cpu-model"])
def page(request, tmp_path_factory):
    import os
    why = _missing()
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the browser test must run under CI: {why}")
        pytest.skip(why)
    out = tmp_path_factory.mktemp("fleet") / f"fleet-{request.param}.html"
    out.write_text(fleet_html(_synthetic_fleet(1000, n_models=MODELS, n_questions=QUESTIONS,
                                               group_by=request.param)))
    return out


def test_a_thousand_machines_read_at_1280_px(browser, page):  # noqa: F811 (the fixture)
    inner_w, _ = _load(browser, page, 1280)
    assert inner_w == 1280
    _no_horizontal_scroll(browser, inner_w)
    # not even a table's own box scrolls sideways
    boxes = browser.execute_script("""
        return Array.from(document.querySelectorAll('.scroll'))
          .filter(b => b.scrollWidth > b.clientWidth + 1).length;""")
    assert boxes == 0
    # per question: one bar per model, wide enough to read, each host
    # spread drawn inside its bar with a visible width
    bars = browser.execute_script("""
        return Array.from(document.querySelectorAll('table.models')).map(t =>
          Array.from(t.querySelectorAll('.dist')).map(d => {
            const bar = d.getBoundingClientRect(), line = d.querySelector('i').getBoundingClientRect(),
                  tick = d.querySelector('b').getBoundingClientRect();
            return [bar.width, line.width, line.left >= bar.left - 1 && line.right <= bar.right + 1,
                    tick.left >= bar.left - 1 && tick.right <= bar.right + 1];
          }));""")
    assert len(bars) == QUESTIONS
    for question in bars:
        assert len(question) == MODELS
        assert all(width >= 150 for width, _, _, _ in question)
        assert all(line > 0 and inside and tick for _, line, inside, tick in question)
        # the models differ: their spreads do not all sit at one place
        assert len({round(w) for _, w, _, _ in question}) > 1 or MODELS == 1
    errors = [entry for entry in browser.get_log("browser") if entry.get("level") == "SEVERE"]
    assert errors == []
