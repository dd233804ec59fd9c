"""Relative survey ids (issue 42): latest-survey, previous and
latest-survey~N name complete surveys counted back from the newest; a
count past the oldest is one clear error."""
import time

import pytest

from memfx.model.errors import StoreError
from memfx.store.sql import surveys_back
from memfx.store.store import Store


def test_the_one_rule_for_relative_survey_ids():
    assert surveys_back("latest-survey") == 0
    assert surveys_back("previous") == 1
    assert surveys_back("latest-survey~3") == 3
    for other in ("latest", "latest-survey~", "latest-survey~-1", "latest-survey~x", "s-1",
                  "latest-survey~1 ", "previous~1"):
        assert surveys_back(other) is None, other


def test_previous_and_latest_survey_n_count_back_over_complete_surveys(tmp_path):
    store = Store(str(tmp_path / "r.db"))
    made = []
    for i in range(4):
        sid = store.begin_survey("quick", ["survey", "--quick"])
        time.sleep(0.002)
        store.finish_survey(sid, "complete" if i != 2 else "interrupted")
        made.append(sid)
    done = [s for i, s in enumerate(made) if i != 2]     # newest last
    assert store.survey("latest-survey")["id"] == done[-1]
    assert store.survey("previous")["id"] == done[-2]
    assert store.survey("latest-survey~1")["id"] == done[-2]
    assert store.survey("latest-survey~2")["id"] == done[-3]
    with pytest.raises(StoreError, match="3 complete surveys"):
        store.survey("latest-survey~3")
    with pytest.raises(StoreError, match="names a survey"):
        store.run("previous")
