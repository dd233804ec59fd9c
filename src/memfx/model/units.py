"""Sizes, numbers and units: parsing sizes people type, and the one way
memfx prints sizes, numbers and values with their unit and CI.

Parsing ("48K", "2MiB", "1.5G" -> bytes) is `parse_size`; counts and
other numbers are `parse_int` and `parse_number` (ASCII digits only).  Printing is the
same on the terminal, in the HTML report, in compare, advice and fleet views
and in the sentences of the answers, so "48 KiB" never reads "48KB" on
another page:

    format_size(49152)                -> "48 KiB"    binary units, a space,
    format_size(3 << 20)              -> "3 MiB"     whole values exact,
    format_size(1.5 * (1 << 30))      -> "1.5 GiB"   exact in two decimals,
    format_size(5 << 18)              -> "1.25 MiB"  else to one:
    format_size(888373)               -> "867.6 KiB"
    format_size(1023)                 -> "1023 B"
    format_number(0.012345)           -> "0.0123"    `digits` significant digits,
    format_number(123456.7)           -> "123,457"   thousands grouped
    format_number(None)               -> "–"         (MISSING); NaN, inf -> "n/a"
    format_value(182.4, "ns")         -> "182 ns"
    format_value(6.612, "x")          -> "6.61x"     ratios ("x", "ratio") as "x"
    format_value(12.5, "%")           -> "12.5%"
    format_value(49152, "bytes")      -> "48 KiB"
    format_value(7, "")               -> "7"         counts carry no unit
    format_ci(177.2, 188.4, "ns")     -> "177–188 ns"
    format_ci(6.4, 6.8, "x")          -> "6.4–6.8x"
    format_ci(42496, 46387, "bytes")  -> "41.5 KiB–45.3 KiB"
    format_estimate(182.4, 177.2, 188.4, "ns") -> "182 ns [177–188]"
    format_ratio(1.0031, 0.998, 1.01) -> "1.003 [0.998–1.010]"  B/A, a check's ratio
    signed_percent(0.125)             -> "+12.5%"    a relative change,
    format_change(0.08, 0.05, 0.11)   -> "+8.0% [+5.0%, +11.0%]"  with its CI
"""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from .errors import ParamError

if TYPE_CHECKING:
    from typing import TypeGuard

# Numbers people type are read from ASCII digits only, by the parsers
# below: Python's int(), float() and re's \d also take other scripts' digits
# ("٤٢" read as 42), and int()/float() take "1_000", "inf" and "nan".  Every
# number the command line and the API take (sizes, counts, durations,
# thresholds) goes through parse_int, parse_number or these patterns.
UNSIGNED_DECIMAL = r"[0-9]+(?:\.[0-9]+)?"
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_SIZE = re.compile(rf"^\s*({UNSIGNED_DECIMAL})\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE | re.ASCII)
_FACTOR = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# The largest size memfx takes: x86-64's user address space (128 TiB); no
# buffer can be larger, and the limit keeps float overflow out of parse_size.
MAX_SIZE = 1 << 47

# What a missing value prints as; a value that is not finite prints NOT_FINITE.
MISSING = "–"
NOT_FINITE = "n/a"
_BINARY_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
_RATIO_UNITS = ("x", "ratio")
# A share (of a time, of the CPU time) is stored as a fraction and printed as
# a percentage: "15.2%", never "0.152x", which reads as a speed-up.
SHARE_UNIT = "share"
# Units printed right after the number, without a space.
_ATTACHED_UNITS = ("x", "%")


def parse_size(text: Any, name: str = "size") -> int:
    """Bytes from an int or a string with a binary suffix (K = KiB = 1024),
    ASCII digits only, at most MAX_SIZE."""
    if isinstance(text, bool):
        raise ParamError(f"{name}: expected a size like 32K or 4MiB, got {text!r}")
    if isinstance(text, (int, float)):
        if text != text:
            raise ParamError(f"{name}: expected a size like 32K or 4MiB, got {text!r}")
        if text < 0:
            raise ParamError(f"{name}: size must not be negative, got {text}")
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m or (m.group(3) and m.group(3).lower() == "i"):
            raise ParamError(f"{name}: expected a size like 32K, 4MiB or 1G, got {_shown(text)}")
        value = float(m.group(1)) * _FACTOR[m.group(2).upper()]     # inf past float's range
    if value > MAX_SIZE:
        raise ParamError(f"{name}: {_shown(text)} does not fit: larger than the address "
                         f"space ({format_size(MAX_SIZE)})")
    return int(value)


def _shown(text: object) -> str:
    """A value in a one-line message, shortened (400 nines stay readable)."""
    shown = repr(text)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def parse_int(text: Any, name: str = "value") -> int:
    """An integer from an int (a float only when whole) or from a string of
    ASCII digits with an optional sign; ParamError otherwise."""
    if isinstance(text, bool):
        raise ParamError(f"{name}: expected an integer, got {text!r}")
    if isinstance(text, int):
        return text
    if isinstance(text, float):
        if math.isfinite(text) and text.is_integer():
            return int(text)
        raise ParamError(f"{name}: expected an integer, got {text!r}")
    t = text.strip() if isinstance(text, str) else None
    if t is None or not _INT.fullmatch(t) or len(t) > 40:
        raise ParamError(f"{name}: expected an integer, got {_shown(text)}")
    return int(t)


def parse_number(text: Any, name: str = "value") -> float:
    """A finite number from an int, a float or a string of ASCII digits
    ("2", "-0.5", "1e-3"); ParamError otherwise (also for inf and nan)."""
    if isinstance(text, bool):
        raise ParamError(f"{name}: expected a number, got {text!r}")
    if isinstance(text, (int, float)):
        value = text
    elif isinstance(text, str) and _NUMBER.fullmatch(text.strip()):
        value = float(text.strip())
    else:
        raise ParamError(f"{name}: expected a number, got {_shown(text)}")
    try:
        value = float(value)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise ParamError(f"{name}: expected a finite number, got {_shown(text)}")
    return value


def _is_number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _not_a_value(v: object) -> str | None:
    """MISSING or NOT_FINITE when ``v`` cannot be printed as a number, else None."""
    if v is None:
        return MISSING
    if _is_number(v) and not math.isfinite(v):
        return NOT_FINITE
    return None


def format_size(n: Any) -> str:
    """Bytes in binary units with a space: "48 KiB", "1.5 GiB", "1023 B"
    (exact when two decimals say it exactly, else to one decimal)."""
    odd = _not_a_value(n)
    if odd is not None:
        return odd
    n = int(round(n))
    for unit, factor in _BINARY_UNITS:
        if abs(n) >= factor:
            if n % factor == 0:
                return f"{n // factor} {unit}"
            # 1.25 MiB (a sweep's step) stays exact; 867.55 KiB reads 867.6
            decimals = 2 if (n * 100) % factor == 0 else 1
            return f"{n / factor:.{decimals}f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{n} B"


def format_number(v: Any, digits: int = 3) -> str:
    """A number for people: ``digits`` significant digits, thousands grouped
    from 1,000 (floats) or 10,000 (ints); anything else as str()."""
    odd = _not_a_value(v)
    if odd is not None:
        return odd
    if not _is_number(v):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if v == 0:
        return "0"
    return f"{v:.{digits}g}"


def _with_unit(number: str, unit: str) -> str:
    if unit in _RATIO_UNITS:
        unit = "x"
    if unit in _ATTACHED_UNITS:
        return number + unit
    return f"{number} {unit}".strip()


def format_value(v: Any, unit: str | None = "") -> str:
    """A value with its unit: sizes for "bytes", "6.61x" for ratios, "12.5%",
    "182 ns", a bare number for counts (no unit)."""
    unit = unit or ""
    if _not_a_value(v) is not None or not _is_number(v):
        return format_number(v)
    if unit == "bytes":
        return format_size(v)
    if unit == SHARE_UNIT:
        return format_number(v * 100) + "%"
    return _with_unit(format_number(v), unit)


def _bare(v: Any, unit: str) -> str:
    """A CI bound without its unit (sizes keep theirs: they differ in unit)."""
    if _not_a_value(v) is None and unit == SHARE_UNIT:
        return format_number(v * 100)
    return format_size(v) if unit == "bytes" and _not_a_value(v) is None else format_number(v)


def format_ci(lo: Any, hi: Any, unit: str | None = "") -> str:
    """A confidence interval with its unit once: "177–188 ns", "6.4–6.8x";
    sizes each with their unit; MISSING when a bound is missing."""
    if lo is None or hi is None:
        return MISSING
    unit = unit or ""
    if unit == "bytes":
        return f"{_bare(lo, unit)}–{_bare(hi, unit)}"
    return _with_unit(f"{_bare(lo, unit)}–{_bare(hi, unit)}",
                      "%" if unit == SHARE_UNIT else unit)


def format_estimate(v: Any, lo: Any, hi: Any, unit: str | None = "") -> str:
    """The value with its unit and the CI in brackets: "182 ns [177–188]";
    the CI is left out when missing or when it reads as the value; "" without
    a value."""
    if v is None:
        return ""
    unit = unit or ""
    shown = format_value(v, unit)
    if lo is None or hi is None or _bare(lo, unit) == _bare(hi, unit) == _bare(v, unit):
        return shown
    return f"{shown} [{_bare(lo, unit)}–{_bare(hi, unit)}]"


def format_ratio(v: Any, lo: Any = None, hi: Any = None) -> str:
    """A ratio of two measurements to three decimals (the changes judged on
    it are a few percent), its CI in brackets when known: "1.003 [0.998–1.010]"."""
    odd = _not_a_value(v)
    if odd is not None:
        return odd
    if _not_a_value(lo) is not None or _not_a_value(hi) is not None:
        return f"{v:.3f}"
    return f"{v:.3f} [{lo:.3f}–{hi:.3f}]"


def signed_percent(x: float | None) -> str:
    """A relative change as a signed percentage (0.125 -> "+12.5%"); "?" for
    None."""
    return "?" if x is None else f"{x * 100:+.1f}%"


def format_change(change: float | None, lo: float | None = None,
                  hi: float | None = None) -> str:
    """A relative change with its CI: "+8.0% [+5.0%, +11.0%]" (a comma, not a
    dash, between signed bounds: "-5.0%–-1.0%" would misread)."""
    if _not_a_value(lo) is not None or _not_a_value(hi) is not None:
        return signed_percent(change)
    return f"{signed_percent(change)} [{signed_percent(lo)}, {signed_percent(hi)}]"


def param_value_text(name: str, value: Any, kind: str = "") -> str:
    """A parameter's value for people, as `--set` takes it: sizes as K/M/G
    (a Param of kind "size", or a name ending in _bytes), lists joined by
    commas, booleans as true/false, floats as format_number.  The one
    parameter formatter (the CLI's help, the tables, the report)."""
    import json as _json
    kind = kind or ""
    if isinstance(value, (list, tuple)):
        inner = kind[5:] if kind.startswith("list:") else ""
        return ",".join(param_value_text(name, v, inner) for v in value)
    if _is_number(value) and _not_a_value(value) is None \
            and (kind == "size" or str(name).endswith("_bytes")):
        return format_size(value)
    if isinstance(value, dict):
        return _json.dumps(value, sort_keys=True)
    if isinstance(value, bool):
        return "true" if value else "false"
    return format_number(value) if isinstance(value, float) else str(value)


def gain_text(ratio: Any, lo: Any = None, hi: Any = None) -> str:
    """A check's gain from its time ratio advised / current and the ratio's
    CI: gain = 1 / ratio - 1, bounds likewise ("+8.7% [+5.3%, +12.4%]"); a
    ratio's CI comes from a log-scale bootstrap, so a gain is never below
    -100 %.  MISSING when no ratio was measured.  The one gain formatter."""
    if not (_is_number(ratio) and _not_a_value(ratio) is None and ratio > 0):
        return MISSING
    if not all(_is_number(x) and _not_a_value(x) is None and x > 0 for x in (lo, hi)):
        return signed_percent(1 / ratio - 1)
    return format_change(1 / ratio - 1, 1 / hi - 1, 1 / lo - 1)
