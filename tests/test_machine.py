"""Tests for memfx.lab.machine: a fake /proc + /sys tree, a fake core, the real
ld.so diagnostics captured on the development machine, and a smoke test on
the machine the tests run on."""

import errno
import json
import os
import shutil
import stat
import struct
import sys
from pathlib import Path

import pytest

from memfx.lab import machine
from memfx.model.errors import ParamError

DATA = os.path.join(os.path.dirname(__file__), "data")
FAKE = os.path.join(DATA, "machine_fake")
LD_REAL = os.path.join(DATA, "ld_diagnostics_glibc236.txt")
LD_TUNABLES = os.path.join(DATA, "machine_ld_diagnostics_tunables.txt")


def _sig(text):
    """A 12-byte CPUID signature as the (ebx, ecx, edx) ints that carry it."""
    return struct.unpack("<III", text.encode("ascii").ljust(12, b"\0"))


class FakeCore:
    """Stands in for memfx.lab._core: a CPUID table, a TSC rate, a perf probe."""

    def __init__(self, leaves=None, hz=2.5e9, hw_errno=errno.ENOENT, sw_errno=0,
                 build_info=None):
        self.leaves = {
            (0, 0): (0x20,) + tuple(_sig("GenuineIntel")[i] for i in (0, 2, 1)),
            (1, 0): (0, 0, 1 << 31, 0),                       # hypervisor bit
            (7, 0): (1, 1 << 9, 0, 0),                        # max subleaf 1, ERMS, no FSRM
            (7, 1): ((1 << 10) | (1 << 11), 0, 0, 0),         # FZRM, FSRS, no FSRC
            (0x15, 0): (2, 166, 25_000_000, 0),               # 25 MHz * 166/2
            (0x16, 0): (2000, 3800, 100, 0),
            (0x40000000, 0): (0x40000001,) + _sig("KVMKVMKVM"),
        }
        if leaves:
            self.leaves.update(leaves)
        self.hz = hz
        self.hw_errno = hw_errno
        self.sw_errno = sw_errno
        self.probes = []
        if build_info is not None:
            self.build_info = build_info

    def cpuid(self, leaf, subleaf):
        return self.leaves.get((leaf, subleaf), (0, 0, 0, 0))

    def tsc_hz(self):
        return self.hz

    def perf_probe(self, type_, config):
        self.probes.append((type_, config))
        return self.hw_errno if type_ == machine.PERF_TYPE_HARDWARE else self.sw_errno


@pytest.fixture
def fake_fp():
    return machine.fingerprint(core=object(), sysroot=FAKE)


@pytest.fixture
def tree(tmp_path):
    """A writable copy of the fake tree, for variations."""
    dst = tmp_path / "root"
    shutil.copytree(FAKE, dst)
    return dst


# ---------------------------------------------------------------- parsers

def test_parse_size():
    assert machine.parse_size("48K") == 49152
    assert machine.parse_size("2048K") == 2097152
    assert machine.parse_size("105M") == 105 * 1024 * 1024
    assert machine.parse_size("107520K") == 110100480
    assert machine.parse_size("1G") == 1 << 30
    assert machine.parse_size("64") == 64
    assert machine.parse_size(" 32K\n") == 32768
    assert machine.parse_size("lots") is None
    assert machine.parse_size("") is None
    assert machine.parse_size(None) is None


def test_parse_cpu_list():
    assert machine.parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert machine.parse_cpu_list("0") == [0]
    assert machine.parse_cpu_list("") == []
    assert machine.parse_cpu_list(None) == []
    # the one parser also reads memfx's own ordered lists (measuring CPU first)
    assert machine.parse_cpu_list("1,0", ordered=True) == [1, 0]
    assert machine.parse_cpu_list("3,0-1,3", ordered=True) == [3, 0, 1]
    from memfx.experiments._kit import cpu_text, parse_cpu_text
    assert parse_cpu_text(cpu_text([2, 0, 1])) == [2, 0, 1]
    assert machine.parse_cpu_list("x,2") == [2]


# ---------------------------------------------------------- fake sysroot

def test_fake_cpu_section(fake_fp):
    cpu = fake_fp["cpu"]
    assert cpu["vendor"] == "GenuineIntel"
    assert cpu["family"] == 6
    assert cpu["model"] == 143
    assert cpu["stepping"] == 8
    assert cpu["model_name"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu["microcode"] == "0x2b000590"
    assert cpu["logical_cpus"] == 2
    assert cpu["online_cpus"] == "0-1"
    assert cpu["online_count"] == 2
    assert cpu["smt"] == 2               # thread_siblings_list 0-1
    assert cpu["smt_active"] is True
    assert cpu["sockets"] == 1
    assert cpu["cores"] == 1
    assert cpu["numa_nodes"] == 2


def test_fake_caches(fake_fp):
    assert fake_fp["caches_source"] == "sysfs"
    assert fake_fp["caches"] == [
        {"level": 1, "type": "Data", "size_bytes": 49152, "line_bytes": 64,
         "ways": 12, "sets": 64, "shared_cpu_list": "0-1"},
        {"level": 1, "type": "Instruction", "size_bytes": 32768, "line_bytes": 64,
         "ways": 8, "sets": 64, "shared_cpu_list": "0-1"},
        {"level": 2, "type": "Unified", "size_bytes": 2097152, "line_bytes": 64,
         "ways": 16, "sets": 2048, "shared_cpu_list": "0-1"},
        {"level": 3, "type": "Unified", "size_bytes": 110100480, "line_bytes": 64,
         "ways": 15, "sets": 114688, "shared_cpu_list": "0-1"},
    ]
    # the instruction cache is not in the data-side summary
    assert fake_fp["cache_sizes"] == {"L1d": 49152, "L2": 2097152, "L3": 110100480}
    assert fake_fp["line_bytes"] == 64


def test_fake_memory(fake_fp):
    mem = fake_fp["memory"]
    assert mem["total_bytes"] == 16384000 * 1024
    assert mem["available_bytes"] == 14000000 * 1024
    assert mem["hugepage_size"] == 2 * 1024 * 1024
    assert mem["hugepages_total"] == 4
    assert mem["hugepages_free"] == 3
    assert mem["thp_enabled"] == "madvise"
    assert mem["thp_defrag"] == "madvise"
    assert mem["page_size"] == os.sysconf("SC_PAGE_SIZE")


def test_fake_flags_from_cpuinfo(fake_fp):
    f, src = fake_fp["flags"], fake_fp["flags_source"]
    assert list(f) == list(machine.FLAG_NAMES)
    for name in ("erms", "fsrm", "sse2", "avx", "avx2", "avx512f", "avx512bw", "avx512vl",
                 "clflushopt", "clwb", "movdir64b", "rdtscp", "rdpid", "constant_tsc",
                 "nonstop_tsc", "hypervisor"):
        assert f[name] is True, name
    assert f["prefetchw"] is True          # listed as 3dnowprefetch
    assert f["invariant_tsc"] is True      # constant_tsc and nonstop_tsc
    for name in ("fzrm", "fsrs", "fsrc"):  # the kernel does not list these
        assert f[name] is False
    assert set(src.values()) == {"cpuinfo"}
    assert fake_fp["flags_cpuid"] is None


def test_invariant_tsc_needs_both(tree):
    p = tree / "proc" / "cpuinfo"
    p.write_text(p.read_text().replace(" nonstop_tsc", ""))
    fp = machine.fingerprint(core=object(), sysroot=str(tree))
    assert fp["flags"]["constant_tsc"] is True
    assert fp["flags"]["nonstop_tsc"] is False
    assert fp["flags"]["invariant_tsc"] is False
    assert fp["tsc"]["invariant"] is False
    assert "no_invariant_tsc" in {c["id"] for c in machine.cautions(fp)}


def test_fake_power_kernel_tsc(fake_fp):
    assert fake_fp["power"]["governor"] == "powersave"
    assert fake_fp["power"]["scaling_driver"] == "intel_pstate"
    assert fake_fp["power"]["turbo"] is True            # no_turbo = 0
    assert fake_fp["power"]["max_khz"] == 3800000
    assert fake_fp["kernel"]["perf_event_paranoid"] == 2
    assert fake_fp["kernel"]["release"] == "6.1.0-fake"
    assert fake_fp["tsc"]["known_freq"] is True
    assert fake_fp["tsc"]["clocksource"] == "tsc"
    # no sysfs tsc_freq_khz, no cpuid, no calibration
    assert fake_fp["tsc"]["hz"] is None
    assert fake_fp["tsc"]["source"] == "unavailable"


def test_fake_without_core(fake_fp):
    assert fake_fp["pmu"]["available"] is None
    assert fake_fp["pmu"]["reason"] == "not probed"
    assert fake_fp["pmu"]["software_events"] is None
    assert fake_fp["pmu"]["pmu_driver"] is True          # sys/bus/event_source/devices/cpu
    assert fake_fp["hypervisor"] == {"present": True, "vendor": None, "signature": None,
                                     "vendor_source": None}
    assert fake_fp["compiler"] is None
    assert fake_fp["core"]["loaded"] is False
    # no ld.so inside the fake tree: reported, not raised
    diag = fake_fp["glibc"]["diagnostics"]
    assert diag["available"] is False and "ld.so" in diag["reason"]


def test_core_absent_falls_back(monkeypatch):
    # make `from memfx.lab import _core` fail, whatever is built in the tree
    import memfx.lab
    monkeypatch.delattr(memfx.lab, "_core", raising=False)
    monkeypatch.setitem(sys.modules, "memfx.lab._core", None)
    fp = machine.fingerprint(sysroot=FAKE)
    assert fp["core"] == {"loaded": False, "origin": None, "functions": []}
    assert fp["pmu"]["available"] is None and fp["pmu"]["reason"] == "not probed"
    assert fp["flags_source"]["fzrm"] == "cpuinfo"


def test_fake_fingerprint_is_json(fake_fp):
    assert json.loads(json.dumps(fake_fp)) == fake_fp


def test_bad_sysroot():
    with pytest.raises(ParamError):
        machine.fingerprint(core=object(), sysroot=os.path.join(DATA, "no_such_dir"))


def test_missing_everything(tmp_path):
    fp = machine.fingerprint(core=object(), sysroot=str(tmp_path))
    json.dumps(fp)
    assert fp["caches"] == [] and fp["cache_sizes"] == {} and fp["line_bytes"] is None
    assert fp["cpu"]["vendor"] is None and fp["cpu"]["numa_nodes"] is None
    assert fp["power"]["governor"] is None and fp["power"]["turbo"] is None
    assert fp["memory"]["thp_enabled"] is None
    assert not any(fp["flags"].values())
    ids = {c["id"] for c in machine.cautions(fp)}
    assert "governor" not in ids and "turbo" not in ids and "hypervisor" not in ids


# -------------------------------------------------------------- fake core

def test_cpuid_string_flags_win():
    fp = machine.fingerprint(core=FakeCore(), sysroot=FAKE)
    f, src = fp["flags"], fp["flags_source"]
    assert f["fzrm"] is True and src["fzrm"] == "cpuid"
    assert f["fsrs"] is True and src["fsrs"] == "cpuid"
    assert f["fsrc"] is False and src["fsrc"] == "cpuid"
    assert f["erms"] is True and src["erms"] == "cpuid"
    # cpuinfo lists fsrm, CPUID leaf 7 EDX bit 4 is clear: CPUID wins
    assert f["fsrm"] is False and src["fsrm"] == "cpuid"
    assert fp["flags_cpuid"] == {"erms": True, "fsrm": False, "fzrm": True,
                                 "fsrs": True, "fsrc": False}
    assert src["avx2"] == "cpuinfo"


def test_cpuid_bits_exact():
    core = FakeCore(leaves={(7, 0): (1, 0, 0, 1 << 4), (7, 1): (1 << 12, 0, 0, 0)})
    f = machine.fingerprint(core=core, sysroot=FAKE)["flags"]
    assert (f["erms"], f["fsrm"], f["fzrm"], f["fsrs"], f["fsrc"]) == (False, True, False, False, True)


def test_cpuid_subleaf1_only_when_enumerated():
    # leaf 7 subleaf 0 EAX = 0: subleaf 1 does not exist, its bits must be ignored
    core = FakeCore(leaves={(7, 0): (0, 1 << 9, 0, 1 << 4), (7, 1): (0x1C00, 0, 0, 0)})
    f = machine.fingerprint(core=core, sysroot=FAKE)["flags"]
    assert f["fzrm"] is False and f["fsrs"] is False and f["fsrc"] is False
    assert f["erms"] is True and f["fsrm"] is True


def test_tsc_from_cpuid_leaf_15():
    fp = machine.fingerprint(core=FakeCore(), sysroot=FAKE)
    assert fp["tsc"]["source"] == "cpuid_0x15"
    assert fp["tsc"]["hz"] == pytest.approx(25_000_000 * 166 / 2)
    assert fp["tsc"]["crystal_hz"] == 25_000_000
    assert fp["tsc"]["base_mhz_hint"] == 2000


def test_tsc_falls_back_to_calibration():
    core = FakeCore(leaves={(0x15, 0): (2, 166, 0, 0)}, hz=2.1e9)   # crystal not enumerated
    fp = machine.fingerprint(core=core, sysroot=FAKE)
    assert fp["tsc"]["source"] == "calibrated"
    assert fp["tsc"]["hz"] == 2.1e9


def test_tsc_sysfs_first(tree):
    (tree / "sys/devices/system/cpu/cpu0/tsc_freq_khz").write_text("1995312\n")
    fp = machine.fingerprint(core=FakeCore(), sysroot=str(tree))
    assert fp["tsc"]["source"] == "sysfs_tsc_freq_khz"
    assert fp["tsc"]["hz"] == 1995312000.0


def test_hypervisor_vendor_from_cpuid():
    fp = machine.fingerprint(core=FakeCore(), sysroot=FAKE)
    assert fp["hypervisor"] == {"present": True, "vendor": "KVM", "signature": "KVMKVMKVM",
                                "vendor_source": "cpuid"}
    c = [c for c in machine.cautions(fp) if c["id"] == "hypervisor"]
    assert len(c) == 1 and c[0]["message"].startswith("running under KVM:")


def test_hypervisor_leaf_not_read_on_bare_metal(tree):
    p = tree / "proc" / "cpuinfo"
    p.write_text(p.read_text().replace(" hypervisor", ""))
    fp = machine.fingerprint(core=FakeCore(), sysroot=str(tree))
    assert fp["hypervisor"]["present"] is False
    assert fp["hypervisor"]["vendor"] is None and fp["hypervisor"]["signature"] is None
    assert "hypervisor" not in {c["id"] for c in machine.cautions(fp)}


def test_hypervisor_vendor_from_sysfs(tree):
    (tree / "sys" / "hypervisor").mkdir()
    (tree / "sys" / "hypervisor" / "type").write_text("xen\n")
    fp = machine.fingerprint(core=object(), sysroot=str(tree))
    assert fp["hypervisor"]["vendor"] == "Xen"
    assert fp["hypervisor"]["vendor_source"] == "sysfs"


def test_pmu_enoent():
    core = FakeCore(hw_errno=errno.ENOENT, sw_errno=0)
    fp = machine.fingerprint(core=core, sysroot=FAKE)
    pmu = fp["pmu"]
    assert pmu["available"] is False
    assert "ENOENT" in pmu["reason"] and "no hardware PMU" in pmu["reason"]
    assert pmu["errno"] == "ENOENT"
    assert pmu["software_events"] is True
    assert (0, 0) in core.probes and (1, 2) in core.probes   # cycles, page-faults
    caps = machine.capabilities(fp)
    assert caps["pmu"] is False and caps["software_events"] is True
    assert "no_pmu" in {c["id"] for c in machine.cautions(fp)}


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM])
def test_pmu_paranoid(code):
    fp = machine.fingerprint(core=FakeCore(hw_errno=code, sw_errno=code), sysroot=FAKE)
    assert fp["pmu"]["available"] is False
    assert "perf_event_paranoid=2" in fp["pmu"]["reason"]
    assert fp["pmu"]["software_events"] is False


def test_pmu_available():
    fp = machine.fingerprint(core=FakeCore(hw_errno=0), sysroot=FAKE)
    assert fp["pmu"]["available"] is True and fp["pmu"]["errno"] is None
    assert machine.capabilities(fp)["pmu"] is True
    assert "no_pmu" not in {c["id"] for c in machine.cautions(fp)}


def test_pmu_probe_that_raises():
    class Broken:
        def perf_probe(self, t, c):
            raise RuntimeError("boom")
    fp = machine.fingerprint(core=Broken(), sysroot=FAKE)
    assert fp["pmu"]["available"] is None and "boom" in fp["pmu"]["reason"]


def test_compiler_build_info():
    info = {"compiler": "gcc 12.2.0", "cflags": "-O2"}
    fp = machine.fingerprint(core=FakeCore(build_info=info), sysroot=FAKE)
    assert fp["compiler"] == info
    assert fp["core"]["loaded"] is True and fp["core"]["origin"] == "injected"
    assert fp["core"]["functions"] == ["cpuid", "tsc_hz", "perf_probe"]
    json.dumps(fp)


# --------------------------------------------------------------- cautions

def test_cautions_fake(fake_fp):
    cs = machine.cautions(fake_fp)
    by_id = {c["id"]: c for c in cs}
    assert {"hypervisor", "governor", "turbo", "smt"} <= set(by_id)
    assert "thp_always" not in by_id and "low_memory" not in by_id
    assert "no_pmu" not in by_id              # not probed is not "no PMU"
    assert by_id["governor"]["value"] == "powersave"
    assert by_id["governor"]["threshold"] == "performance"
    assert by_id["hypervisor"]["message"].startswith("running under a hypervisor")
    for c in cs:
        assert set(c) == {"id", "message", "value", "threshold", "advice"}
        assert c["message"] and c["advice"]
    json.dumps(cs)


def test_no_governor_caution_when_performance(fake_fp):
    fake_fp["power"]["governor"] = "performance"
    assert "governor" not in {c["id"] for c in machine.cautions(fake_fp)}
    fake_fp["power"]["governor"] = None          # unknown (VM without cpufreq)
    assert "governor" not in {c["id"] for c in machine.cautions(fake_fp)}


def test_other_cautions(fake_fp):
    fake_fp["memory"]["thp_enabled"] = "always"
    fake_fp["memory"]["available_bytes"] = 512 << 20
    fake_fp["kernel"]["perf_event_paranoid"] = 3
    fake_fp["power"]["turbo"] = False
    fake_fp["cpu"]["smt_active"] = False
    fake_fp["cpu"]["smt"] = 1
    by_id = {c["id"]: c for c in machine.cautions(fake_fp)}
    assert {"thp_always", "low_memory", "perf_event_paranoid"} <= set(by_id)
    assert "turbo" not in by_id and "smt" not in by_id
    assert by_id["low_memory"]["threshold"] == 1 << 30
    assert by_id["perf_event_paranoid"]["value"] == 3


def test_cautions_tolerate_partial_fp():
    assert machine.cautions({}) == []
    assert machine.capabilities({})["numa_nodes"] == 1


def test_capabilities(fake_fp):
    caps = machine.capabilities(fake_fp)
    assert caps["huge_pages"] is True          # madvise
    assert caps["avx2"] is True and caps["avx512"] is True
    assert caps["erms"] is True and caps["fsrm"] is True
    assert caps["pmu"] is False and caps["software_events"] is False
    assert caps["numa_nodes"] == 2
    fake_fp["memory"]["thp_enabled"] = "never"
    fake_fp["flags"]["avx512bw"] = False
    caps = machine.capabilities(fake_fp)
    assert caps["huge_pages"] is False and caps["avx512"] is False


# ------------------------------------------------------------------- hash

def test_fingerprint_hash(fake_fp):
    h = machine.fingerprint_hash(fake_fp)
    assert len(h) == 64 and set(h) <= set("0123456789abcdef")     # sha256, hex
    snapshot = json.dumps(fake_fp, sort_keys=True)
    fp2 = json.loads(json.dumps(fake_fp))
    fp2["memory"]["available_bytes"] = 1
    fp2["tsc"]["hz"] = 2_000_000_123.0
    fake_fp["tsc"]["hz"] = 2_000_100_000.0               # same MHz
    assert machine.fingerprint_hash(fake_fp) == machine.fingerprint_hash(fp2)
    fp2["tsc"]["hz"] = 2_001_000_000.0                   # another MHz
    assert machine.fingerprint_hash(fake_fp) != machine.fingerprint_hash(fp2)
    fp3 = json.loads(json.dumps(fake_fp))
    fp3["flags"]["avx2"] = False
    assert machine.fingerprint_hash(fp3) != machine.fingerprint_hash(fake_fp)
    # the input is not modified
    assert json.loads(snapshot)["memory"] == fake_fp["memory"]


def test_fingerprint_hash_reproducible():
    a = machine.fingerprint(core=FakeCore(), sysroot=FAKE)
    b = machine.fingerprint(core=FakeCore(), sysroot=FAKE)
    assert machine.fingerprint_hash(a) == machine.fingerprint_hash(b)


# ---------------------------------------------------- ld.so diagnostics

def test_parse_real_ld_diagnostics():
    with open(LD_REAL) as f:
        d = machine.parse_ld_diagnostics(f.read())
    assert d["version"] == "2.36"
    assert d["release"] == "stable"
    t = d["thresholds"]
    assert set(t) == {"non_temporal_threshold", "rep_movsb_threshold",
                      "rep_movsb_stop_threshold", "rep_stosb_threshold"}
    assert all(type(v) is int for v in t.values())
    assert t["non_temporal_threshold"] == 0x28E0000 == 42860544
    assert t["rep_movsb_threshold"] == 0x840
    assert t["rep_stosb_threshold"] == 0x800
    assert t["rep_movsb_stop_threshold"] == 0x28E0000
    assert d["preferred"]["Avoid_Short_Distance_REP_MOVSB"] is True
    assert d["preferred"]["Prefer_No_AVX512"] is False
    assert d["cache"]["data_cache_size"] == 0xC000
    assert d["cache"]["level4_cache_size"] is None     # 0xffffffffffffffff
    assert d["isa_level"] == "x86-64-v4"               # isa_1 = 0xf
    assert d["glibc_tunables_env"] is None and d["tunables_set"] == {}
    json.dumps(d)


def test_parse_ld_diagnostics_with_tunables():
    # captured with GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=0x1000:...
    with open(LD_TUNABLES) as f:
        d = machine.parse_ld_diagnostics(f.read())
    assert d["glibc_tunables_env"] == ("glibc.cpu.x86_rep_movsb_threshold=0x1000:"
                                       "glibc.cpu.x86_rep_stosb_threshold=0x4000")
    assert d["tunables_set"] == {"glibc.cpu.x86_rep_movsb_threshold": "0x1000",
                                 "glibc.cpu.x86_rep_stosb_threshold": "0x4000"}
    assert d["thresholds"]["rep_movsb_threshold"] == 0x1000
    assert d["thresholds"]["rep_stosb_threshold"] == 0x4000


@pytest.mark.parametrize("text", ["", "garbage\n\x00\xff===\n", "x86.cpu_features.rep_movsb_threshold",
                                  "=0x10\n[]=\"\n", None, b"\xff\xfe"])
def test_parse_ld_diagnostics_garbage(text):
    d = machine.parse_ld_diagnostics(text)
    assert d["thresholds"] == {} and d["version"] is None


def test_parse_ld_diagnostics_shapes():
    text = "\n".join([
        'env[0x0]="LANG=a\\"b\\\\c\\011d"',
        'env[0x1]="GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x100000"',
        'path.system_dirs[0x0]="/lib/x86_64-linux-gnu/"',
        'x86.cpu_features.features[0x0].cpuid[0x0]=0xa0678',
        'x86.cpu_features.rep_movsb_threshold=0x840',
        'x86.cpu_features.rep_movsb_threshold_weird="text"',
        'x86.cpu_features.some_new_threshold=4096',
        'version.version="2.39"',
        'this line has no equals sign',
    ])
    d = machine.parse_ld_diagnostics(text)
    assert d["version"] == "2.39"
    assert d["thresholds"] == {"rep_movsb_threshold": 0x840, "some_new_threshold": 4096}
    assert d["tunables_set"] == {"glibc.cpu.x86_non_temporal_threshold": "0x100000"}
    assert machine._diag_value('"a\\"b\\\\c\\011d"') == 'a"b\\c\td'


def _script(tmp_path, name, body):
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def test_glibc_tunables_runs_loader(tmp_path):
    ld = _script(tmp_path, "ld.so", f'cat "{LD_REAL}"\n')
    d = machine.glibc_tunables(ld_so=ld)
    assert d["available"] is True and d["ld_so"] == ld
    assert d["thresholds"]["non_temporal_threshold"] == 42860544


def test_glibc_tunables_old_or_broken_loader(tmp_path):
    old = _script(tmp_path, "old.so", 'echo "ld.so: unrecognized option \'$1\'" >&2; exit 127\n')
    d = machine.glibc_tunables(ld_so=old)
    assert d["available"] is False and "127" in d["reason"] and "unrecognized" in d["reason"]
    quiet = _script(tmp_path, "quiet.so", "echo hello\n")
    assert machine.glibc_tunables(ld_so=quiet)["available"] is False
    d = machine.glibc_tunables(ld_so=str(tmp_path / "missing.so"))
    assert d["available"] is False and "cannot run" in d["reason"]
    slow = _script(tmp_path, "slow.so", "exec sleep 10\n")
    d = machine.glibc_tunables(ld_so=slow, timeout=0.3)
    assert d["available"] is False and "timed out" in d["reason"]


def test_elf_interp_of_python():
    interp = machine._elf_interp(os.path.realpath(sys.executable))
    if interp is None:
        pytest.skip("python is not a dynamically linked ELF here")
    assert os.path.isabs(interp) and os.path.exists(interp)
    assert machine._elf_interp(LD_REAL) is None        # not ELF


# ------------------------------------------------------------ real machine

def _is_stdlib(name):
    """Whether a top-level module belongs to the standard library, on every
    Python the package supports (sys.stdlib_module_names is 3.10+ only)."""
    names = getattr(sys, "stdlib_module_names", None)
    if names is not None:
        return name in names
    import importlib.util
    import sysconfig
    if name in sys.builtin_module_names or name == "__future__":
        return True
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    paths = sysconfig.get_paths()
    roots = tuple(os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib"))
    origin = os.path.realpath(spec.origin)
    return origin.startswith(roots) and "site-packages" not in origin


def test_is_stdlib_helper_without_stdlib_module_names(monkeypatch):
    for name in ("os", "json", "sys", "ctypes", "__future__"):
        assert _is_stdlib(name), name
    assert not _is_stdlib("numpy") and not _is_stdlib("memfx")
    monkeypatch.delattr(sys, "stdlib_module_names", raising=False)   # as on Python 3.9
    for name in ("os", "json", "sys", "ctypes", "__future__", "re"):
        assert _is_stdlib(name), name
    for name in ("numpy", "memfx", "pytest", "no_such_module_xyz"):
        assert not _is_stdlib(name), name


def test_module_imports_only_stdlib_and_errors():
    # module-level imports decide whether machine.py loads without the C core
    # (machine.py and the modules it is made of: sysfs, cpuid, ldso, machine_view)
    import ast
    parts = {"memfx.lab.sysfs", "memfx.lab.cpuid", "memfx.lab.ldso", "memfx.model.machine_view"}
    names = set()
    from memfx.model import machine_view
    files = [Path(machine.__file__).parent / f"{name}.py" for name in ("machine", "sysfs", "cpuid", "ldso")]
    for path in files + [Path(machine_view.__file__)]:
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.add(node.module)
    foreign = {n for n in names
               if not _is_stdlib(n.split(".")[0]) and n != "memfx.model.errors" and n not in parts}
    assert foreign == set()
    assert "memfx.model.errors" in names


def test_real_machine_smoke():
    fp = machine.fingerprint()
    text = json.dumps(fp)
    assert json.loads(text) == fp
    assert any(c["level"] == 1 and c["type"] == "Data" for c in fp["caches"])
    assert fp["cache_sizes"]["L1d"] > 0
    assert fp["line_bytes"] in (32, 64, 128, 256)
    assert fp["memory"]["total_bytes"] > 0
    assert fp["cpu"]["logical_cpus"] >= 1
    diag = fp["glibc"]["diagnostics"]
    if diag["available"]:
        assert diag["thresholds"] and all(type(v) is int for v in diag["thresholds"].values())
    else:
        assert diag["reason"]
    assert len(machine.fingerprint_hash(fp)) == 64
    json.dumps(machine.cautions(fp))
    json.dumps(machine.capabilities(fp))


# ---------------------------------------------------------- last-level cache views

def _amd_core(legacy_l3_units, l3_det_bytes=32 << 20):
    """An AMD CPUID table: leaf 8000_001DH says l3_det_bytes (16-way, 64 B
    lines), leaf 8000_0006H EDX[31:18] says legacy_l3_units x 512 KiB."""
    sets = l3_det_bytes // (16 * 64)
    leaves = {
        (0, 0): (0x10,) + tuple(_sig("AuthenticAMD")[i] for i in (0, 2, 1)),
        (0x80000000, 0): (0x80000021, 0, 0, 0),
        (0x80000006, 0): (0, 0, 0, (legacy_l3_units << 18) | 0x9140),
        (0x8000001D, 0): ((1 << 5) | 1, (7 << 22) | 63, 63, 0),          # L1d 32 KiB
        (0x8000001D, 1): ((3 << 5) | 3, (15 << 22) | 63, sets - 1, 0),   # L3
    }
    return FakeCore(leaves=leaves)


def test_llc_views_show_cpuid_legacy_and_glibc_sizes():
    core = _amd_core(640)
    glibc = {"cache": {"level3_cache_size": 320 << 20}, "thresholds": {"non_temporal_threshold": 240 << 20}}
    sysfs = [{"level": 3, "type": "Unified", "size_bytes": 32 << 20}]
    v = machine._llc_section(sysfs, core.cpuid, "AuthenticAMD", glibc)
    assert v["sysfs_bytes"] == 32 << 20 and v["cpuid_bytes"] == 32 << 20
    assert v["cpuid_legacy_bytes"] == 320 << 20 and v["glibc_bytes"] == 320 << 20
    assert v["glibc_non_temporal_threshold"] == 240 << 20 and v["agree"] is False
    fp = {"llc": v, "caches": sysfs}
    assert machine.llc_bytes(fp) == 32 << 20 and machine.llc_bytes(fp, "glibc") == 320 << 20
    (c,) = [c for c in machine.cautions(fp) if c["id"] == "glibc_llc_mismatch"]
    assert "320 MiB" in c["message"] and "32 MiB" in c["message"] and "240 MiB" in c["message"]


def test_llc_views_agree_without_legacy_leaf_on_intel():
    core = FakeCore()
    sysfs = [{"level": 3, "type": "Unified", "size_bytes": 32 << 20}]
    v = machine._llc_section(sysfs, core.cpuid, "GenuineIntel", {"cache": {}, "thresholds": {}})
    assert v["cpuid_legacy_bytes"] is None and v["agree"] is True
    assert not [c for c in machine.cautions({"llc": v}) if c["id"] == "glibc_llc_mismatch"]


def test_fingerprint_has_llc_views(fake_fp):
    assert set(fake_fp["llc"]) >= {"sysfs_bytes", "cpuid_bytes", "cpuid_legacy_bytes", "glibc_bytes",
                                   "glibc_non_temporal_threshold", "agree"}
    json.dumps(fake_fp["llc"])


def test_cpu_identity_decodes_cpuid_and_is_the_only_one():
    """One CPU identity (machine.cpu_identity) keys every per-model table."""
    import inspect

    from memfx.experiments import fill, store_forward
    from memfx.lab import machine
    regs = {0: (0x16, 0x756E6547, 0x6C65746E, 0x49656E69),     # "GenuineIntel"
            1: (0x000506E3, 0, 0, 0)}                          # Skylake-S: family 6, model 0x5E
    assert machine.cpu_identity(lambda leaf, sub=0: regs[leaf]) == ("GenuineIntel", 6, 0x5E)
    regs[1] = (0x00A20F12, 0, 0, 0)                            # Zen 3: family 0x19, model 0x21
    assert machine.cpu_identity(lambda leaf, sub=0: regs[leaf])[1:] == (0x19, 0x21)
    regs[1] = (0x00000F48, 0, 0, 0)                            # base family 0xF, ext 0: model 0x4
    assert machine.cpu_identity(lambda leaf, sub=0: regs[leaf])[1:] == (0xF, 0x4)
    regs[1] = (0x000306A9, 0, 0, 0)                            # Ivy Bridge: family 6, model 0x3A
    assert machine.cpu_identity(lambda leaf, sub=0: regs[leaf])[1:] == (6, 0x3A)
    regs[1] = (0x00000F00 | (0x5 << 16) | (0x3 << 4), 0, 0, 0)  # family 0xF: ext model counts
    assert machine.cpu_identity(lambda leaf, sub=0: regs[leaf])[1:] == (0xF, 0x53)
    for module in (fill, store_forward):
        assert not hasattr(module, "cpu_identity")
        assert "cpuid(1)" not in inspect.getsource(module)
    # this machine: the identity agrees with /proc/cpuinfo's family and model
    cpu = machine.fingerprint()["cpu"]
    if cpu.get("family") is not None and cpu.get("model") is not None:
        assert machine.cpu_identity()[1:] == (cpu["family"], cpu["model"])
