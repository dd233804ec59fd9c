"""What CPUID says (through the optional C core, duck-typed: see
machine.py): vendor and identity, cache and TLB descriptors, the LLC, the
hypervisor's signature.  Part of the fingerprint (machine.py re-exports the
public names); standard library only, so it loads without the core."""
from __future__ import annotations

import struct

from memfx.model.machine_view import Fingerprint

# --------------------------------------------------------------------------
# the optional C core

def _resolve_core(core):
    """Returns (core or None, origin)."""
    if core is not None:
        return core, "injected"
    try:
        from memfx.lab import _core as mod  # lazy on purpose
    except Exception:  # ImportError, or a broken build: fall back, never fail
        return None, None
    return mod, "memfx.lab._core"


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
        from .core import cpuid  # the core, only when asked
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
    share, ten times the one leaf 8000_001DH and sysfs report, and glibc
    sizes its cache-derived thresholds (non_temporal_threshold = 3/4 of it)
    from it (ld.so --list-diagnostics: level3_cache_size;
    docs/machine-notes.md, "AMD's legacy L3 leaf in a VM")."""
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
        llc = Fingerprint.of({"caches": cs}).llc
        return llc.size_bytes if llc else None
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
    cpuid, cpuid_legacy, glibc), falling back to the last data/unified
    level in fp["caches"]; None when unknown.  Advice should prefer a
    measured capacity (the latency experiment's last knee) over all of these."""
    v = (fp.get("llc") or {}).get(f"{source}_bytes")
    if v:
        return v
    llc = Fingerprint.of(fp).llc
    return llc.size_bytes if llc else None


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
