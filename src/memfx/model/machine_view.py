"""A machine's fingerprint as one typed, read-only value: its cache levels,
the last-level cache, the level a working set lives in, its label and id.

lab/machine.py collects the fingerprint as a plain dict, and that dict is what
documents, the store and the worker job carry (its schema is unchanged).
Code that reads the cache levels wraps the dict here (`Fingerprint.of`), so
"which caches count", "what a level is called" and "what if none is
reported" are decided once.  Standard library only: a base module.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

# Sizes that scale with the last-level cache (sweep ends, a loader's buffer,
# a list that must miss) need one when the fingerprint reports no cache:
# an old document, a VM hiding its caches, a test's bare machine.  32 MiB is
# a common LLC of today's servers and desktops.
FALLBACK_LLC_BYTES = 32 << 20

# Where a working set larger than every reported cache lives.
DRAM = "DRAM"

# The caches a load or a store goes through; instruction caches are left out.
DATA_CACHE_TYPES = ("Data", "Unified")


def level_name(level: int) -> str:
    """The name a cache level is printed with: L1d, L2, L3, ... (as the
    answers and the fingerprint's cache_sizes name them)."""
    return "L1d" if level == 1 else f"L{level}"


def _positive_int(value: object) -> int | None:
    """A positive whole number, given as an int, a whole float or digits
    (older documents), else None."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value)         # ASCII digits only: isdigit() took "²", which int() refuses
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value > 0 else None


@dataclass(frozen=True)
class CacheLevel:
    """One data or unified cache level as the OS (or CPUID) reports it."""
    level: int
    size_bytes: int
    line_bytes: int | None = None
    ways: int | None = None
    sets: int | None = None
    # the CPUs sharing it, as sysfs writes them ("0-1"); None when not reported
    shared_cpu_list: str | None = None

    @property
    def name(self) -> str:
        return level_name(self.level)

    @property
    def key(self) -> str:
        """The name in lower case (l1d, l2, l3): how bandwidth's question ids
        and point parameters name a level."""
        return self.name.lower()


@dataclass(frozen=True)
class Fingerprint:
    """What memfx reads from a fingerprint dict, typed.  Build it with `of`."""
    caches: tuple[CacheLevel, ...] = ()       # L1 first, one per level
    label: str = "unknown CPU"
    id: str = ""

    @classmethod
    def of(cls, machine: object) -> Fingerprint:
        """The Fingerprint of a fingerprint dict (machine.fingerprint(), or a
        stored document's "machine").  Missing or malformed parts are taken
        as not reported: None, {}, an old document's dict all give a value."""
        machine = machine if isinstance(machine, dict) else {}
        return cls(caches=_cache_levels(machine.get("caches")), label=label(machine),
                   id=machine_id(machine))

    def cache(self, level: int) -> CacheLevel | None:
        """The CacheLevel of `level` (1, 2, ...), or None when not reported."""
        return next((c for c in self.caches if c.level == level), None)

    @property
    def llc(self) -> CacheLevel | None:
        """The last cache level, or None when no cache is reported."""
        return self.caches[-1] if self.caches else None

    @property
    def llc_bytes(self) -> int:
        """The last level's size; FALLBACK_LLC_BYTES when no cache is reported."""
        return self.llc.size_bytes if self.llc else FALLBACK_LLC_BYTES

    def level_of(self, size_bytes: float) -> str:
        """The name of the smallest level that holds `size_bytes`, else DRAM."""
        return next((c.name for c in self.caches if size_bytes <= c.size_bytes), DRAM)

    @property
    def level_names(self) -> list[str]:
        """Every name level_of can return, smallest first (DRAM last)."""
        return [c.name for c in self.caches] + [DRAM]


def _cache_levels(entries: object) -> tuple[CacheLevel, ...]:
    """The data/unified levels of a fingerprint's "caches" list, sorted by
    level, the first sized entry of each level (sysfs lists cpu0's caches)."""
    by_level: dict[int, CacheLevel] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("type") not in DATA_CACHE_TYPES:
            continue
        level, size = _positive_int(entry.get("level")), _positive_int(entry.get("size_bytes"))
        if level is None or size is None or level in by_level:
            continue
        shared = entry.get("shared_cpu_list")
        by_level[level] = CacheLevel(
            level, size, line_bytes=_positive_int(entry.get("line_bytes")),
            ways=_positive_int(entry.get("ways")), sets=_positive_int(entry.get("sets")),
            shared_cpu_list=str(shared) if shared else None)
    return tuple(by_level[level] for level in sorted(by_level))


# ---- identity: what does not change between runs on one machine ------------

# Fingerprint parts that identify the machine (CPU model and microcode,
# caches, ISA flags, kernel, glibc, hypervisor).  Everything else -- free
# memory, the calibrated TSC, governor, THP mode, perf_event_paranoid -- is
# the state of one run and is stored with the run, not hashed.
_IDENTITY_CPU = ("vendor", "family", "model", "stepping", "model_name", "microcode",
                 "logical_cpus", "sockets", "cores", "smt", "numa_nodes")


def identity(fp: object) -> dict[str, Any]:
    """The stable part of a fingerprint dict (a dict), from which machine_id is hashed."""
    fp = fp if isinstance(fp, dict) else {}

    def part(name: str) -> dict[str, Any]:
        v = fp.get(name)
        return v if isinstance(v, dict) else {}

    cpu = part("cpu")
    glibc = part("glibc")
    total = part("memory").get("total_bytes")
    return {
        "cpu": {k: cpu.get(k) for k in _IDENTITY_CPU},
        "flags": part("flags"),
        "caches": [{k: c.get(k) for k in ("level", "type", "size_bytes", "line_bytes", "ways",
                                          "sets")}
                   for c in (fp.get("caches") or []) if isinstance(c, dict)],
        "kernel": part("kernel").get("release"),
        "glibc": glibc.get("version"),
        "hypervisor": part("hypervisor").get("vendor"),
        # MemTotal moves by a few KiB across boots and kernel builds: GiB is stable.
        "memory_gib": round(total / 2 ** 30) if isinstance(total, (int, float)) else None,
        "page_size": part("memory").get("page_size"),
    }


def machine_id(fp: object) -> str:
    """Stable machine id: 'm-' and 16 hex digits of the identity's SHA-256."""
    text = json.dumps(identity(fp), sort_keys=True, default=str)
    return "m-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def label(fp: object) -> str:
    """A short human name of the machine: CPU model name, family/model, vCPUs."""
    cpu = (fp if isinstance(fp, dict) else {}).get("cpu")
    cpu = cpu if isinstance(cpu, dict) else {}
    name = cpu.get("model_name") or cpu.get("vendor") or "unknown CPU"
    fam = cpu.get("family")
    mod = cpu.get("model")
    fm = f" (family {fam} model {mod})" if fam is not None and mod is not None else ""
    n = cpu.get("logical_cpus")
    return f"{name}{fm}" + (f", {n} CPUs" if n else "")
