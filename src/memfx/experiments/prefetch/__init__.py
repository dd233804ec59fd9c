"""Software prefetch: what one costs, whether it ever traps, and whether it pays.

Seed 001 ("Strong prefetch"): on an UltraSPARC IV+ a *strong* prefetch of an
unmapped address -- the NULL `next` at the end of a linked list -- trapped
into the kernel: 1e6 prefetches of address 0 cost 1.24 s user + 1.34 s
system, a weak prefetch nothing.  A strong prefetch exists because a weak
one is dropped on a TLB miss and so cannot prime the TLB for a stride across
pages.  Drepper (seed 004, 6.3.2 "Average with Prefetch") adds the distance
question.  The same questions, asked of the CPU at hand.

Parts (each a set of cells; arms are interleaved inside a cell)
  cost    a prefetch of kind t0/t1/t2/nta/w at a target -- an L1-resident
          line, a DRAM-resident line, NULL, an unmapped page inside a mapped
          range, a PROT_NONE page, the kernel's text, the guard hole at the
          start of the kernel half and a non-canonical address -- in
          throughput mode (prefetches back to back: one address in a
          register, or for dram one line after another from a table) and
          latency mode (on a dependent chain), against the same loop without
          the prefetch ("none"); user and system CPU time and page faults per
          sample
  list    the seed's loop: a list walk prefetching next->next, so the last
          nodes prefetch NULL: unguarded vs `if (nn)` guarded vs none, lists
          in L1, L2, the LLC and DRAM
  tlb     a dependent walk over the 4 KiB pages of a region far beyond TLB
          reach, in random order, with a prefetch of the page d steps ahead
          that waits for the same load (d = -1 is the control: behind), 4 KiB
          vs transparent huge pages
  stream  a strided sum over an array beyond the LLC with a prefetch d
          elements ahead: the best d and the gain over the hardware
          prefetchers alone

Target addresses are data the lab makes (lab.invalid_addresses); no address
ever comes from the user.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...model import answers as ans
from ...model.answers import HIGHER, LOWER, Question
from ...model.errors import MemfxError, ParamError
from ...model.machine_view import Fingerprint
from ...model.plotspec import PlotSpec
from ...model.units import format_size
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (  # noqa: F401
    _WALK_NOTE,
    DISTANCE_TIE,
    INVALID_TARGETS,
    LIST_LEVELS,
    TRAP_SYSTEM_SHARE,
    WALKING_TARGETS,
    PrefetchAnswers,
    _loop_name,
    _num,
    _repeated_targets,
    _tlb_inconclusive,
    tlb_verdict,
)

KINDS = ("t0", "t1", "t2", "nta", "w")
VALID_TARGETS = ("l1", "dram")
TARGETS = VALID_TARGETS + INVALID_TARGETS
MODES = ("throughput", "latency")
PARTS = ("cost", "list", "tlb", "stream")
LIST_ARMS = ("none", "unguarded", "guarded")
SHORT_LIST = 8

# Entries in the target array of the latency mode for targets that are one
# address (it stays in L1 while the loop cycles through it).
TARGET_SLOTS = 64
# The first address of the kernel half with 4- and 5-level paging: the
# guard hole that Linux reserves for a hypervisor and never maps
# (Documentation/arch/x86/x86_64/mm.rst); canonical, supervisor half.
KERNEL_HOLE_4LEVEL = 0xFFFF800000000000
KERNEL_HOLE_5LEVEL = 0xFF00000000000000
# Where x86-64 Linux links its text (mm.rst): the "kernel" target.  Mapped
# (a supervisor translation the TLB may keep) unless KASLR moved the kernel.
KERNEL_TEXT = 0xFFFFFFFF81000000
# The page the tlb part strides by: one load per 4 KiB page (x86-64's base
# page, SDM Vol. 3A 4.5).
PAGE = 4096
LINE = 64
# region=auto: this many times the LLC sysfs reports (see region_bytes)
REGION_LLC_FACTOR = 2
# A list walk's warm-up pass, at most: the whole of a list up to the LLC
# (half of a 32 MiB LLC is 2^18 lines); a list beyond it misses on every
# node whatever was walked before, so a longer pass only costs time (a
# 2-million-node pass took 0.7 s here).
LIST_WARMUP_NODES = 1 << 18


def _cache_bytes(machine, level):
    fp = Fingerprint.of(machine)
    cache = fp.cache(level)
    if cache:
        return cache.size_bytes
    return {1: 32 << 10, 2: 1 << 20}.get(level, fp.llc_bytes)


def list_nodes(machine, level):
    """Nodes of a list whose lines fill about half of `level` (one 64-byte
    line per node), or 4x the LLC for dram."""
    if level == "short":
        return SHORT_LIST
    llc = Fingerprint.of(machine).llc_bytes
    size = {"l1": _cache_bytes(machine, 1) // 2, "l2": _cache_bytes(machine, 2) // 2,
            "llc": llc // 2, "dram": 4 * llc}[level]
    return max(2 * SHORT_LIST, size // LINE)


def five_level_paging(cpuinfo="/proc/cpuinfo"):
    """True when the kernel runs 5-level paging: it clears the la57 flag
    when it does not, so the flag in /proc/cpuinfo is the paging in use."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return "la57" in line.split()
    except OSError:
        pass
    return False


def user_limit(five_level=None):
    """One past the highest canonical user address: bit 47 (bit 56 with
    5-level paging) and up, sign-extended, is the supervisor half (SDM Vol.
    1, 3.3.7.1)."""
    five = five_level_paging() if five_level is None else five_level
    return 1 << (56 if five else 47)


def kernel_hole(five_level=None):
    five = five_level_paging() if five_level is None else five_level
    return KERNEL_HOLE_5LEVEL if five else KERNEL_HOLE_4LEVEL


def kernel_text_span(kallsyms="/proc/kallsyms"):
    """(start, end) of the kernel's text from /proc/kallsyms (_text, _etext),
    or None when it is unreadable or its addresses are hidden (zero, by
    kernel.kptr_restrict)."""
    got = {}
    try:
        with open(kallsyms) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] in ("_text", "_etext"):
                    got[parts[2]] = int(parts[0], 16)
                    if len(got) == 2:
                        break
    except (OSError, ValueError):
        return None
    start, end = got.get("_text"), got.get("_etext")
    if not start or not end or end <= start:
        return None
    return start, end


def mapping_at(addr, maps="/proc/self/maps"):
    """(start, end, perms) of the mapping of this process that covers addr,
    or None."""
    with open(maps) as f:
        for line in f:
            head = line.split()
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            if lo <= addr < hi:
                return lo, hi, head[1]
    return None


def target_addresses(lab):
    """The invalid targets by name: the lab's (NULL, an unmapped hole inside
    a mapped range, a PROT_NONE page, the kernel's text, a non-canonical
    address) and the kernel half's guard hole."""
    addrs = dict(lab.invalid_addresses())
    addrs["kernel_hole"] = kernel_hole()
    return addrs


def target_problems(addrs):
    """Why a target is not what it is named: [] when every one is.  Read
    from /proc/self/maps, so it is true of this process now."""
    problems = []
    if addrs.get("null", 0) != 0:
        problems.append("null is not address 0")
    if "unmapped" in addrs:
        a = addrs["unmapped"]
        if mapping_at(a) is not None:
            problems.append(f"unmapped target {a:#x} is mapped: {mapping_at(a)}")
        elif mapping_at(a - PAGE) is None or mapping_at(a + PAGE) is None:
            problems.append(f"unmapped target {a:#x} is not inside a mapped range")
    if "prot_none" in addrs:
        m = mapping_at(addrs["prot_none"])
        if m is None or not m[2].startswith("---"):
            problems.append(f"prot_none target {addrs['prot_none']:#x} is {m}")
    limit = user_limit()
    for name in ("kernel", "kernel_hole"):
        a = addrs.get(name)
        if a is not None and (a < (1 << 64) - limit):
            problems.append(f"{name} target {a:#x} is not in the supervisor half")
    if "kernel_hole" in addrs:
        text = kernel_text_span()
        if text and text[0] <= addrs["kernel_hole"] < text[1]:
            problems.append("kernel_hole target is inside the kernel's text")
    a = addrs.get("noncanonical")
    if a is not None and (a >> 63) == 0 and a < limit:
        problems.append(f"noncanonical target {a:#x} is a canonical user address")
    if a is not None and (a >> 63) == 1 and a >= (1 << 64) - limit:
        problems.append(f"noncanonical target {a:#x} is a canonical supervisor address")
    return problems


def _target_table(lab, addrs):
    """A Region holding the target addresses, then the kernels' cursor (zero:
    start at the first), and the number of targets."""
    table = lab.buffer(8 * len(addrs) + 8)
    view = np.frombuffer(table.buffer, dtype=np.uint64, count=len(addrs) + 1,
                         offset=table.offset)
    view[:-1] = np.asarray(addrs, dtype=np.uint64)
    view[-1] = 0
    del view
    return table, len(addrs)


def _order_table(lab, order):
    """A Region holding the uint32 page order, then the kernels' cursor (zero)."""
    n = len(order)
    table = lab.buffer(4 * n + 8)
    view = np.frombuffer(table.buffer, dtype=np.uint32, count=n, offset=table.offset)
    view[:] = order
    del view
    _order_cursor(table, n, 0)
    return table


def _order_cursor(table, n, value):
    view = np.frombuffer(table.buffer, dtype=np.uint64, count=1, offset=table.offset + 4 * n)
    view[0] = value
    del view


def _dram_targets(lab, big, params):
    """The lines of a `big`-byte region in shuffled order."""
    region = lab.buffer(big)
    rng = np.random.default_rng([params["seed"], 1])
    return region.address + LINE * rng.permutation(big // LINE).astype(np.uint64)


def _shared_in_cell(lab, key, make):
    """What make() builds from lab.buffer()s, built once and shared by the
    arms of one cell: the worker's lab.release() at the end of the cell
    unmaps those buffers, which ends the sharing."""
    cache = lab.cache.setdefault("prefetch.cell", {})
    got = cache.get(key)
    if got and not any(b.closed for b in got[0]):
        return got[1]
    for k in [k for k, v in cache.items() if any(b.closed for b in v[0])]:
        del cache[k]
    before = len(lab.buffers)
    value = make()
    cache[key] = (list(lab.buffers[before:]), value)
    return value


def _shared_in_run(lab, key, size, hugepages=False):
    """A read-only region kept for the rest of the run under `key`; asking for
    a region of another size unmaps those kept, so at most one per page size
    lives at a time (the two that plan() checks fit)."""
    cache = lab.cache.setdefault("prefetch.run", {})
    got = cache.get(key)
    if got is not None and not got.buffer.closed:
        return got
    for k in [k for k, r in cache.items() if r.size != size or r.buffer.closed]:
        try:
            cache.pop(k).buffer.close()
        except BufferError:
            pass                # a view still holds it: lab.close() unmaps it
    region = lab.run_buffer(size, hugepages=hugepages)
    cache[key] = region
    return region


def expected_stride_check(n, d, count, stride):
    """What pf_stride_* returns: the sum over `count` visits of an n-element
    region of (prefetched - base) * (loaded - base) = stride^2 * i * j,
    loading element i and prefetching j = (i + d) mod n (modulo 2^64)."""
    return expected_pages_check(np.arange(n), d, count, stride)


def expected_pages_check(order, d, count, stride):
    """What pf_pages_* returns: the sum over `count` steps of (prefetched -
    base) * (loaded - base), loading page order[i] and prefetching page
    order[(i + d) mod n] (modulo 2^64)."""
    order = np.asarray(order, dtype=np.uint64)
    n = len(order)
    k = np.arange(count, dtype=np.int64)
    loaded = order[k % n] * np.uint64(stride)
    fetched = order[(k + d % n) % n] * np.uint64(stride)
    return int(np.sum(loaded * fetched, dtype=np.uint64))


def page_order(n, seed):
    """The tlb part's visiting order of n pages: a fixed random permutation,
    so neither the hardware prefetchers nor the page-walk caches see a
    stride."""
    return np.random.default_rng([seed, 4, n]).permutation(n).astype(np.uint32)


@register
class Prefetch(PrefetchAnswers, Experiment):
    name = "prefetch"
    order = 60
    title = "Software prefetch: cost, traps and benefit"
    question = ("What does a software prefetch cost on this CPU, does a prefetch of an invalid "
                "address (NULL) ever trap into the kernel, and does prefetching pay?")
    seeds = ("001", "004")
    arms = ("none",) + KINDS + ("unguarded", "guarded", "prefetch")
    params = [
        Param("parts", "list:str", list(PARTS), "which parts to measure: cost, list, tlb, stream",
              "cost,list", choices=PARTS),
        Param("kinds", "list:str", list(KINDS), "prefetch instructions: t0, t1, t2, nta, w "
              "(prefetchw)", "t0,nta", choices=KINDS),
        Param("targets", "list:str", list(TARGETS), "what the cost part prefetches: l1, dram, "
              "null, unmapped, prot_none, kernel, noncanonical", "null,l1", choices=TARGETS),
        Param("modes", "list:str", list(MODES), "cost part: throughput (independent prefetches) "
              "and/or latency (on a dependent chain)", "throughput", choices=MODES),
        Param("levels", "list:str", list(LIST_LEVELS), "list part: an 8-node list (short) and "
              "lists filling half of l1, l2, the llc, or 4x the llc (dram)", "short,dram",
              choices=LIST_LEVELS),
        Param("distances", "list:int", [0, 1, 2, 4, 8, 16, 32],
              "tlb part: prefetch distance in pages (the control d = -1 is always added)",
              "1,4,16", minimum=0, maximum=4096),
        Param("strides", "list:size", [64, 256, 1024], "stream part: element stride, bytes",
              "64,4K", minimum=64, maximum=4096),
        Param("stream_distances", "list:int", [1, 2, 4, 8, 16, 32, 64],
              "stream part: prefetch distance in elements", "4,16", minimum=1, maximum=4096),
        Param("pages", "list:str", ["4k", "thp"], "tlb part: page sizes (4k, thp)", "4k",
              choices=("4k", "thp")),
        Param("region", "size", "auto", "tlb and stream parts: region size, bytes; auto = 2x "
              "the last-level cache that sysfs reports, at least 128 MiB", "256M",
              minimum=1 << 20),
    ]
    presets = {
        "quick": {"samples": 7, "min_sample_ms": 0.25, "kinds": "t0,nta,w", "modes": "throughput",
                  "distances": "4,16", "strides": "64", "stream_distances": "2,8,32",
                  "levels": "short,l2", "region": "128M"},
        # 0.5 ms samples: on a shared machine 1 ms samples were rejected
        # (preempted) so often that points ended below min_samples
        "full": {"samples": 7, "min_sample_ms": 0.5},
    }
    questions = (
        Question("prefetch.null_cost", "What does a prefetcht0 of NULL cost (independent "
                 "prefetches, loop included)?", "ns", "001",
                 "median ns per prefetch of address 0, throughput mode", better=LOWER),
        Question("prefetch.invalid_target_penalty", "Is a prefetch of an invalid address "
                 "(unmapped, PROT_NONE, kernel, non-canonical, NULL) dearer than one of an "
                 "L1-resident line?", "ratio", "001",
                 "ratio of medians, dearest invalid target vs the L1 line, prefetcht0, "
                 "throughput mode", band=ans.EFFECT_BAND),
        Question("prefetch.traps", "Does a prefetch of an invalid address ever trap into the "
                 "kernel (system time, page faults)?", "share", "001",
                 f"system-time share of the prefetch loops' CPU time (getrusage) over all "
                 f"invalid targets; detected above {TRAP_SYSTEM_SHARE:.0%}", headline=True,
                 band=(0.0, TRAP_SYSTEM_SHARE), scale="linear"),
        Question("prefetch.seed_loop", "Does the seed's unguarded prefetch of next->next (NULL "
                 "at the list's end) cost more than guarding it with a branch?", "ratio", "001",
                 "ratio of medians unguarded / guarded on the shortest list measured (the most "
                 "NULL prefetches per node); every level in details", band=ans.EFFECT_BAND),
        Question("prefetch.tlb_priming", "Does a prefetch to a page whose translation is missing "
                 "prime the TLB (a 'strong' prefetch)?", "ratio", "001",
                 "speed-up none / prefetch of a dependent walk over pages in random order at "
                 "the best distance >= 1 page, 4 KiB pages; detected only above the d = -1 "
                 "control; huge pages beside it"),
        Question("prefetch.stream_gain", "Does a software prefetch speed up a streaming loop "
                 "beyond the hardware prefetchers?", "ratio", "004",
                 "speed-up none / prefetch at the best distance, smallest stride measured",
                 better=HIGHER, band=ans.EFFECT_BAND),
        Question("prefetch.stream_distance", "Which prefetch distance serves a streaming loop "
                 "best?", "elements", "004",
                 "the shortest distance whose median time per load is within DISTANCE_TIE (10 %) "
                 "of the lowest, smallest stride"),
    )

    plots = (
        PlotSpec("cost", "ns per prefetch by target and kind (throughput)", kind="bars",
                 x="target", series=("arm",), select={"part": "cost", "mode": "throughput"},
                 log_y=True, xlabel="target"),
        PlotSpec("cost_latency", "ns per chase step with a dependent prefetch", kind="bars",
                 x="target", series=("arm",), select={"part": "cost", "mode": "latency"},
                 log_y=True, xlabel="target"),
        PlotSpec("tlb", "dependent walk, one load per 4 KiB page: prefetch d pages ahead vs none", kind="curve",
                 x="distance", series=("arm", "pages"), select={"part": "tlb"}, log_x=True,
                 xlabel="prefetch distance (pages; -1 = behind)"),
        PlotSpec("stream", "streaming sum: prefetch d elements ahead vs none", kind="curve",
                 x="distance", series=("arm", "stride_bytes"), select={"part": "stream"},
                 log_x=True, xlabel="prefetch distance (elements)"),
    )

    # -- plan --
    def region_bytes(self, params, machine):
        if params["region"] != "auto":
            return params["region"]
        # twice the LLC, the DRAM working set of bandwidth and copy: 4x was
        # seconds of faulting a replica on a large-LLC machine for a stream
        # that leaves the caches at 2x as surely
        return max(128 << 20, REGION_LLC_FACTOR * Fingerprint.of(machine).llc_bytes)

    def plan(self, params, machine):
        pts = []
        parts = params["parts"]
        if "cost" in parts:
            for mode in params["modes"]:
                for target in params["targets"]:
                    pp = {"part": "cost", "mode": mode, "target": target}
                    if target == "dram":
                        pp["region_bytes"] = self.region_bytes(params, machine)
                    pts += [Point(arm, dict(pp)) for arm in ("none",) + tuple(params["kinds"])]
        if "list" in parts:
            for level in params["levels"]:
                nodes = list_nodes(machine, level)
                pts += [Point(arm, {"part": "list", "level": level, "nodes": nodes})
                        for arm in LIST_ARMS]
        region = self.region_bytes(params, machine)
        avail = (machine.get("memory") or {}).get("available_bytes")
        if ("tlb" in parts or "stream" in parts) and avail and 2 * region > avail * 0.8:
            raise ParamError(f"region {format_size(region)} does not fit: two arms need "
                             f"{format_size(2 * region)} and {format_size(avail)} is available")
        if "tlb" in parts:
            for pages in params["pages"]:
                for d in sorted({-1, *params["distances"]}):
                    pts += [Point(arm, {"part": "tlb", "pages": pages, "distance": d,
                                        "stride_bytes": PAGE, "region_bytes": region})
                            for arm in ("none", "prefetch")]
        if "stream" in parts:
            for stride in params["strides"]:
                for d in params["stream_distances"]:
                    pts += [Point(arm, {"part": "stream", "stride_bytes": stride, "distance": d,
                                        "region_bytes": region})
                            for arm in ("none", "prefetch")]
        return pts

    def estimate_seconds(self, params, machine):
        pts = self.plan(params, machine)
        return 3 + len(pts) * params["samples"] * 2 * max(params["min_sample_ms"], 1.0) / 1000 * 3

    # -- one trial --
    def prepare(self, point, params, lab):
        part = point.params["part"]
        if part == "cost":
            return self._prepare_cost(point, params, lab)
        if part == "list":
            return self._prepare_list(point, params, lab)
        return self._prepare_stride(point, params, lab)

    def _cost_cell(self, point, params, lab):
        """What the arms of a cost cell prefetch, built once per cell: a
        target table per arm (a cursor is written back into each) and, in
        latency mode, a chain per arm, then the invalid targets.  Every
        mapping of the cell is made before the holes are punched: the kernel
        puts a new mapping in the highest gap that fits, which can be a
        one-page hole, and the "unmapped" target would then be a page this
        process wrote (translation cached, an L1 line)."""
        target, mode = point.params["target"], point.params["mode"]
        arms = ("none",) + tuple(params["kinds"])
        slots = 1 if mode == "throughput" else TARGET_SLOTS

        def make():
            tables = {arm: _target_table(lab, np.zeros(slots, dtype=np.uint64))[0]
                      for arm in arms}
            chains = {}
            if mode == "latency":
                order = np.random.default_rng([params["seed"], 2]).permutation(TARGET_SLOTS)
                for arm in arms:
                    region = lab.buffer(TARGET_SLOTS * LINE)
                    chains[arm] = lab.link_chain(region, LINE, TARGET_SLOTS,
                                                 order.astype(np.int32))
            if target == "l1":
                hot = lab.buffer(8 * LINE)
                addrs = hot.address + LINE * (np.arange(slots, dtype=np.uint64) % 8)
            else:
                named = target_addresses(lab)       # the holes: the cell's last mappings
                addrs = np.full(slots, named[target], dtype=np.uint64)
            for table in tables.values():
                view = np.frombuffer(table.buffer, dtype=np.uint64, count=slots,
                                     offset=table.offset)
                view[:] = addrs
                del view
            return tables, chains, int(addrs[0])
        tables, chains, addr = _shared_in_cell(
            lab, ("cost", mode, target, arms, params["seed"]), make)
        if target in INVALID_TARGETS:
            # checked at every arm: a mapping made since (anything of this
            # process) may have filled the hole
            problems = target_problems({target: addr})
            if problems:
                raise MemfxError("prefetch target is not what it is named: "
                                 + "; ".join(problems))
        return tables[point.arm], chains.get(point.arm), slots, addr

    def _prepare_cost(self, point, params, lab):
        kind, target = point.arm, point.params["target"]
        extra = {}
        if target == "kernel":
            # the kernel target costs what a mapped supervisor page does only
            # where the kernel's text is there (KASLR moves it): say which
            text = kernel_text_span()
            if text:
                extra["target_is_kernel_text"] = int(text[0] <= KERNEL_TEXT < text[1])
        if target == "dram":
            # Lines of a region 4x the LLC in shuffled order; the kernels go
            # on from where the last sample stopped, so a line was last
            # prefetched 4 LLCs of lines ago.
            # The arms of a cell share one table (and its cursor): building it
            # (map, shuffle, write) took ~0.5 s per arm.
            big = point.params["region_bytes"]
            table, n = _shared_in_cell(lab, ("dram_targets", big, params["seed"]),
                                       lambda: _target_table(lab, _dram_targets(lab, big, params)))
            # warm-up: a quarter of the targets (an LLC's worth of lines when
            # the region is 4x the LLC: afterwards no line prefetched is
            # still cached)
            common = dict(dst=table, size=8 * n, reject_page_faults=False, cpu_times=True,
                          warmup=n // 4, extra={"targets": n, **extra})
            if point.params["mode"] == "throughput":
                return Trial(f"pf_tput_{kind}", **common)
            src = self._latency_chain(params, lab)
            return Trial(f"pf_lat_{kind}", src=src, **common)
        table, chain, n, _ = self._cost_cell(point, params, lab)
        if point.params["mode"] == "throughput":
            # One address, prefetched back to back from a register: the loop
            # a plain probe writes.  A loop that also loads each address and
            # adds it up (pf_tput_*) hides the page walk of a not-present
            # target behind that work and reads it as free.
            return Trial(f"pf_rep_{kind}", dst=table, size=8, reject_page_faults=False,
                         cpu_times=True, warmup=TARGET_SLOTS,
                         extra={"targets": 1, "repeated": 1, **extra})
        return Trial(f"pf_lat_{kind}", src=chain, dst=table, size=8 * n,
                     reject_page_faults=False, cpu_times=True, warmup=n,
                     extra={"targets": n, **extra})

    @staticmethod
    def _latency_chain(params, lab):
        chain_region = lab.buffer(TARGET_SLOTS * LINE)
        order = np.random.default_rng([params["seed"], 2]).permutation(TARGET_SLOTS)
        return lab.link_chain(chain_region, LINE, TARGET_SLOTS, order.astype(np.int32))

    def _prepare_list(self, point, params, lab):
        nodes = point.params["nodes"]

        def make():
            region = lab.buffer(nodes * LINE)
            order = np.random.default_rng([params["seed"], 3, nodes]).permutation(nodes)
            return lab.link_chain(region, LINE, nodes,
                                  order.astype(np.int32 if nodes < 2**31 else np.int64))
        # The arms of a cell walk the same list (it is only read); each arm
        # has its own Region, because a resuming chase moves its start.
        chain = _shared_in_cell(lab, ("list", nodes, params["seed"]), make)
        # resume: each sample walks on from where the last one stopped, so a
        # list beyond the caches is not re-walked from a now-cached head.
        return Trial(f"pf_list_{point.arm}", src=replace(chain), resume=True,
                     warmup=min(nodes, LIST_WARMUP_NODES), extra={"nodes": nodes})

    def _prepare_stride(self, point, params, lab):
        p = point.params
        # Only read, so every arm and every cell of the tlb and stream parts
        # with these pages loads from one mapping (mapping and pre-faulting
        # 128 MiB took ~0.2 s per arm and cell)
        pages = p.get("pages", "4k")
        region = _shared_in_run(lab, ("stride", p["region_bytes"], pages),
                                p["region_bytes"], hugepages=pages == "thp")
        n = p["region_bytes"] // p["stride_bytes"]
        extra = {"elements": n}
        if pages == "thp":
            share = lab.huge_page_share(region)
            if share is not None:
                extra["huge_page_share"] = round(share, 3)
        if p["part"] == "tlb":
            # the visiting order and, after it, the kernels' cursor; shared by
            # the arms of the cell (the cursor too: each goes on where the
            # other stopped, so neither re-walks pages just walked)
            table = _shared_in_cell(lab, ("pages", n, params["seed"]),
                                    lambda: _order_table(lab, page_order(n, params["seed"])))
            kernel = "pf_pages_t0" if point.arm == "prefetch" else "pf_pages_none"
            return Trial(kernel, src=region, dst=table, size=p["region_bytes"],
                         value=p["stride_bytes"], aux=p["distance"] & 0xFFFFFFFFFFFFFFFF,
                         warmup=n, extra=extra)
        cursor = lab.buffer(8)          # the kernel's position, so samples go on from it
        kernel = "pf_stride_t0" if point.arm == "prefetch" else "pf_stride_none"
        # warm-up: one pass, so every element was last touched a region ago
        return Trial(kernel, src=region, dst=cursor, size=p["region_bytes"],
                     value=p["stride_bytes"], aux=p["distance"] & 0xFFFFFFFFFFFFFFFF,
                     warmup=n, extra=extra)

    def verify(self, lab, params):
        """The strided and page-walk kernels prefetch the element d ahead
        (checked through their checksums, which they compute from the very
        pointers given to the prefetch and the load)."""
        region = lab.buffer(64 * 64)
        order = page_order(64, 7)
        table = _order_table(lab, order)
        for d in (-1, 0, 3):
            for kernel in ("pf_stride_t0", "pf_stride_none"):
                cursor = lab.buffer(8)
                out = lab.call(Trial(kernel, src=region, dst=cursor, size=64 * 64, value=64,
                                     aux=d & 0xFFFFFFFFFFFFFFFF), 100)
                if out != expected_stride_check(64, d, 100, 64):
                    raise AssertionError(f"{kernel} with d={d} prefetched the wrong elements")
            for kernel in ("pf_pages_t0", "pf_pages_none"):
                _order_cursor(table, len(order), 0)
                out = lab.call(Trial(kernel, src=region, dst=table, size=64 * 64, value=64,
                                     aux=d & 0xFFFFFFFFFFFFFFFF), 100)
                if out != expected_pages_check(order, d, 100, 64):
                    raise AssertionError(f"{kernel} with d={d} prefetched the wrong pages")
        lab.release()


