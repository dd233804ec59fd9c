"""show.indented_json: json.dumps(obj, indent=2, default=str) byte for byte,
laid out by the C encoder (`memfx show S --json` and `compare --json`
print with it)."""
import json
import math
import random
from pathlib import Path

import pytest

from memfx.cli.show import _MARK, indented_json


class Sub(dict):
    pass


ODD = [
    {}, [], (), {"a": {}}, [[]], {"x": [1, [2, {}]]}, "é\n\"", 1.5, None, True,
    {"k": math.nan, "i": math.inf, "j": -math.inf, "z": -0.0, "big": 10 ** 30, "tiny": 5e-324},
    {1: 2, 2.5: 3, False: 1, None: 4}, {"a": {1: 2, "b": [None]}},
    {"p": Path("/x")}, [Path("/y"), 1], (1, 2, (3,)), {"t": (1,)},
    {"b": [True, False, None]}, {"\u2603": "\ud83d\ude00", "ctl": "\x00\x1f\x7f"},
    Sub(a=Sub(b=1)), {"n": {"m": [{"q": []}]}}, [{"a": 1}, {"b": [1, 2]}],
    [{}, [], {"a": []}], {"a": [[], [[]]]},
    # the marker itself, anywhere: left to json.dumps, the same text
    {"m": [_MARK, {}]}, {_MARK: [1]}, [[_MARK]], {"a": [{"b": _MARK}, [3]]},
    # text that looks like the layout inside strings
    {"s": ["},\n  {", "],\n[", "\n  "], "t": {"u": "{\"a\": [1]}"}},
]


@pytest.mark.parametrize("obj", ODD, ids=range(len(ODD)))
def test_the_same_text_as_json_dumps(obj):
    assert indented_json(obj) == json.dumps(obj, indent=2, default=str)


def _random(rng, depth=0):
    kind = rng.random()
    if depth > 5 or kind < 0.45:
        return rng.choice([rng.random() * 10 ** rng.randint(-5, 12), rng.randint(-10 ** 6, 10 ** 6),
                           None, True, False, "", "ab\"c", "ü\n", math.nan, Path("/p")])
    n = rng.randint(0, 6)
    if kind < 0.75:
        return {rng.choice(["a", "b", "values", "ci", "é", "x y"]) + str(i):
                _random(rng, depth + 1) for i in range(n)}
    return [_random(rng, depth + 1) for _ in range(n)]


def test_random_documents():
    rng = random.Random(42)
    for _ in range(300):
        obj = {"doc": _random(rng), "rows": [_random(rng) for _ in range(3)]}
        assert indented_json(obj) == json.dumps(obj, indent=2, default=str)


def test_a_default_that_makes_containers():
    def default(o):
        return {"wrapped": [str(o)]}
    obj = {"p": Path("/x"), "l": [Path("/y"), {"q": Path("/z")}]}
    assert indented_json(obj, default) == json.dumps(obj, indent=2, default=default)


def test_what_json_dumps_refuses_it_refuses():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError):
        indented_json(cycle)
    with pytest.raises(TypeError):
        indented_json({(1, 2): 3})
