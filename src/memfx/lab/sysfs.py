"""Small readers of the machine's files (sysfs, procfs), each returning None
instead of raising, and the parsers of what they hold: sizes ("48K"), CPU
lists ("0-2,5"), /proc/cpuinfo.  Part of the fingerprint (machine.py
re-exports the public ones); standard library only."""
from __future__ import annotations

import os
import re

# --------------------------------------------------------------------------
# small readers; every one returns None instead of raising

def _path(root, rel):
    return os.path.join(root, rel.lstrip("/"))


def _read(root, rel):
    try:
        with open(_path(root, rel), "r", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _read_int(root, rel):
    text = _read(root, rel)
    if text is None:
        return None
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def _listdir(root, rel):
    try:
        return sorted(os.listdir(_path(root, rel)))
    except OSError:
        return []


def _int_or_none(text):
    if text is None:
        return None
    try:
        return int(str(text).strip(), 0)
    except ValueError:
        try:
            return int(float(str(text).strip()))
        except ValueError:
            return None


def parse_size(text):
    """Parse a sysfs-style size: "48K" -> 49152, "105M", "1G", "64" (bytes).

    Returns None for anything it does not understand."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        return None
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(m.group(1)) * mult[m.group(2).upper()]


def parse_cpu_list(text, ordered=False):
    """Parse a kernel cpu list ("0-3,8,10-11") into ints; bad parts are
    skipped.  Sorted and without repeats, unless ``ordered``: then in the
    order written (memfx's own lists put the measuring CPU first, "1,0").
    The one CPU-list parser of memfx."""
    cpus = []
    if not text:
        return []
    for part in str(text).strip().split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = part.split("-", 1)
                cpus.extend(range(int(lo), int(hi) + 1))
            else:
                cpus.append(int(part))
        except ValueError:
            continue
    if ordered:
        return list(dict.fromkeys(cpus))
    return sorted(set(cpus))


def parse_cpuinfo(text):
    """/proc/cpuinfo -> list of dicts, one per blank-line-separated block."""
    blocks, cur = [], {}
    for line in (text or "").splitlines():
        if not line.strip():
            if cur:
                blocks.append(cur)
                cur = {}
            continue
        if ":" in line:
            k, v = line.split(":", 1)
            cur[k.strip()] = v.strip()
    if cur:
        blocks.append(cur)
    return blocks
