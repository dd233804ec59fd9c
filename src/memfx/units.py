"""Parsing and printing of sizes: "48K", "2MiB", "1.5G" <-> bytes."""
import re

from .errors import ParamError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)
_FACTOR = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text, name="size"):
    """Bytes from an int or a string with a binary suffix (K = KiB = 1024)."""
    if isinstance(text, bool):
        raise ParamError(f"{name}: expected a size like 32K or 4MiB, got {text!r}")
    if isinstance(text, (int, float)):
        if text < 0:
            raise ParamError(f"{name}: size must not be negative, got {text}")
        return int(text)
    m = _SIZE.match(str(text))
    if not m or (m.group(3) and m.group(3).lower() == "i"):
        raise ParamError(f"{name}: expected a size like 32K, 4MiB or 1G, got {text!r}")
    return int(float(m.group(1)) * _FACTOR[m.group(2).upper()])


def format_size(n):
    """Short binary form: 49152 -> '48K', 3 << 20 -> '3M', 1000 -> '1000';
    exact when that takes at most four digits, else one decimal ('22.5G')."""
    n = int(n)
    for suffix in ("T", "G", "M", "K"):
        f = _FACTOR[suffix]
        if n >= f and n % f == 0 and n // f < 10000:
            return f"{n // f}{suffix}"
    for suffix in ("T", "G", "M", "K"):
        f = _FACTOR[suffix]
        if n >= f:
            return f"{n / f:.1f}{suffix}"
    return str(n)


def human_size(n):
    """Approximate binary size for people: 25276502016 -> '23.5 GiB'."""
    n = float(n)
    for suffix, f in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:.1f} {suffix}"
    return f"{n:.0f} B"


def signed_percent(x) -> str:
    """A relative change as a signed percentage (0.125 -> "+12.5%"); "?" for
    None."""
    return "?" if x is None else f"{x * 100:+.1f}%"
