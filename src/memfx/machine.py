"""Machine fingerprint: everything about the environment that can change a
memory-system measurement (step 1 of the measurement protocol).

Public API
----------
fingerprint(core=None, sysroot="/") -> dict     JSON-serialisable description
fingerprint_hash(fp) -> str                     sha256 over the stable part
cautions(fp) -> list[dict]                      noise warnings, as data
capabilities(fp) -> dict                        compact yes/no summary
glibc_tunables(ld_so=None, sysroot="/", timeout=5.0) -> dict
parse_ld_diagnostics(text) -> dict              parser for ld.so --list-diagnostics
parse_size(text) -> int | None                  "48K" -> 49152
parse_cpu_list(text) -> list[int]               "0-2,5" -> [0, 1, 2, 5]

Only the standard library is imported at module level, so this loads without
the C extension.  The core (memfx._core) is optional and duck-typed: it may
offer ``cpuid(leaf, subleaf) -> (eax, ebx, ecx, edx)``, ``tsc_hz() -> float``,
``perf_probe(type, config) -> errno or 0`` and ``build_info`` (a dict).  Any
of them may be missing; the fingerprint then says what it could not learn.

Nothing here is an error on an ordinary machine: a VM without a PMU, a kernel
without cpufreq, an old glibc -- each becomes a value of None/False plus a
reason.  Only a sysroot that does not exist is refused (ParamError).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import re
import struct
import subprocess
import sys

from memfx.errors import ParamError

FINGERPRINT_VERSION = 1

# perf_event_open(2) constants (include/uapi/linux/perf_event.h).
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_SW_PAGE_FAULTS = 2

# Flags that matter to memory experiments, as reported in fp["flags"].
FLAG_NAMES = (
    "erms", "fsrm", "fzrm", "fsrs", "fsrc",
    "sse2", "avx", "avx2", "avx512f", "avx512bw", "avx512vl",
    "clflushopt", "clwb", "movdir64b",
    "rdtscp", "rdpid", "constant_tsc", "nonstop_tsc", "invariant_tsc",
    "hypervisor", "prefetchw",
)
# Our name -> the name /proc/cpuinfo uses, where they differ.
_CPUINFO_ALIASES = {"prefetchw": "3dnowprefetch"}

# Friendly names for CPUID leaf 0x40000000 signatures (EBX, ECX, EDX).
_HV_SIGNATURES = {
    "KVMKVMKVM": "KVM",
    "Linux KVM Hv": "KVM",          # KVM with Hyper-V enlightenments
    "Microsoft Hv": "Hyper-V",
    "VMwareVMware": "VMware",
    "XenVMMXenVMM": "Xen",
    "TCGTCGTCGTCG": "QEMU-TCG",
    "VBoxVBoxVBox": "VirtualBox",
    "bhyve bhyve": "bhyve",
    "ACRNACRNACRN": "ACRN",
    "QNXQVMBSQG": "QNX",
    "lrpepyh  vr": "Parallels",
    "SRESRESRESRE": "Apple-HVF",
}
_HV_TYPES = {"xen": "Xen", "kvm": "KVM"}   # /sys/hypervisor/type

_GIB = 1 << 30


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


def parse_cpu_list(text):
    """Parse a kernel cpu list ("0-3,8,10-11") into sorted ints; bad parts are skipped."""
    cpus = set()
    if not text:
        return []
    for part in str(text).strip().split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = part.split("-", 1)
                cpus.update(range(int(lo), int(hi) + 1))
            else:
                cpus.add(int(part))
        except ValueError:
            continue
    return sorted(cpus)


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


# --------------------------------------------------------------------------
# the optional C core

def _resolve_core(core):
    """Returns (core or None, origin)."""
    if core is not None:
        return core, "injected"
    try:
        from memfx import _core as mod  # noqa: PLC0415 - lazy on purpose
    except Exception:  # ImportError, or a broken build: fall back, never fail
        return None, None
    return mod, "memfx._core"


def _fn(core, name):
    f = getattr(core, name, None) if core is not None else None
    return f if callable(f) else None


def _regs(cpuid, leaf, subleaf=0):
    """One CPUID query as four unsigned 32-bit ints, or None."""
    if cpuid is None:
        return None
    try:
        r = cpuid(leaf, subleaf)
        return tuple(int(x) & 0xFFFFFFFF for x in tuple(r)[:4])
    except Exception:
        return None


def _max_leaf(cpuid, base=0):
    r = _regs(cpuid, base, 0)
    return r[0] if r else None


def _bit(value, n):
    return bool((value >> n) & 1)


def _cpuid_string_flags(cpuid):
    """String-operation feature bits straight from CPUID, or None without cpuid.

    Intel SDM Vol. 2A, CPUID instruction, Table 3-8 ("Information Returned by
    CPUID Instruction"):
      leaf 07H subleaf 0, EBX bit 9  = ERMS  (Enhanced REP MOVSB/STOSB)
      leaf 07H subleaf 0, EDX bit 4  = FSRM  (Fast Short REP MOV)
      leaf 07H subleaf 1, EAX bit 10 = FZRM  (fast zero-length REP MOVSB)
      leaf 07H subleaf 1, EAX bit 11 = FSRS  (fast short REP STOSB)
      leaf 07H subleaf 1, EAX bit 12 = FSRC  (fast short REP CMPSB/SCASB)
    Leaf 07H subleaf 0 EAX reports the highest valid subleaf.
    """
    maxleaf = _max_leaf(cpuid)
    if maxleaf is None:
        return None
    out = dict.fromkeys(("erms", "fsrm", "fzrm", "fsrs", "fsrc"), False)
    if maxleaf < 7:
        return out
    l7 = _regs(cpuid, 7, 0)
    if l7 is None:
        return None
    eax, ebx, _ecx, edx = l7
    out["erms"] = _bit(ebx, 9)
    out["fsrm"] = _bit(edx, 4)
    if eax >= 1:
        l71 = _regs(cpuid, 7, 1)
        if l71 is not None:
            out["fzrm"] = _bit(l71[0], 10)
            out["fsrs"] = _bit(l71[0], 11)
            out["fsrc"] = _bit(l71[0], 12)
    return out


def _cpuid_vendor(cpuid):
    r = _regs(cpuid, 0, 0)
    if not r:
        return None
    return struct.pack("<III", r[1], r[3], r[2]).rstrip(b"\0").decode("ascii", "replace")


def cpu_identity(cpuid=None):
    """(vendor, display family, display model) of the CPU from CPUID leaves 0
    and 1, the key of every per-model table (PMU event encodings); ``cpuid``
    is a cpuid(leaf, subleaf) function, the core's by default.  Intel SDM
    Vol. 2A, CPUID leaf 01H: the extended family is added when the base
    family is 0xF, the extended model prefixed when it is 6 or 0xF (AMD's
    CPUID Specification #25481 applies the same rules)."""
    if cpuid is None:
        from ._lab import cpuid          # noqa: PLC0415 - the core, only when asked
    eax = _regs(cpuid, 1, 0)[0]
    base_family, base_model = (eax >> 8) & 0xF, (eax >> 4) & 0xF
    family = base_family + ((eax >> 20) & 0xFF if base_family == 0xF else 0)
    model = base_model | (((eax >> 16) & 0xF) << 4 if base_family in (6, 0xF) else 0)
    return _cpuid_vendor(cpuid), family, model


def _hypervisor_signature(cpuid):
    r = _regs(cpuid, 0x40000000, 0)
    if not r:
        return None
    sig = struct.pack("<III", r[1], r[2], r[3]).rstrip(b"\0").decode("ascii", "replace")
    return sig or None


def _cpuid_caches(cpuid, vendor):
    """Deterministic cache parameters: leaf 04H (Intel) or 8000001DH (AMD/Hygon).

    Both use the same layout: EAX[4:0] type (0 none, 1 data, 2 instruction,
    3 unified), EAX[7:5] level; EBX[11:0] line-1, EBX[21:12] partitions-1,
    EBX[31:22] ways-1; ECX sets-1."""
    if cpuid is None:
        return []
    if vendor in ("AuthenticAMD", "HygonGenuine"):
        leaf = 0x8000001D
        top = _max_leaf(cpuid, 0x80000000)
    else:
        leaf = 4
        top = _max_leaf(cpuid)
    if top is None or top < leaf:
        return []
    names = {1: "Data", 2: "Instruction", 3: "Unified"}
    caches = []
    for sub in range(16):
        r = _regs(cpuid, leaf, sub)
        if r is None or (r[0] & 0x1F) == 0:
            break
        eax, ebx, ecx, _ = r
        line = (ebx & 0xFFF) + 1
        parts = ((ebx >> 12) & 0x3FF) + 1
        ways = ((ebx >> 22) & 0x3FF) + 1
        sets = ecx + 1
        caches.append({
            "level": (eax >> 5) & 0x7,
            "type": names.get(eax & 0x1F, "Unknown"),
            "size_bytes": ways * parts * line * sets,
            "line_bytes": line,
            "ways": ways,
            "sets": sets,
            "shared_cpu_list": None,
        })
    return caches


def _cpuid_legacy_l3(cpuid, vendor):
    """L3 size from the legacy AMD leaf 8000_0006H, EDX[31:18] in 512 KiB
    units (AMD64 APM Vol. 3, CPUID Fn8000_0006_EDX "L3Size"), or None.

    In a VM this leaf can describe the host's L3 rather than the guest's
    share: on the Zen 4 / Zen 5 KVM guests memfx was run on it said 320 /
    384 MiB while leaf 8000_001DH and sysfs said 32 MiB -- and glibc sized
    its cache-derived thresholds (non_temporal_threshold = 3/4 of it) from
    the larger figure (ld.so --list-diagnostics: level3_cache_size)."""
    if cpuid is None or vendor not in ("AuthenticAMD", "HygonGenuine"):
        return None
    top = _max_leaf(cpuid, 0x80000000)
    if top is None or top < 0x80000006:
        return None
    r = _regs(cpuid, 0x80000006, 0)
    if r is None:
        return None
    units = (r[3] >> 18) & 0x3FFF
    return units * (512 << 10) or None


def _llc_section(caches, cpuid, vendor, glibc_diag):
    """The last-level cache size as each source sees it: sysfs (what the
    kernel says), CPUID's deterministic leaf (4 or 8000_001DH), the legacy AMD
    leaf 8000_0006H, and glibc (the size its thresholds come from).  `agree`
    is False when they differ: glibc's non_temporal_threshold then does not
    follow this machine's cache (issue 16)."""
    def l3_of(cs):
        sizes = [c["size_bytes"] for c in cs or []
                 if c.get("type") in ("Data", "Unified") and c.get("level") and c.get("size_bytes")]
        levels = [c["level"] for c in cs or [] if c.get("type") in ("Data", "Unified") and c.get("level")]
        if not sizes:
            return None
        top = max(levels)
        return max(c["size_bytes"] for c in cs if c.get("level") == top
                   and c.get("type") in ("Data", "Unified") and c.get("size_bytes"))
    cache = (glibc_diag or {}).get("cache") or {}
    thresholds = (glibc_diag or {}).get("thresholds") or {}
    glibc_l3 = cache.get("level3_cache_size") or cache.get("shared_cache_size")
    views = {
        "sysfs_bytes": l3_of(caches),
        "cpuid_bytes": l3_of(_cpuid_caches(cpuid, vendor)),
        "cpuid_legacy_bytes": _cpuid_legacy_l3(cpuid, vendor),
        "glibc_bytes": glibc_l3,
        "glibc_non_temporal_threshold": thresholds.get("non_temporal_threshold"),
    }
    known = {v for k, v in views.items() if k.endswith("_bytes") and v}
    views["agree"] = len(known) <= 1
    return views


def llc_bytes(fp, source="sysfs"):
    """The last-level cache size from one source of fp["llc"] (sysfs,
    cpuid, cpuid_legacy, glibc), falling back to the largest data/unified
    cache in fp["caches"]; None when unknown.  Advice should prefer a
    measured capacity (the latency experiment's last knee) over all of these."""
    v = (fp.get("llc") or {}).get(f"{source}_bytes")
    if v:
        return v
    sizes = [c.get("size_bytes") for c in fp.get("caches") or []
             if c.get("type") in ("Data", "Unified") and c.get("size_bytes")]
    return max(sizes) if sizes else None


# AMD APM Vol. 3, CPUID Fn8000_0006: the 4-bit associativity code of the
# L2 TLB fields (and of the L2/L3 cache fields) -> ways; 0xF = fully associative.
_AMD_L2_ASSOC = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 8: 16, 0xA: 32, 0xB: 48, 0xC: 64,
                 0xD: 96, 0xE: 128, 0xF: "full"}

# Intel SDM Vol. 2A, CPUID leaf 02H, Table 3-12: the data/shared TLB
# descriptors we decode (entries, ways, page sizes, level).  0xFE = "see leaf
# 18H".  Instruction-TLB descriptors are left out: memfx measures loads.
_INTEL_LEAF2_TLB = {
    0x03: (64, 4, "4K", 1), 0x04: (8, 4, "4M", 1), 0x05: (32, 4, "4M", 1),
    0x5A: (32, 4, "2M/4M", 1), 0x5B: (64, "full", "4K/4M", 1), 0x5C: (128, "full", "4K/4M", 1),
    0x5D: (256, "full", "4K/4M", 1), 0xB3: (128, 4, "4K", 1), 0xB4: (256, 4, "4K", 1),
    0xBA: (64, 4, "4K", 1), 0xC0: (8, 4, "4K/4M", 1), 0xC1: (1024, 8, "4K/2M", 2),
    0xC3: (1536, 6, "4K/2M", 2), 0xCA: (512, 4, "4K", 2),
}


def _amd_tlb(cpuid):
    """AMD APM Vol. 3, CPUID Fn8000_0005 (L1) and Fn8000_0006 (L2) TLB fields.
    Fn8000_0005 EAX = 2M/4M pages, EBX = 4K pages: [31:24] data assoc (0xFF =
    full), [23:16] data entries, [15:8] instruction assoc, [7:0] instruction
    entries.  Fn8000_0006 EAX = 2M/4M, EBX = 4K: [31:28] data assoc code,
    [27:16] data entries, [15:12]/[11:0] instruction.  Fn8000_0019 EAX/EBX:
    1 GiB pages, L1 and L2 data in the same places as Fn8000_0006."""
    top = _max_leaf(cpuid, 0x80000000)
    out = []
    if top is None or top < 0x80000005:
        return out
    l5 = _regs(cpuid, 0x80000005, 0)
    if l5:
        for reg, page in ((l5[1], "4K"), (l5[0], "2M")):
            entries, assoc = (reg >> 16) & 0xFF, (reg >> 24) & 0xFF
            if entries:
                out.append({"level": 1, "type": "Data", "page": page, "entries": entries,
                            "ways": "full" if assoc == 0xFF else assoc})
    for leaf, pages in ((0x80000006, ((1, "4K"), (0, "2M"))),
                        (0x80000019, ((1, "1G"),))):
        if top < leaf:
            continue
        r = _regs(cpuid, leaf, 0)
        if not r:
            continue
        for reg_index, page in pages:
            reg = r[reg_index]
            entries, code = (reg >> 16) & 0xFFF, (reg >> 28) & 0xF
            if entries and code:
                out.append({"level": 2, "type": "Data", "page": page, "entries": entries,
                            "ways": _AMD_L2_ASSOC.get(code)})
    return out


def _intel_tlb(cpuid):
    """Intel SDM Vol. 2A, CPUID leaf 18H (deterministic address translation
    parameters), else the leaf 02H descriptors above.  Leaf 18H sub-leaf n:
    EBX[0..3] 4K/2M/4M/1G pages, EBX[31:16] ways; ECX sets; EDX[4:0] type
    (1 data, 2 instruction, 3 unified, 4 load-only, 5 store-only), EDX[7:5]
    level, EDX[8] fully associative; sub-leaf 0 EAX = the last sub-leaf."""
    maxleaf = _max_leaf(cpuid)
    out = []
    if maxleaf is None:
        return out
    if maxleaf >= 0x18:
        r0 = _regs(cpuid, 0x18, 0)
        last = min(r0[0], 32) if r0 else -1
        names = {1: "Data", 3: "Unified", 4: "Load"}
        for sub in range(last + 1):
            r = _regs(cpuid, 0x18, sub)
            if not r or (r[3] & 0x1F) not in names:
                continue
            _eax, ebx, ecx, edx = r
            ways = (ebx >> 16) & 0xFFFF
            pages = "/".join(p for bit, p in enumerate(("4K", "2M", "4M", "1G")) if _bit(ebx, bit))
            out.append({"level": (edx >> 5) & 7, "type": names[edx & 0x1F], "page": pages,
                        "entries": ways * ecx, "ways": "full" if _bit(edx, 8) else ways})
        if out:
            return out
    if maxleaf >= 2:
        r = _regs(cpuid, 2, 0)
        if r:
            for i, reg in enumerate(r):
                if reg >> 31:          # bit 31 set: the register holds no descriptors
                    continue
                for byte in range(1 if i == 0 else 0, 4):   # AL is a count, not a descriptor
                    d = (reg >> (8 * byte)) & 0xFF
                    if d in _INTEL_LEAF2_TLB:
                        entries, ways, page, level = _INTEL_LEAF2_TLB[d]
                        out.append({"level": level, "type": "Data" if level == 1 else "Unified",
                                    "page": page, "entries": entries, "ways": ways})
    return out


def cpuid_tlb(cpuid, vendor):
    """The data TLBs CPUID reports, as a list of {level, type, page, entries,
    ways}, or [] when it reports none (or there is no cpuid)."""
    if cpuid is None:
        return []
    try:
        if vendor in ("AuthenticAMD", "HygonGenuine"):
            return _amd_tlb(cpuid)
        return _intel_tlb(cpuid)
    except Exception:
        return []


def tlb_entries(fp, level, page="4K"):
    """Entries of the level-`level` data (or unified) TLB for `page` pages
    that the fingerprint's CPUID section reports, or None."""
    for t in (fp or {}).get("tlb") or []:
        if isinstance(t, dict) and t.get("level") == level and page in str(t.get("page", "")).split("/") \
                and t.get("type") in ("Data", "Unified", "Load"):
            return t.get("entries")
    return None


# --------------------------------------------------------------------------
# sections of the fingerprint

def _cpu_section(root, blocks, cpuid):
    first = blocks[0] if blocks else {}
    vendor = first.get("vendor_id") or _cpuid_vendor(cpuid)
    cpu = {
        "vendor": vendor,
        "family": _int_or_none(first.get("cpu family")),
        "model": _int_or_none(first.get("model")),
        "stepping": _int_or_none(first.get("stepping")),
        "model_name": first.get("model name"),
        "microcode": first.get("microcode"),
    }

    sysdir = "sys/devices/system/cpu"
    cpu_dirs = sorted(int(d[3:]) for d in _listdir(root, sysdir) if re.fullmatch(r"cpu\d+", d))
    present = parse_cpu_list(_read(root, f"{sysdir}/present"))
    n_blocks = sum(1 for b in blocks if "processor" in b)
    cpu["logical_cpus"] = len(present) or len(cpu_dirs) or n_blocks or None

    online_text = _read(root, f"{sysdir}/online")
    online = parse_cpu_list(online_text)
    if online_text is None:
        online = [int(b["processor"]) for b in blocks if str(b.get("processor", "")).isdigit()]
        online_text = _format_cpu_list(online) if online else None
    cpu["online_cpus"] = online_text
    cpu["online_count"] = len(online) or None

    # topology of the online cpus (or all cpu dirs)
    threads, packages, cores = [], set(), set()
    for n in online or cpu_dirs:
        topo = f"{sysdir}/cpu{n}/topology"
        sib = parse_cpu_list(_read(root, f"{topo}/thread_siblings_list"))
        if sib:
            threads.append(len(sib))
        pkg = _read_int(root, f"{topo}/physical_package_id")
        core_id = _read_int(root, f"{topo}/core_id")
        if pkg is not None:
            packages.add(pkg)
            if core_id is not None:
                cores.add((pkg, core_id))
    tpc = max(threads) if threads else None
    if tpc is None:
        sib, ncores = _int_or_none(first.get("siblings")), _int_or_none(first.get("cpu cores"))
        if sib and ncores:
            tpc = max(1, sib // ncores)
    smt_active = _read_int(root, f"{sysdir}/smt/active")
    cpu["smt"] = tpc
    cpu["smt_active"] = bool(smt_active) if smt_active is not None else (tpc > 1 if tpc else None)
    if not packages:
        packages = {b["physical id"] for b in blocks if "physical id" in b}
    cpu["sockets"] = len(packages) or None
    cpu["cores"] = len(cores) or None

    nodedir = "sys/devices/system/node"
    if os.path.isdir(_path(root, nodedir)):
        cpu["numa_nodes"] = sum(1 for d in _listdir(root, nodedir) if re.fullmatch(r"node\d+", d))
    else:
        cpu["numa_nodes"] = None
    return cpu


def _format_cpu_list(cpus):
    cpus = sorted(set(cpus))
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def _flags_section(cpuinfo_flags, cpuid):
    """Returns (flags, flags_source, flags_cpuid)."""
    flags, source = {}, {}
    for name in FLAG_NAMES:
        if name == "invariant_tsc":
            continue
        flags[name] = _CPUINFO_ALIASES.get(name, name) in cpuinfo_flags
        source[name] = "cpuinfo"
    flags["invariant_tsc"] = flags["constant_tsc"] and flags["nonstop_tsc"]
    source["invariant_tsc"] = "cpuinfo"
    # CPUID wins for the string-op bits: older kernels do not list
    # fzrm/fsrs/fsrc in /proc/cpuinfo, and current ones hide them; glibc
    # itself decides from CPUID, not from the kernel's list.
    from_cpuid = _cpuid_string_flags(cpuid)
    if from_cpuid is not None:
        for name, value in from_cpuid.items():
            flags[name] = value
            source[name] = "cpuid"
    if not cpuinfo_flags and cpuid is not None:
        r1 = _regs(cpuid, 1, 0)
        if r1 is not None:          # CPUID.01H:ECX[31] = hypervisor present
            flags["hypervisor"] = _bit(r1[2], 31)
            source["hypervisor"] = "cpuid"
    ordered = {k: flags[k] for k in FLAG_NAMES}
    return ordered, {k: source[k] for k in FLAG_NAMES}, from_cpuid


def _cache_section(root, cpuid, vendor, first_block):
    base = "sys/devices/system/cpu/cpu0/cache"
    idx = [d for d in _listdir(root, base) if re.fullmatch(r"index\d+", d)]
    idx.sort(key=lambda d: int(d[5:]))
    caches = []
    for d in idx:
        p = f"{base}/{d}"
        caches.append({
            "level": _read_int(root, f"{p}/level"),
            "type": _read(root, f"{p}/type"),
            "size_bytes": parse_size(_read(root, f"{p}/size")),
            "line_bytes": _read_int(root, f"{p}/coherency_line_size"),
            "ways": _read_int(root, f"{p}/ways_of_associativity"),
            "sets": _read_int(root, f"{p}/number_of_sets"),
            "shared_cpu_list": _read(root, f"{p}/shared_cpu_list"),
        })
    source = "sysfs" if caches else None
    if not caches:
        caches = _cpuid_caches(cpuid, vendor)
        source = "cpuid" if caches else None

    sizes, line = {}, None
    for c in caches:
        if c["type"] not in ("Data", "Unified") or c["level"] is None:
            continue
        name = "L1d" if c["level"] == 1 else f"L{c['level']}"
        if name not in sizes:
            sizes[name] = c["size_bytes"]
        if c["level"] == 1 and line is None:
            line = c["line_bytes"]
    if line is None:
        line = next((c["line_bytes"] for c in caches if c["line_bytes"]), None)
    if line is None:
        line = _int_or_none(first_block.get("cache_alignment") or first_block.get("clflush size"))
    return caches, source, sizes, line


def _bracketed(text):
    if text is None:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else (text.strip() or None)


def _memory_section(root):
    info = {}
    for line in (_read(root, "proc/meminfo") or "").splitlines():
        m = re.match(r"([^:]+):\s+(\d+)(?:\s+(kB))?", line)
        if m:
            info[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    try:
        page = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        page = None
    thp = "sys/kernel/mm/transparent_hugepage"
    return {
        "total_bytes": info.get("MemTotal"),
        "available_bytes": info.get("MemAvailable"),
        "page_size": page,
        "hugepage_size": info.get("Hugepagesize"),
        "hugepages_total": info.get("HugePages_Total"),
        "hugepages_free": info.get("HugePages_Free"),
        "thp_enabled": _bracketed(_read(root, f"{thp}/enabled")),
        "thp_defrag": _bracketed(_read(root, f"{thp}/defrag")),
    }


def _tsc_section(root, cpuid, tsc_hz, flags, cpuinfo_flags):
    hz, source, base_mhz, crystal = None, "unavailable", None, None
    khz = _read_int(root, "sys/devices/system/cpu/cpu0/tsc_freq_khz")
    if khz:
        hz, source = float(khz) * 1000.0, "sysfs_tsc_freq_khz"
    maxleaf = _max_leaf(cpuid)
    if maxleaf is not None and maxleaf >= 0x15:
        # Leaf 15H: EAX = denominator, EBX = numerator of the TSC/crystal
        # ratio, ECX = crystal Hz; TSC = ECX * EBX / EAX when all non-zero.
        r = _regs(cpuid, 0x15, 0)
        if r is not None:
            den, num, xtal = r[0], r[1], r[2]
            crystal = xtal or None
            if hz is None and den and num and xtal:
                hz, source = xtal * num / den, "cpuid_0x15"
    if maxleaf is not None and maxleaf >= 0x16:
        r = _regs(cpuid, 0x16, 0)       # leaf 16H EAX[15:0] = base MHz (a hint)
        if r is not None and (r[0] & 0xFFFF):
            base_mhz = r[0] & 0xFFFF
    if hz is None and tsc_hz is not None:
        try:
            v = float(tsc_hz())
            if v > 0:
                hz, source = v, "calibrated"
        except Exception:
            pass
    return {
        "hz": hz,
        "source": source,
        "invariant": flags.get("invariant_tsc"),
        "known_freq": "tsc_known_freq" in cpuinfo_flags,
        "crystal_hz": crystal,
        "base_mhz_hint": base_mhz,
        "clocksource": _read(root, "sys/devices/system/clocksource/clocksource0/current_clocksource"),
    }


def _hypervisor_section(root, flags, cpuid):
    present = bool(flags.get("hypervisor"))
    vendor = signature = vsource = None
    hvtype = _read(root, "sys/hypervisor/type")
    if hvtype:
        vendor, vsource = _HV_TYPES.get(hvtype.lower(), hvtype), "sysfs"
        present = True
    # Leaf 40000000H is only defined when CPUID.01H:ECX[31] (hypervisor) is
    # set; on bare metal it returns unrelated data.
    if present and cpuid is not None:
        signature = _hypervisor_signature(cpuid)
        if signature and vendor is None:
            vendor, vsource = _HV_SIGNATURES.get(signature, signature), "cpuid"
    return {"present": present, "vendor": vendor, "signature": signature, "vendor_source": vsource}


def _power_section(root):
    cpu = "sys/devices/system/cpu"
    freq = None
    for d in (f"{cpu}/cpu0/cpufreq", f"{cpu}/cpufreq/policy0"):
        if os.path.isdir(_path(root, d)):
            freq = d
            break
    gov = drv = fmin = fmax = None
    if freq:
        gov = _read(root, f"{freq}/scaling_governor")
        drv = _read(root, f"{freq}/scaling_driver")
        fmin = _read_int(root, f"{freq}/cpuinfo_min_freq")
        fmax = _read_int(root, f"{freq}/cpuinfo_max_freq")
    turbo, tsrc = None, None
    no_turbo = _read_int(root, f"{cpu}/intel_pstate/no_turbo")
    if no_turbo is not None:
        turbo, tsrc = not bool(no_turbo), "intel_pstate/no_turbo"
    else:
        for rel in (f"{cpu}/cpufreq/boost", f"{freq}/boost" if freq else None):
            v = _read_int(root, rel) if rel else None
            if v is not None:
                turbo, tsrc = bool(v), rel
                break
    return {
        "governor": gov,
        "scaling_driver": drv,
        "turbo": turbo,
        "turbo_source": tsrc,
        "pstate_status": _read(root, f"{cpu}/intel_pstate/status"),
        "min_khz": fmin,
        "max_khz": fmax,
    }


def _kernel_section(root):
    try:
        un = os.uname()
    except AttributeError:  # pragma: no cover - non-POSIX
        un = None
    return {
        "release": _read(root, "proc/sys/kernel/osrelease") or (un.release if un else None),
        "version": _read(root, "proc/sys/kernel/version") or (un.version if un else None),
        "machine": _read(root, "proc/sys/kernel/arch") or (un.machine if un else platform.machine()),
        "perf_event_paranoid": _read_int(root, "proc/sys/kernel/perf_event_paranoid"),
        "nmi_watchdog": _read_int(root, "proc/sys/kernel/nmi_watchdog"),
        "isolated_cpus": _read(root, "sys/devices/system/cpu/isolated"),
        "nohz_full": _read(root, "sys/devices/system/cpu/nohz_full"),
    }


def _errno_name(code):
    return errno.errorcode.get(code, f"errno {code}")


def _pmu_reason(code, paranoid):
    name = _errno_name(code)
    what = "perf_event_open(cycles)"
    if code == 0:
        return f"{what} succeeded"
    if code == errno.ENOENT:
        return f"no hardware PMU exposed (typical in a VM): {what} failed with ENOENT"
    if code in (errno.EACCES, errno.EPERM):
        p = "?" if paranoid is None else paranoid
        return (f"perf_event_paranoid={p} forbids {what} for this user ({name}); "
                f"set kernel.perf_event_paranoid<=2 or grant CAP_PERFMON")
    if code == errno.EOPNOTSUPP:
        return f"{what} failed with EOPNOTSUPP: the PMU does not support this event"
    if code == errno.ENODEV:
        return f"{what} failed with ENODEV: the PMU driver does not offer this event on this CPU"
    if code == errno.ENOSYS:
        return "perf_event_open is not available in this kernel (ENOSYS)"
    if code == errno.EBUSY:
        return f"{what} failed with EBUSY: the counters are held by someone else"
    return f"{what} failed with {name}"


def _pmu_section(root, perf_probe, paranoid):
    sources = _listdir(root, "sys/bus/event_source/devices")
    driver = any(s in ("cpu", "cpu_core", "cpu_atom") or s.startswith("armv") for s in sources)
    out = {
        "available": None,
        "reason": "not probed",
        "errno": None,
        "software_events": None,
        "software_reason": "not probed",
        "pmu_driver": driver,
        "event_sources": sources,
    }
    if perf_probe is None:
        return out
    try:
        code = abs(int(perf_probe(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES)))
        out["available"] = code == 0
        out["errno"] = None if code == 0 else _errno_name(code)
        out["reason"] = _pmu_reason(code, paranoid)
    except Exception as e:  # a broken probe is not a broken machine
        out["reason"] = f"probe raised {type(e).__name__}: {e}"
    try:
        code = abs(int(perf_probe(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS)))
        out["software_events"] = code == 0
        out["software_reason"] = ("perf_event_open(page-faults) succeeded" if code == 0
                                  else f"perf_event_open(page-faults) failed with {_errno_name(code)}")
    except Exception as e:
        out["software_reason"] = f"probe raised {type(e).__name__}: {e}"
    return out


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _compiler_section(core):
    info = getattr(core, "build_info", None) if core is not None else None
    if callable(info):
        try:
            info = info()
        except Exception:
            info = None
    return _jsonable(info) if isinstance(info, dict) else None


def _memfx_version():
    try:
        from .version import __version__  # one source of truth (installed or source tree)
        return __version__
    except Exception:
        return "0.0.0+unknown"


def _glibc_version():
    try:
        v = os.confstr("CS_GNU_LIBC_VERSION")   # "glibc 2.36"
        if v:
            return v.split()[-1]
    except (ValueError, OSError, AttributeError):
        pass
    try:
        lib, ver = platform.libc_ver()
        return ver if lib == "glibc" and ver else None
    except Exception:
        return None


# --------------------------------------------------------------------------
# glibc: ld.so --list-diagnostics

def _unquote(s):
    """Undo ld.so's quoting: \\\\, \\" and \\ooo (octal) escapes."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if re.fullmatch(r"[0-7]{3}", s[i + 1:i + 4] or ""):
                out.append(chr(int(s[i + 1:i + 4], 8)))
                i += 4
                continue
            out.append(nxt)
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _diag_value(raw):
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"':
        return _unquote(raw[1:-1])
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", raw):
        return int(raw, 16)
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    return raw


def parse_ld_diagnostics(text):
    """Parse `ld.so --list-diagnostics` output (glibc >= 2.33).

    Returns {"version", "release", "thresholds", "preferred", "cache",
    "isa_level", "glibc_tunables_env", "tunables_set"}.  thresholds holds every
    scalar x86.cpu_features.*threshold* as an int (rep_movsb_threshold,
    rep_stosb_threshold, rep_movsb_stop_threshold, non_temporal_threshold...).
    Lines of any other shape are ignored; garbage gives empty results."""
    out = {
        "version": None, "release": None,
        "thresholds": {}, "preferred": {}, "cache": {},
        "isa_level": None, "glibc_tunables_env": None, "tunables_set": {},
    }
    if not isinstance(text, str):
        text = (text or b"").decode("utf-8", "replace") if isinstance(text, bytes) else ""
    prefix = "x86.cpu_features."
    for line in text.splitlines():
        m = re.match(r"\s*([A-Za-z_][\w.\[\]]*)=(.*)$", line)
        if not m:
            continue
        key, value = m.group(1), _diag_value(m.group(2))
        if key == "version.version" and isinstance(value, str):
            out["version"] = value
        elif key == "version.release" and isinstance(value, str):
            out["release"] = value
        elif re.fullmatch(r"env\[[^\]]*\]", key) and isinstance(value, str) \
                and value.startswith("GLIBC_TUNABLES="):
            out["glibc_tunables_env"] = value[len("GLIBC_TUNABLES="):]
        elif key.startswith(prefix) and isinstance(value, int):
            name = key[len(prefix):]
            if name.startswith("preferred.") and re.fullmatch(r"\w+", name[10:]):
                out["preferred"][name[10:]] = bool(value)
            elif not re.fullmatch(r"\w+", name):
                continue                      # arrays (features[..]) etc.
            elif "threshold" in name:
                out["thresholds"][name] = value
            elif "cache" in name:
                # (long int) -1 means "unknown" (e.g. no L4)
                out["cache"][name] = None if value in (2**64 - 1, 2**32 - 1) else value
            elif name == "isa_1":
                level = None
                for bit, lvl in ((0, "x86-64"), (1, "x86-64-v2"), (2, "x86-64-v3"), (3, "x86-64-v4")):
                    if not _bit(value, bit):
                        break
                    level = lvl
                out["isa_level"] = level
    env = out["glibc_tunables_env"]
    if env:
        for item in env.split(":"):
            if "=" in item:
                k, v = item.split("=", 1)
                if k:
                    out["tunables_set"][k] = v
    return out


def _elf_interp(path):
    """PT_INTERP of an ELF file (the dynamic loader it asks for), or None."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF":
                return None
            cls, data = ident[4], ident[5]
            end = "<" if data == 1 else ">"
            if cls == 2:
                phoff, = struct.unpack_from(end + "Q", ident, 0x20)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 0x36)
            elif cls == 1:
                phoff, = struct.unpack_from(end + "I", ident, 0x1C)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 0x2A)
            else:
                return None
            for i in range(min(phnum, 256)):
                f.seek(phoff + i * phentsize)
                ph = f.read(phentsize)
                if len(ph) < phentsize:
                    return None
                if struct.unpack_from(end + "I", ph, 0)[0] != 3:   # PT_INTERP
                    continue
                if cls == 2:
                    off, = struct.unpack_from(end + "Q", ph, 8)
                    size, = struct.unpack_from(end + "Q", ph, 0x20)
                else:
                    off, = struct.unpack_from(end + "I", ph, 4)
                    size, = struct.unpack_from(end + "I", ph, 0x10)
                f.seek(off)
                s = f.read(min(size, 4096)).split(b"\0", 1)[0].decode("utf-8", "replace")
                return s or None
    except (OSError, struct.error):
        return None
    return None


_LD_CANDIDATES = (
    "lib64/ld-linux-x86-64.so.2",
    "lib/ld-linux-x86-64.so.2",
    "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "lib/ld-linux-aarch64.so.1",
    "lib64/ld-linux-aarch64.so.1",
    "lib/ld-linux.so.2",
)


def find_ld_so(sysroot="/"):
    """The dynamic loader: PT_INTERP of this Python (only for sysroot "/"),
    else a well-known path under sysroot.  None if nothing executable."""
    cands = []
    if os.path.abspath(sysroot) == "/" and sys.executable:
        interp = _elf_interp(os.path.realpath(sys.executable))
        if interp:
            cands.append(interp)
    cands += [_path(sysroot, c) for c in _LD_CANDIDATES]
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def glibc_tunables(ld_so=None, sysroot="/", timeout=5.0):
    """Run `ld.so --list-diagnostics` and parse it (see parse_ld_diagnostics).

    The loader sees only GLIBC_TUNABLES from our environment (if set), so the
    thresholds are those this process would get.  Any failure gives
    {"available": False, "reason": ..., "ld_so": path-or-None}."""
    path = ld_so or find_ld_so(sysroot)
    if path is None:
        return {"available": False, "ld_so": None,
                "reason": f"no dynamic loader (ld.so) found under {sysroot}"}
    env = {}
    if "GLIBC_TUNABLES" in os.environ:
        env["GLIBC_TUNABLES"] = os.environ["GLIBC_TUNABLES"]
    try:
        proc = subprocess.run([path, "--list-diagnostics"], capture_output=True,
                              timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"available": False, "ld_so": path,
                "reason": f"{path} --list-diagnostics timed out after {timeout:g} s"}
    except OSError as e:
        return {"available": False, "ld_so": path,
                "reason": f"cannot run {path}: {e.strerror or e}"}
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return {"available": False, "ld_so": path,
                "reason": (f"{path} --list-diagnostics exited with status {proc.returncode} "
                           f"(needs glibc >= 2.33)" + (f": {err[0]}" if err else ""))}
    parsed = parse_ld_diagnostics(proc.stdout.decode("utf-8", "replace"))
    if parsed["version"] is None:
        return {"available": False, "ld_so": path,
                "reason": f"{path} --list-diagnostics gave no version line (not glibc >= 2.33?)"}
    out = {"available": True, "ld_so": path, "reason": None}
    out.update(parsed)
    return out


# --------------------------------------------------------------------------
# public entry points

def fingerprint(core=None, sysroot="/"):
    """Describe the machine (see module docstring).  JSON-serialisable.

    core: object offering cpuid/tsc_hz/perf_probe/build_info (any subset);
    None means try memfx._core and do without it if it is absent.
    sysroot: where /proc and /sys are read from (tests use a fake tree)."""
    if not os.path.isdir(sysroot):
        raise ParamError(f"sysroot {sysroot!r} is not a directory")
    core, origin = _resolve_core(core)
    cpuid = _fn(core, "cpuid")
    tsc_hz = _fn(core, "tsc_hz")
    perf_probe = _fn(core, "perf_probe")

    blocks = parse_cpuinfo(_read(sysroot, "proc/cpuinfo"))
    first = blocks[0] if blocks else {}
    cpuinfo_flags = set((first.get("flags") or first.get("Features") or "").split())

    cpu = _cpu_section(sysroot, blocks, cpuid)
    flags, flags_source, flags_cpuid = _flags_section(cpuinfo_flags, cpuid)
    caches, caches_source, cache_sizes, line = _cache_section(sysroot, cpuid, cpu["vendor"], first)
    kernel = _kernel_section(sysroot)
    glibc_diag = glibc_tunables(sysroot=sysroot)

    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "cpu": cpu,
        "flags": flags,
        "flags_source": flags_source,
        "flags_cpuid": flags_cpuid,
        "caches": caches,
        "caches_source": caches_source,
        "cache_sizes": cache_sizes,
        "line_bytes": line,
        "tlb": cpuid_tlb(cpuid, cpu["vendor"]),
        "memory": _memory_section(sysroot),
        "tsc": _tsc_section(sysroot, cpuid, tsc_hz, flags, cpuinfo_flags),
        "hypervisor": _hypervisor_section(sysroot, flags, cpuid),
        "power": _power_section(sysroot),
        "kernel": kernel,
        "pmu": _pmu_section(sysroot, perf_probe, kernel["perf_event_paranoid"]),
        "glibc": {"version": _glibc_version(), "diagnostics": glibc_diag},
        "llc": _llc_section(caches, cpuid, cpu["vendor"], glibc_diag),
        "compiler": _compiler_section(core),
        "python": {"version": platform.python_version(),
                   "implementation": platform.python_implementation()},
        "memfx": {"version": _memfx_version()},
        "core": {
            "loaded": any(f is not None for f in (cpuid, tsc_hz, perf_probe)),
            "origin": origin,
            "functions": [n for n in ("cpuid", "tsc_hz", "perf_probe") if _fn(core, n)],
        },
    }


def fingerprint_hash(fp):
    """sha256 (hex) over canonical JSON of fp, leaving out what changes from
    minute to minute: memory.available_bytes and memory.hugepages_free; the
    TSC frequency counts only to the MHz."""
    d = json.loads(json.dumps(fp, default=str))
    mem = d.get("memory")
    if isinstance(mem, dict):
        mem.pop("available_bytes", None)
        mem.pop("hugepages_free", None)
    tsc = d.get("tsc")
    if isinstance(tsc, dict) and isinstance(tsc.get("hz"), (int, float)) \
            and not isinstance(tsc.get("hz"), bool):
        tsc["hz"] = int(round(tsc["hz"] / 1e6))
    canon = json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canon.encode("ascii")).hexdigest()


def _get(fp, *keys):
    cur = fp
    for k in keys:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
    return cur


def cautions(fp):
    """What makes results on this machine noisy, as a list of
    {"id", "message", "value", "threshold", "advice"}.  Unknown values
    (None) never raise a caution."""
    out = []

    def add(id_, message, value, threshold, advice):
        out.append({"id": id_, "message": message, "value": value,
                    "threshold": threshold, "advice": advice})

    if _get(fp, "hypervisor", "present"):
        vendor = _get(fp, "hypervisor", "vendor")
        add("hypervisor",
            f"running under {vendor or 'a hypervisor'}: timer and cache behaviour of the "
            "host leak in; compare results on bare metal",
            vendor or True, None,
            "treat small differences as noise; confirm fine-grained conclusions on bare metal")
    gov = _get(fp, "power", "governor")
    if gov is not None and gov != "performance":
        add("governor", f"cpufreq governor is {gov!r}: the clock changes under load",
            gov, "performance",
            "cpupower frequency-set -g performance (or echo performance > "
            "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)")
    if _get(fp, "power", "turbo") is True:
        add("turbo", "turbo boost is enabled: the core clock depends on temperature and load",
            True, False,
            "disable it for stable numbers (echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo "
            "or echo 0 > /sys/devices/system/cpu/cpufreq/boost)")
    smt = _get(fp, "cpu", "smt")
    smt_active = _get(fp, "cpu", "smt_active")
    if smt_active is True or (smt_active is None and isinstance(smt, int) and smt > 1):
        add("smt", "SMT is active: a sibling hyperthread shares the core's caches and ports, "
            "so anything running on it adds noise",
            smt, 1,
            "keep the sibling of the measuring CPU idle, or echo off > "
            "/sys/devices/system/cpu/smt/control")
    if _get(fp, "memory", "thp_enabled") == "always":
        add("thp_always", "transparent huge pages are 'always': whether a buffer is backed by "
            "huge pages varies from run to run, and with it TLB behaviour",
            "always", "madvise",
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled; memfx asks for huge "
            "pages explicitly when a parameter says so")
    if _get(fp, "pmu", "available") is False:
        add("no_pmu", "no hardware performance counters: verdicts come from timing only "
            f"({_get(fp, 'pmu', 'reason')})",
            False, True,
            "fine for verdicts; for cycle and event counts run on bare metal or enable "
            "vPMU in the hypervisor")
    if _get(fp, "flags", "invariant_tsc") is False:
        add("no_invariant_tsc", "the TSC is not invariant (constant_tsc and nonstop_tsc): "
            "rdtsc ticks may not be proportional to time",
            False, True,
            "use a machine with an invariant TSC, or do not trust ns figures from rdtsc")
    paranoid = _get(fp, "kernel", "perf_event_paranoid")
    if isinstance(paranoid, int) and paranoid > 2:
        add("perf_event_paranoid", f"perf_event_paranoid={paranoid} forbids unprivileged "
            "perf_event_open, so software events (page faults, context switches) used to "
            "reject contaminated samples cannot be read",
            paranoid, 2, "sysctl kernel.perf_event_paranoid=2 (or run with CAP_PERFMON)")
    llc = fp.get("llc") or {}
    if llc.get("agree") is False and llc.get("glibc_bytes") and llc.get("sysfs_bytes") \
            and llc["glibc_bytes"] != llc["sysfs_bytes"]:
        nt = llc.get("glibc_non_temporal_threshold")
        add("glibc_llc_mismatch",
            f"glibc sizes its thresholds from a {llc['glibc_bytes'] / 2**20:.0f} MiB last-level "
            f"cache (CPUID) while sysfs reports {llc['sysfs_bytes'] / 2**20:.0f} MiB"
            + (f": memcpy switches to non-temporal stores only above "
               f"{nt / 2**20:.0f} MiB" if nt else ""),
            llc["glibc_bytes"], llc["sysfs_bytes"],
            "measure (memfx run copy) and set GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold "
            "from the measured crossover (memfx advise)")
    avail = _get(fp, "memory", "available_bytes")
    if isinstance(avail, int) and avail < _GIB:
        add("low_memory", f"only {avail / 2**20:.0f} MiB of memory available: large buffers "
            "may be swapped or reclaimed during the run",
            avail, _GIB, "free memory or keep buffer sizes well below the available amount")
    return out


def capabilities(fp):
    """A compact yes/no summary of what this machine lets memfx do."""
    f = fp.get("flags") or {}
    thp = _get(fp, "memory", "thp_enabled")
    return {
        "pmu": _get(fp, "pmu", "available") is True,
        "software_events": _get(fp, "pmu", "software_events") is True,
        "huge_pages": thp not in (None, "never"),
        "avx2": bool(f.get("avx2")),
        # the wide kernels need byte/word ops and 128/256-bit forms too
        "avx512": bool(f.get("avx512f") and f.get("avx512bw") and f.get("avx512vl")),
        "erms": bool(f.get("erms")),
        "fsrm": bool(f.get("fsrm")),
        "fzrm": bool(f.get("fzrm")),
        "fsrs": bool(f.get("fsrs")),
        "rdtscp": bool(f.get("rdtscp")),
        "invariant_tsc": bool(f.get("invariant_tsc")),
        "clflushopt": bool(f.get("clflushopt")),
        "movdir64b": bool(f.get("movdir64b")),
        "numa_nodes": _get(fp, "cpu", "numa_nodes") or 1,
    }


# --------------------------------------------------------------------------
# identity: what does not change between runs on one machine

# Fingerprint parts that identify the machine (CPU model and microcode,
# caches, ISA flags, kernel, glibc, hypervisor).  Everything else -- free
# memory, the calibrated TSC, governor, THP mode, perf_event_paranoid -- is
# the state of one run and is stored with the run, not hashed.
_IDENTITY_CPU = ("vendor", "family", "model", "stepping", "model_name", "microcode",
                 "logical_cpus", "sockets", "cores", "smt", "numa_nodes")


def identity(fp):
    """The stable part of a fingerprint (a dict), from which machine_id is hashed."""
    fp = fp if isinstance(fp, dict) else {}

    def part(name):
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


def machine_id(fp):
    """Stable machine id: 'm-' and 16 hex digits of the identity's SHA-256."""
    import hashlib
    text = json.dumps(identity(fp), sort_keys=True, default=str)
    return "m-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def label(fp):
    """A short human name of the machine: CPU model name, family/model, vCPUs."""
    cpu = (fp or {}).get("cpu") or {}
    name = cpu.get("model_name") or cpu.get("vendor") or "unknown CPU"
    fam = cpu.get("family")
    mod = cpu.get("model")
    fm = f" (family {fam} model {mod})" if fam is not None and mod is not None else ""
    n = cpu.get("logical_cpus")
    return f"{name}{fm}" + (f", {n} CPUs" if n else "")
