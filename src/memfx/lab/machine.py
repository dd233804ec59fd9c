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
identity(fp), machine_id(fp), label(fp)         re-exported from machine_view.py, where
                                                the typed Fingerprint reads the dict

Only the standard library is imported at module level, so this loads without
the C extension.  The core (memfx.lab._core) is optional and duck-typed: it may
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
from typing import Any

from memfx.lab.cpuid import (  # noqa: F401 (public names re-exported)
    _bit,
    _cpuid_caches,
    _cpuid_string_flags,
    _cpuid_vendor,
    _fn,
    _hypervisor_signature,
    _llc_section,
    _max_leaf,
    _regs,
    _resolve_core,
    cpu_identity,
    cpuid_tlb,
    llc_bytes,
    tlb_entries,
)
from memfx.lab.ldso import (  # noqa: F401 (public names and what the tests read re-exported)
    _diag_value,
    _elf_interp,
    find_ld_so,
    glibc_tunables,
    parse_ld_diagnostics,
)
from memfx.lab.sysfs import (
    _int_or_none,
    _listdir,
    _path,
    _read,
    _read_int,
    parse_cpu_list,
    parse_cpuinfo,
    parse_size,
)
from memfx.model.errors import ParamError
from memfx.model.machine_view import Fingerprint, identity, label, machine_id  # noqa: F401 (re-exported)

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

    levels = Fingerprint.of({"caches": caches}).caches
    sizes = {c.name: c.size_bytes for c in levels}
    line = next((c.line_bytes for c in levels if c.level == 1), None)
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
        from ..model.version import __version__  # one source of truth (installed or source tree)
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
# public entry points

def fingerprint(core=None, sysroot="/"):
    """Describe the machine (see module docstring).  JSON-serialisable.

    core: object offering cpuid/tsc_hz/perf_probe/build_info (any subset);
    None means try memfx.lab._core and do without it if it is absent.
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


def cautions(fp: dict[str, Any]) -> list[dict[str, Any]]:
    """What makes results on this machine noisy, as a list of
    {"id", "message", "value", "threshold", "advice"}.  Unknown values
    (None) never raise a caution."""
    # imported here: the fingerprint itself loads with the standard library only
    from memfx.model.findings import caution
    out = []

    # each kind's advice is the warning catalogue's hint (findings.WARNINGS)
    def add(id_, message, value, threshold):
        out.append(caution(id_, message, value, threshold).as_dict())

    if _get(fp, "hypervisor", "present"):
        vendor = _get(fp, "hypervisor", "vendor")
        add("hypervisor",
            f"running under {vendor or 'a hypervisor'}: timer and cache behaviour of the "
            "host leak in; compare results on bare metal",
            vendor or True, None)
    gov = _get(fp, "power", "governor")
    if gov is not None and gov != "performance":
        add("governor", f"cpufreq governor is {gov!r}: the clock changes under load",
            gov, "performance")
    if _get(fp, "power", "turbo") is True:
        add("turbo", "turbo boost is enabled: the core clock depends on temperature and load",
            True, False)
    smt = _get(fp, "cpu", "smt")
    smt_active = _get(fp, "cpu", "smt_active")
    if smt_active is True or (smt_active is None and isinstance(smt, int) and smt > 1):
        add("smt", "SMT is active: a sibling hyperthread shares the core's caches and ports, "
            "so anything running on it adds noise",
            smt, 1)
    if _get(fp, "memory", "thp_enabled") == "always":
        add("thp_always", "transparent huge pages are 'always': whether a buffer is backed by "
            "huge pages varies from run to run, and with it TLB behaviour",
            "always", "madvise")
    if _get(fp, "pmu", "available") is False:
        add("no_pmu", "no hardware performance counters: verdicts come from timing only "
            f"({_get(fp, 'pmu', 'reason')})",
            False, True)
    if _get(fp, "flags", "invariant_tsc") is False:
        add("no_invariant_tsc", "the TSC is not invariant (constant_tsc and nonstop_tsc): "
            "rdtsc ticks may not be proportional to time",
            False, True)
    paranoid = _get(fp, "kernel", "perf_event_paranoid")
    if isinstance(paranoid, int) and paranoid > 2:
        add("perf_event_paranoid", f"perf_event_paranoid={paranoid} forbids unprivileged "
            "perf_event_open, so software events (page faults, context switches) used to "
            "reject contaminated samples cannot be read",
            paranoid, 2)
    llc = fp.get("llc") or {}
    if llc.get("agree") is False and llc.get("glibc_bytes") and llc.get("sysfs_bytes") \
            and llc["glibc_bytes"] != llc["sysfs_bytes"]:
        nt = llc.get("glibc_non_temporal_threshold")
        add("glibc_llc_mismatch",
            f"glibc sizes its thresholds from a {llc['glibc_bytes'] / 2**20:.0f} MiB last-level "
            f"cache (CPUID) while sysfs reports {llc['sysfs_bytes'] / 2**20:.0f} MiB"
            + (f": memcpy switches to non-temporal stores only above "
               f"{nt / 2**20:.0f} MiB" if nt else ""),
            llc["glibc_bytes"], llc["sysfs_bytes"])
    avail = _get(fp, "memory", "available_bytes")
    if isinstance(avail, int) and avail < _GIB:
        add("low_memory", f"only {avail / 2**20:.0f} MiB of memory available: large buffers "
            "may be swapped or reclaimed during the run",
            avail, _GIB)
    return out


def capabilities(fp: dict[str, Any]) -> dict[str, Any]:
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
