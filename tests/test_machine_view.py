"""The typed Fingerprint: the one reader of a machine's cache levels."""
import re
from pathlib import Path

import pytest

from memfx.lab import machine
from memfx.model.machine_view import DRAM, FALLBACK_LLC_BYTES, CacheLevel, Fingerprint

SRC = Path(__file__).resolve().parent.parent / "src" / "memfx"

MACHINE = {
    "cpu": {"model_name": "Test CPU", "family": 6, "model": 85, "logical_cpus": 4},
    "caches": [
        # listed out of order, with the instruction cache in between
        {"level": 3, "type": "Unified", "size_bytes": 32 << 20, "line_bytes": 64, "ways": 16,
         "sets": 32768, "shared_cpu_list": "0-3"},
        {"level": 1, "type": "Instruction", "size_bytes": 32 << 10},
        {"level": 1, "type": "Data", "size_bytes": 48 << 10, "line_bytes": 64, "ways": 12,
         "sets": 64, "shared_cpu_list": "0"},
        {"level": 2, "type": "Unified", "size_bytes": 1 << 20, "line_bytes": 64},
    ],
}


def test_levels_sorted_named_and_instruction_caches_left_out():
    fp = Fingerprint.of(MACHINE)
    assert [(c.name, c.size_bytes) for c in fp.caches] == [
        ("L1d", 48 << 10), ("L2", 1 << 20), ("L3", 32 << 20)]
    assert [c.key for c in fp.caches] == ["l1d", "l2", "l3"]
    assert fp.cache(3).shared_cpu_list == "0-3" and fp.cache(2).shared_cpu_list is None
    assert fp.cache(1).ways == 12 and fp.cache(4) is None
    assert fp.level_names == ["L1d", "L2", "L3", DRAM]


def test_llc_is_the_last_level():
    fp = Fingerprint.of(MACHINE)
    assert fp.llc == fp.cache(3) and fp.llc_bytes == 32 << 20
    small_llc = {"caches": [{"level": 1, "type": "Data", "size_bytes": 4096},
                            {"level": 2, "type": "Unified", "size_bytes": 1 << 20}]}
    assert Fingerprint.of(small_llc).llc_bytes == 1 << 20


@pytest.mark.parametrize("size, level", [
    (1, "L1d"), (48 << 10, "L1d"), ((48 << 10) + 1, "L2"), (1 << 20, "L2"),
    ((1 << 20) + 1, "L3"), (32 << 20, "L3"), ((32 << 20) + 1, DRAM)])
def test_level_of_at_the_boundaries(size, level):
    assert Fingerprint.of(MACHINE).level_of(size) == level


@pytest.mark.parametrize("machine_dict", [None, {}, {"caches": None}, {"caches": []},
                                          {"caches": "garbage"}])
def test_a_fingerprint_without_caches(machine_dict):
    fp = Fingerprint.of(machine_dict)
    assert fp.caches == () and fp.llc is None
    assert fp.llc_bytes == FALLBACK_LLC_BYTES
    assert fp.level_of(1) == DRAM and fp.level_names == [DRAM]
    assert fp.label == "unknown CPU" and fp.id.startswith("m-")


def test_an_old_style_dict():
    """What an older document may hold: entries without line, ways or the
    shared list, a level given as text, a sizeless or level-less entry, a
    non-dict entry, and no cpu section at all."""
    old = {"caches": [
        {"level": "2", "type": "Unified", "size_bytes": 256 << 10},
        {"level": 1, "type": "Data", "size_bytes": None},
        {"level": 1, "type": "Data", "size_bytes": 32 << 10},
        {"type": "Unified", "size_bytes": 8 << 20},
        "L3 8M",
    ]}
    fp = Fingerprint.of(old)
    assert fp.caches == (CacheLevel(1, 32 << 10), CacheLevel(2, 256 << 10))
    assert fp.llc_bytes == 256 << 10
    assert fp.level_of(100 << 10) == "L2"


def test_label_and_id_are_what_the_documents_carry():
    fp = Fingerprint.of(MACHINE)
    assert fp.label == "Test CPU (family 6 model 85), 4 CPUs" == machine.label(MACHINE)
    assert fp.id == machine.machine_id(MACHINE)
    assert re.fullmatch(r"m-[0-9a-f]{16}", fp.id)
    # the id follows the identity: another cache makes another machine
    other = dict(MACHINE, caches=MACHINE["caches"][:-1])
    assert Fingerprint.of(other).id != fp.id


def test_the_fingerprint_is_frozen():
    fp = Fingerprint.of(MACHINE)
    with pytest.raises(AttributeError):
        fp.caches = ()


def test_machine_cache_sizes_follow_the_fingerprint_levels():
    """lab/machine.py's cache_sizes (stored in every document) names levels as
    the Fingerprint does."""
    fp = machine.fingerprint(sysroot=str(Path(__file__).parent / "data" / "machine_fake"))
    levels = Fingerprint.of(fp).caches
    assert levels and fp["cache_sizes"] == {c.name: c.size_bytes for c in levels}


# Ad-hoc readings of the cache levels that only machine_view.py may hold.
AD_HOC = {
    "the data/unified filter": re.compile(r"""\(\s*["']Data["']\s*,\s*["']Unified["']\s*\)"""),
    "the 32 MiB LLC fallback": re.compile(r"\b32\s*<<\s*20\b"),
}


def test_cache_levels_are_read_only_through_the_fingerprint():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "machine_view.py" and path.parent == SRC / "model":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.relative_to(SRC)}:{n}: {what}" for what, pattern in AD_HOC.items()
                      if pattern.search(line)]
    assert not found, "read the cache levels with memfx.model.machine_view.Fingerprint:\n" + \
        "\n".join(found)


def test_the_grep_catches_what_it_forbids():
    assert AD_HOC["the data/unified filter"].search('if c.get("type") in ("Data", "Unified"):')
    assert AD_HOC["the 32 MiB LLC fallback"].search("default=32 << 20)")
    assert not AD_HOC["the data/unified filter"].search('("Data", "Unified", "Load")')
