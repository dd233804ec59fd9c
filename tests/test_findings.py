from pathlib import Path

import numpy as np
import pytest

from memfx.model import findings
from memfx.model.errors import ParamError
from memfx.model.findings import (
    DETECTED,
    INCONCLUSIVE,
    NOT_DETECTED,
    THRESHOLDS,
    Caution,
    Threshold,
    effect_verdict,
    noise_cautions,
    threshold,
)
from memfx.model.stats import ratio_of_medians

# ---------------------------------------------------------------- thresholds

def test_thresholds_are_named_data():
    expected = {"noisy_cv": 0.10, "calibration_drift": 0.05, "effect_min": 0.03,
                "ci_level": 0.95, "min_samples": 5, "rejected_share": 0.2}
    for name, value in expected.items():
        t = THRESHOLDS[name]
        assert isinstance(t, Threshold) and t.name == name
        assert t.value == value == threshold(name)
        assert t.unit and t.meaning
    with pytest.raises(ParamError):
        threshold("no_such_threshold")


def test_a_threshold_has_one_declaration():
    """One name, one value: a second declaration of a name (min_ci_samples
    was declared twice, with two wordings) is refused, not silently won."""
    with pytest.raises(ValueError, match="declared twice"):
        findings._thresholds(Threshold("x", 1, "s", "a"), Threshold("x", 2, "s", "b"))
    source = Path(findings.__file__).read_text()
    for name in THRESHOLDS:
        assert source.count(f'Threshold("{name}"') == 1, name


# ---------------------------------------------------------------- data types

def test_round_one_findings_are_gone():
    # issue 24: declared questions and answers replaced them (schema 3)
    for name in ("Finding", "effect_finding", "measured_finding"):
        assert not hasattr(findings, name)


def test_caution_as_dict_and_back():
    c = Caution(id="hypervisor", message="running under a hypervisor")
    assert c.as_dict() == {"id": "hypervisor", "message": "running under a hypervisor",
                           "value": None, "threshold": None, "advice": ""}
    assert Caution.from_dict(c.as_dict()) == c


# ---------------------------------------------------------------- verdict rules

@pytest.mark.parametrize("ratio, low, high, n, verdict", [
    (1.20, 1.15, 1.25, 20, DETECTED),
    (0.80, 0.75, 0.85, 20, DETECTED),
    (1.00, 0.99, 1.01, 20, NOT_DETECTED),
    (1.00, 0.97, 1.03, 20, NOT_DETECTED),     # band edges are inside
    (1.03, 1.01, 1.06, 20, INCONCLUSIVE),     # straddles the band edge
    (1.00, 0.80, 1.20, 20, INCONCLUSIVE),     # too wide
    (1.20, 1.15, 1.25, 4, INCONCLUSIVE),      # too few samples
    (1.20, float("nan"), 1.25, 20, INCONCLUSIVE),
    (1.20, None, 1.25, 20, INCONCLUSIVE),
])
def test_effect_verdict_rules(ratio, low, high, n, verdict):
    assert effect_verdict(ratio, low, high, n, n) == verdict


def test_effect_verdict_overrides():
    assert effect_verdict(1.05, 1.04, 1.06, 20, 20) == DETECTED
    assert effect_verdict(1.05, 1.04, 1.06, 20, 20, effect_min=0.10) == NOT_DETECTED
    assert effect_verdict(1.2, 1.15, 1.25, 3, 3, min_samples=3) == DETECTED


def samples(median, noise, n, seed):
    rng = np.random.default_rng(seed)
    return median * (1 + noise * rng.standard_normal(n))


def verdict_of(a, b):
    r = ratio_of_medians(a, b)
    return effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])


def test_planted_effect_is_detected():
    assert verdict_of(samples(1.17, 0.03, 20, 1), samples(1.0, 0.03, 20, 2)) == DETECTED


def test_no_effect_is_not_detected():
    # same distribution; enough precision for the CI to fit inside +-3 %
    assert verdict_of(samples(1.0, 0.01, 20, 3), samples(1.0, 0.01, 20, 4)) == NOT_DETECTED
    assert verdict_of(samples(1.0, 0.03, 100, 3), samples(1.0, 0.03, 100, 4)) == NOT_DETECTED


def test_no_effect_with_too_little_precision_is_never_detected():
    # 3 % noise, n=20: the CI is about +-2.5 % wide, so "no effect" is often
    # inconclusive against a 3 % band, but it must never read as detected
    for seed in range(20):
        v = verdict_of(samples(1.0, 0.03, 20, 2 * seed), samples(1.0, 0.03, 20, 2 * seed + 1))
        assert v in (NOT_DETECTED, INCONCLUSIVE)


def test_few_or_noisy_samples_are_inconclusive():
    assert verdict_of(samples(1.17, 0.03, 3, 5), samples(1.0, 0.03, 3, 6)) == INCONCLUSIVE
    assert verdict_of(samples(1.17, 0.40, 6, 7), samples(1.0, 0.40, 6, 8)) == INCONCLUSIVE


# ---------------------------------------------------------------- cautions

def point(arm, size, cv, n=20, rejected=0):
    return {"arm": arm, "params": {"size_bytes": size}, "cv": cv, "n": n,
            "rejected": rejected}


def test_noise_cautions_flags_noisy_point_only():
    cautions = noise_cautions([point("random", 32768, 0.20), point("random", 65536, 0.01)])
    assert [c.id for c in cautions] == ["noisy_points"]
    c = cautions[0]
    assert "1 of 2 points" in c.message
    assert "size_bytes=32768" in c.message and "65536" not in c.message
    assert c.value == 0.20 and c.threshold == 0.10 and c.advice
    assert set(c.as_dict()) == {"id", "message", "value", "threshold", "advice"}


def test_noise_cautions_rejected_share():
    cautions = noise_cautions([point("seq", 4096, 0.01, n=10, rejected=5),
                               point("seq", 8192, 0.01, n=10, rejected=1)])
    assert [c.id for c in cautions] == ["rejected_samples"]
    assert cautions[0].value == pytest.approx(5 / 15)
    assert "size_bytes=4096" in cautions[0].message
    assert "8192" not in cautions[0].message


def test_noise_cautions_quiet_and_missing_cv():
    assert noise_cautions([]) == []
    assert noise_cautions([point("a", 1, 0.05), point("b", 1, None)]) == []
    assert noise_cautions([point("a", 1, 0.05)], noisy_cv=0.05)[0].id == "noisy_points"


def test_module_imports_only_numpy_stdlib_and_memfx():
    import ast
    tree = ast.parse(Path(findings.__file__).read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module}
    assert roots <= {"__future__", "math", "dataclasses", "enum", "typing", "numpy"}
