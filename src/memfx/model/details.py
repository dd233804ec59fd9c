"""Details: the sub-results an answer rests on, typed, with one constructor.

A detail is one crossover, matrix cell, cache level or table row under an
:class:`~memfx.model.answers.Answer`: a ``label``, a ``value`` in ``unit``
with its CI ``ci_low``..``ci_high``, an optional ``verdict``, and the
experiment's own columns in ``extra`` (sizes, arms, the point keys...).

Experiments build every detail with :func:`detail`; the JSON form
(:meth:`Detail.to_json`, :meth:`Detail.from_json`) is made only where a
document is written or read, so that a renamed key fails where it is built.

The JSON form keeps the keys, and their order, that the experiment gave:
the report's tables take their first columns in that order, and a stored
document reads the same whichever side of this type it was written from.
A detail reads as that JSON form too (a read-only mapping), for code that
looks up an experiment's own column by name.

Pure data: imports only the standard library and the model's verdict words.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from .findings import Verdict

__all__ = ["Detail", "detail", "CORE_FIELDS"]

# The fields every detail may carry, typed; any other key is the
# experiment's own column, kept in ``extra``.
CORE_FIELDS = ("label", "value", "unit", "ci_low", "ci_high", "verdict")


def _number_or_none(name: str, v: Any) -> None:
    # bool is an int to Python but never a measured figure
    if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
        raise TypeError(f"detail {name} must be a number or None, not {v!r}")


@dataclass(frozen=True, eq=False)
class Detail(Mapping[str, Any]):
    """One sub-result of an answer (see the module's docstring).

    Built by :func:`detail`; ``order`` is the JSON form's keys in the order
    given (a core field absent from it is absent from the JSON, as a key the
    experiment did not write).  Equal to a mapping with the same keys and
    values, as the dict it replaces was."""

    label: str
    value: Optional[float] = None
    unit: str = ""
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    verdict: Optional[str] = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    order: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # checked here, not only in detail(): a Detail made directly must be
        # as sound as one from the constructor
        if not isinstance(self.label, str):
            raise TypeError(f"detail label must be a str, not {self.label!r}")
        for name in ("value", "ci_low", "ci_high"):
            _number_or_none(name, getattr(self, name))
        if not isinstance(self.unit, str):
            raise TypeError(f"detail unit must be a str, not {self.unit!r}")
        # a verdict word (Verdict), or an experiment's own classification of
        # the row (a latency knee's "tlb" or cache level): kept as given
        if self.verdict is not None and not isinstance(self.verdict, str):
            raise TypeError(f"detail verdict must be a str, not {self.verdict!r}")
        clash = [k for k in self.extra if k in CORE_FIELDS]
        if clash:
            raise ValueError(f"detail extra repeats core field(s) {', '.join(clash)}")
        if not self.order:
            given = [k for k in CORE_FIELDS[1:] if getattr(self, k) not in (None, "")]
            object.__setattr__(self, "order", ("label", *given, *self.extra))
        elif (set(self.order) - set(CORE_FIELDS) != set(self.extra) or "label" not in self.order
              or len(set(self.order)) != len(self.order)):
            raise ValueError(f"detail order {self.order!r} does not name label and each "
                             f"extra key once")

    # -- the JSON form, as a read-only mapping --

    def __getitem__(self, key: str) -> Any:
        if key not in self.order:
            raise KeyError(key)
        if key in CORE_FIELDS:
            v = getattr(self, key)
            # the verdict's JSON form is its word
            return str(v) if isinstance(v, Verdict) else v
        return self.extra[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def __repr__(self) -> str:
        return f"Detail({', '.join(f'{k}={self[k]!r}' for k in self.order)})"

    def to_json(self) -> Dict[str, Any]:
        """The document's form: a dict of the keys given, in their order."""
        return {k: self[k] for k in self.order}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Detail":
        """A detail from its document form (``to_json``'s inverse)."""
        if "label" not in d:
            raise ValueError(f"a detail has a label: {dict(d)!r}")
        rest = {str(k): v for k, v in d.items() if k != "label"}
        return detail(d["label"], **rest)

    # -- changed copies (a detail is immutable) --

    def updated(self, **changes: Any) -> "Detail":
        """A copy with ``changes`` applied as dict.update would: a key it
        has keeps its place, a new one goes last (``ci`` as in detail())."""
        if "ci" in changes:
            ci = changes.pop("ci")
            changes["ci_low"], changes["ci_high"] = (None, None) if ci is None else ci
        merged = dict(self.to_json())
        merged.update(changes)
        return Detail.from_json(merged)

    def without(self, *keys: str) -> "Detail":
        """A copy without the named keys (absent ones are ignored)."""
        if "label" in keys:
            raise ValueError("a detail keeps its label")
        return Detail.from_json({k: v for k, v in self.to_json().items() if k not in keys})


def detail(label: str, **fields: Any) -> Detail:
    """The one constructor of a detail: ``label`` and its fields, by name,
    in the order the JSON form is to list them, e.g.
    ``detail("L2", value=1.4, unit="ratio", ci=(1.3, 1.5), verdict=DETECTED,
    level="L2")``.  ``value``, ``unit``, ``ci_low``, ``ci_high`` and
    ``verdict`` become typed fields (checked here); every other name is the
    experiment's own column.

    ``ci=(low, high)`` stands for ``ci_low=low, ci_high=high`` in its place,
    and ``ci=None`` for a detail without a CI (both written as null); a
    detail given neither writes no CI keys."""
    named: Dict[str, Any] = {}
    for k, v in fields.items():
        if k == "ci":
            if "ci_low" in fields or "ci_high" in fields:
                raise TypeError("detail takes ci or ci_low/ci_high, not both")
            named["ci_low"], named["ci_high"] = (None, None) if v is None else v
        else:
            named[k] = v
    core = {k: v for k, v in named.items() if k in CORE_FIELDS}
    extra = {k: v for k, v in named.items() if k not in CORE_FIELDS}
    return Detail(label=label, value=core.get("value"), unit=core.get("unit", ""),
                  ci_low=core.get("ci_low"), ci_high=core.get("ci_high"),
                  verdict=core.get("verdict"), extra=extra, order=("label", *named))
