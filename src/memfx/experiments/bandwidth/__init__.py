"""Memory bandwidth per cache level and DRAM: read, write, copy, increment,
non-temporal stores, random line order.

Seed 004 (Drepper, "What every programmer should know about memory", 3.5.1:
"Sequential Read and Write", "Sequential Increment", "Random Addnextlast";
6.1 non-temporal stores): the bytes per cycle a single thread moves, as a
function of the working set, step down at each cache boundary; writes and
read-modify-writes pay for write-allocation and write-back; random order
defeats the prefetchers; non-temporal stores skip the caches, which pays only
when the data would not have stayed in them anyway.

Protocol (one cell per point, so no other kernel's data sits between two
samples of a point -- issue 16)
  1. map the working set (4 KiB pages or transparent huge pages, a
     parameter), fault it in, fill copy sources with a non-zero byte;
  2. verify every planned kernel before anything is timed: kernels that
     write are checked byte-exact against a reference for every size 0..4096
     at rotating misalignments with guard bytes (fill rows with fill's
     checker, copy rows with copy's, this experiment's own rows here);
     reading kernels return a checksum compared with numpy's; the scaling
     kinds also run once as a team, each member on its own guarded buffers
     with its own fill byte or source, which must come back byte-exact
     (check_team);
  3. one untimed warm-up pass; then samples of whole passes, one kernel call
     per pass over the whole working set (as a program sweeps its data),
     each sample at least min_sample_ms and never less than one pass, so
     the start-up of a sample (the first lines' misses, one TLB refill) is
     well under 1 % of it;
  4. GB/s = the kernel row's declared traffic / time (write-allocate reads
     are not counted, as in STREAM and likwid-bench); bytes per estimated
     core cycle from the dependent-add calibration run beside every cell.

Kinds (the arms)
  read               load every byte, loads only (bw_read_*; checked by their summing twins bw_sum_*)
  write              fill with a non-zero byte (fill.c's fill_* rows; rep stosb as width "rep")
  copy               src -> dst, each half the working set (copy.c's copy_* rows; rep movsb)
  rmw                add 1 to every 64-bit word in place (bw_rmw_*)
  nt_write           movntdq stores (fill_nt_sse)
  nt_copy            movntdq copy (copy_nt)
  random             the working set's 64-byte lines summed in a shuffled order (bw_random_*)
  write_readback     a normal fill, then a read pass over the same bytes
  nt_write_readback  a non-temporal fill, then a read pass

The working set is what a pass touches: a copy of working set W moves W/2
bytes from one W/2 buffer to another (as likwid-bench's -w counts all
streams).

Thread scaling (issue 11, question 2; Drepper 3.5.1 "Speed-Up Through
Parallelism", "Bandwidth with two Processes")
  scaling            read, write, copy and nt_write at 1..N threads (N = the
                     CPUs this process may use, `threads` caps it), one thread
                     pinned per CPU by the lab's team runner, all started at
                     one barrier and timed from its release to the last
                     finisher; aggregate GB/s = every thread's declared
                     traffic / that window.  Each thread works on its own
                     buffer: the threads share nothing but the caches and
                     memory they cannot help sharing, which is Drepper's
                     "two processes" case (separate processes would add only
                     separate page tables).  One working set per level, per
                     thread (a level the team shares, e.g. the L3, holds all
                     N of them); in DRAM one set of 2x the LLC split among
                     the N threads, as STREAM splits its arrays.  A sample whose threads did not run side by
                     side (the shortest run overlapped by the others for less
                     than 90 %) or were switched out is rejected by the lab.

Loaded latency (issue 11, question 4; as Intel MLC --loaded_latency does)
  idle_latency       a random pointer chase (64-byte elements, one per line)
                     on the measuring CPU, alone;
  loaded_latency     the same chase while every other CPU streams reads of its
                     own buffer (2x the LLC) at full speed.  The team runner
                     starts the chase only after every loader has finished one
                     pass and stops the loaders after it, and the lab rejects
                     a sample in which a loader's run did not cover the chase.
"""
from __future__ import annotations

import numpy as np

from ...model import answers as ans
from ...model.answers import HIGHER, Question
from ...model.errors import MemfxError, ParamError
from ...model.machine_view import Fingerprint
from ...model.plotspec import PlotSpec
from ...model.protocol import Region, Team, TeamMember
from ...model.units import format_size
from .._kit import cpu_text, parse_cpu_text, resolve_cpus
from .._sweep import SPARSE_FROM, SPARSE_FROM_HELP, kept_order, size_grid
from ..base import Experiment, Param, Point, Trial, register
from ..levels import (  # noqa: F401
    DRAM_FROM,
    INSIDE_ABOVE,
    INSIDE_BELOW,
    data_caches,
    declared_sizes,
    level_windows,
)
from .analysis import (  # noqa: F401
    BEST_QUANTILE,
    CONTENDED_CV,
    KNEE_MATCH_FACTOR,
    BandwidthAnswers,
    _bytes_per_cycle,
    _curves,
    _nearest_cache,
    _unreached,
    plateaus_by_level,
    where,
)
from .kernels import (  # noqa: F401
    FILL_BYTE,
    GUARD,
    KERNELS,
    KIND_WORDS,
    KINDS,
    LEVEL_KINDS,
    LEVEL_LABEL,
    LEVELS,
    LINE,
    RMW_INCREMENT,
    VECTOR_WIDTHS,
    WIDTH_ISA,
    WIDTHS,
    _guarded_check,
    _reference_sums,
    _rotating_offsets,
    check_random_kernel,
    check_read_kernel,
    check_rmw_kernel,
    check_team,
    check_write_read_kernel,
    rmw_reference,
    verify_kernel,
)

# The thread-scaling kinds and their arms (one per kind; threads in params).
SCALING_KINDS = ("read", "write", "copy", "nt_write")
SCALING_ARMS = tuple(f"threads_{k}" for k in SCALING_KINDS)
LATENCY_ARMS = ("idle_latency", "loaded_latency")
# The chase of the loaded-latency part: one element per 64-byte line (as the
# latency experiment's random chase with npad 7).
CHASE_ELEMENT = 64
# The chase's warm-up, and the pass each visit's re-warm makes (settle): a
# quarter of the latency experiment's 2^20 loads.  The chase is in DRAM,
# where nothing is left to warm but translations: 2^18 random loads touch
# most pages of a DRAM-sized set's page tables, and 2^20 cost seconds of
# every quick replica (docs/machine-notes.md, "Bandwidth's DRAM cells").
# settle still waits for steady blocks.
LOADED_WARM_LOADS = 1 << 18
# The random read's warm-up and re-warm pass in a set no cache holds (DRAM_FROM
# x the LLC or more): 2 chunks, 2^18 lines, as the loaded chase's 2^18 loads
# -- only translations are left to warm: past its first chunk a fresh set
# reads at its steady rate, and a whole pass cost a hundred times the
# samples it warmed (docs/machine-notes.md, "Bandwidth's DRAM cells").
RANDOM_DRAM_WARM_CHUNKS = 2
# The loaders' kind: sequential reads, the widest vector width.
LOADER_KIND = "read"
# A loader reads its buffer in calls of this many bytes, chunk after chunk
# (the team runner's chunks): it has started streaming within tens of
# microseconds and stops as soon after the chase (a whole 64 MiB pass
# would hold each sample up by milliseconds).
LOADER_CHUNK = 1 << 20
# A working set of at least CHUNKED_FROM bytes is walked in CHUNK_BYTES
# chunks, one iteration per chunk, consecutive calls on consecutive chunks
# (Trial.chunks): the stream the hardware sees is the same as one pass's, but
# a sample lasts a few chunks instead of a whole pass.  A 960 MiB DRAM cell
# (2x a 480 MiB LLC) took ~1.1 s a kind in whole passes (calibration, a
# re-warm of up to 3 passes, 5 samples of one pass each); chunked, its
# warm-up and re-warm are still one pass each.  Not for the readback kinds,
# whose read-back of a chunk right after writing it would hit the cache.
CHUNK_BYTES = 8 << 20
CHUNKED_FROM = 8 * CHUNK_BYTES
READBACK_KINDS = ("write_readback", "nt_write_readback")
CHUNKED_KINDS = ("read", "write", "copy", "rmw", "nt_write", "nt_copy", "random")


# Every level's bandwidth rests on what a guest's host shares: the last-level
# cache and memory with its tenants, and the core itself -- a vCPU whose
# core's other hardware thread runs another guest gets part of the load and
# store ports, so even an L1 read moves between host states (docs/stability.md:
# replicas of one survey in two states 1.4-1.5x apart at L1).
LEVEL_SHARED = True


def _questions():
    qs = []
    for kind in LEVEL_KINDS:
        for level in LEVELS:
            qs.append(Question(
                f"bandwidth.{kind}_{level}",
                f"{KIND_WORDS[kind].capitalize()} bandwidth of one thread with the working set "
                f"in {LEVEL_LABEL[level]}?", "GB/s", "004",
                f"median GB/s of the samples on the plateau stats.find_levels finds inside "
                f"{LEVEL_LABEL[level]} (best kernel measured, named; bytes per estimated cycle and "
                f"the best sustained p{BEST_QUANTILE * 100:.0f} in details)", better=HIGHER,
                host_shared=LEVEL_SHARED))
    qs += [
        Question("bandwidth.knees", "Where does the read bandwidth step down, against the cache "
                 "sizes the OS reports?", "levels", "004",
                 "knees of the read curve (stats.find_levels), each matched to a reported cache "
                 f"within {KNEE_MATCH_FACTOR:g}x; value = reported caches matched by a knee"),
        Question("bandwidth.random_vs_sequential", "How much faster is a sequential read than "
                 "reading the same lines in random order (what the prefetchers give)?", "ratio",
                 "004", "ratio of medians sequential / random GB/s, same width, pooled over each "
                 "level's points; value = DRAM (else the largest level measured)", headline=True, band=ans.EFFECT_BAND),
        Question("bandwidth.nt_write_crossover", "From which working set does a non-temporal "
                 "write beat a normal one?", "bytes", "004",
                 "smallest size from which nt_write's median GB/s exceeds the best normal write "
                 "(ratio CI above 1) at every larger size measured"),
        Question("bandwidth.nt_readback", "What does reading back data written with "
                 "non-temporal stores cost, against data written normally?", "ratio", "004",
                 "ratio of medians nt_write_readback / write_readback GB/s per level; value = "
                 "the last cache level measured (the data would still be cached); DRAM is a "
                 "detail of the octave sweep only (sweep=levels skips it)", band=ans.EFFECT_BAND),
        Question("bandwidth.thread_scaling", "How does the aggregate bandwidth scale from 1 to all "
                 "CPUs, per level?", "ratio", "004",
                 "speed-up = ratio of medians aggregate GB/s at N threads / 1 thread (each thread "
                 "its own buffer, started at one barrier, timed to the last finisher), per level "
                 "and kind in details; value = read in DRAM at the most threads planned "
                 "(not measured without it: the same cell every run)", better=HIGHER),
        Question("bandwidth.loaded_latency", "How much longer is a random load while the other "
                 "CPUs stream reads?", "ratio", "004",
                 "ratio of medians loaded / idle ns per load of a random 64-byte-line chase, the "
                 "loaders covering every accepted sample; per working set in details; value = "
                 "DRAM (else the largest size measured)", band=ans.EFFECT_BAND,
                 host_shared=True),
    ]
    return tuple(qs)


# ---- sizes and levels ----------------------------------------------------------

def sizes_for(lo, hi, per_octave, caches, sparse_from=0):
    """The working sets: geometric (one per doubling past sparse_from), plus
    both sides of each cache size up to sparse_from, rounded to whole
    128-byte blocks (a copy's halves stay line multiples).  A cache past
    sparse_from is straddled by the doubling sizes and measured inside by
    its level cell; latency owns the capacities.  Its two extra sizes
    around a DRAM-sized LLC were a seventh of a full replica for one line of
    bandwidth.knees (docs/machine-notes.md, "Bandwidth's DRAM cells")."""
    anchors = [c for _, c in caches if not sparse_from or c <= sparse_from]
    grid = [s for s in size_grid(lo, hi, per_octave, anchors, sparse_from)
            if lo <= s <= hi]
    return sorted({max(128, s // 128 * 128) for s in grid or [lo]})


def kernel_for(kind, width):
    """The row that measures `kind` at `width`, or None."""
    return KERNELS[kind].get(width)


def shared_levels(machine):
    """Level ids of the caches that more than one CPU shares (sysfs'
    shared_cpu_list); with no list, the last level (the usual L3)."""
    from ...lab.machine import parse_cpu_list
    fp = Fingerprint.of(machine)
    listed = [c for c in fp.caches if c.shared_cpu_list]
    out = {c.key for c in listed if len(parse_cpu_list(c.shared_cpu_list)) > 1}
    if not listed and fp.llc:
        out.add(fp.llc.key)
    return out


def level_sizes(machine, team, lo, hi):
    """[(level id, working set per thread)]: one size well inside each level
    for a team of `team` threads, each on its own buffer (a shared level
    holds all of them), within [lo, hi]: the geometric middle of the level's
    window (its upper half at most, 4 KiB multiples); DRAM at 2x the LLC."""
    caches = data_caches(machine)
    if not caches:
        return []
    return declared_sizes(caches, lo, hi, team, shared_levels(machine))


def thread_counts(most):
    """1, 2, 4, ... up to `most`, and `most` itself (Drepper's 1, 2, 4 threads;
    every count would be hundreds of points on a large machine)."""
    out, n = [], 1
    while n < most:
        out.append(n)
        n *= 2
    return out + [most]


def widest_width(supported):
    """The widest vector width `supported(width)` accepts (sse2 at least)."""
    return next(w for w in ("avx512", "avx2", "sse2") if supported(w))


def scaling_kernel(kind, width):
    """The row a thread-scaling kind runs: the widest width, movntdq for nt."""
    return KERNELS[kind]["sse2" if kind == "nt_write" else width]


# ---- working sets ------------------------------------------------------------------

def pooled_set(lab, key, size, thp):
    """A working set of `size` bytes from the run's mapping under `key`
    (lab.pooled_buffer: mapped and faulted once per replica).  Faulting a
    fresh mapping per cell was most of the sweep's time where the working
    sets reach a GiB: a guest's first touch of a page also faults on the
    host (docs/machine-notes.md, "Bandwidth's DRAM cells").
    The mapping has POOL_SLACK bytes to spare, so that a copy's skewed
    halves (copy_halves) of the same size fit in it."""
    return lab.pooled_buffer(key, size, capacity=size + POOL_SLACK, hugepages=thp)


POOL_SLACK = 64 << 10


# The destination starts this many bytes past a page boundary, the source on
# one: src[i] and dst[i] never share their low 12 address bits, so no load
# waits on an older store to the same 4 KiB offset (4K aliasing, seed 003):
# with both page-aligned a 64 MiB copy ran several per cent slower than
# likwid-bench's copy_avx512 (docs/machine-notes.md, "Bandwidth's DRAM
# cells").
COPY_DST_SKEW = 2048 + 64


def copy_halves(lab, key, size, thp):
    """(src, dst, half) of a copy of `size` bytes of traffic: two halves of
    one pooled mapping, the source page-aligned and the destination
    COPY_DST_SKEW bytes past a page boundary, the source filled with the
    fill byte."""
    half = size // 2
    gap = -(-half // 4096) * 4096 + COPY_DST_SKEW
    whole = pooled_set(lab, key, gap + half, thp)
    src = Region(whole.buffer, whole.offset, half, whole.address)
    dst = Region(whole.buffer, whole.offset + gap, half, whole.address + gap)
    view = np.frombuffer(src.buffer, np.uint8, count=half, offset=src.offset)
    view[:] = FILL_BYTE
    del view
    return src, dst, half


def chunked(trial, kind, size):
    """Walk a working set of CHUNKED_FROM bytes or more in CHUNK_BYTES chunks
    (see CHUNK_BYTES); the trial's size becomes one chunk's and its warm-up
    one pass over every chunk.  Random: each chunk is a slice of the whole
    set's order, its indices reaching every line (aux)."""
    if trial.size < CHUNKED_FROM:
        return trial
    if kind == "random":
        lines = trial.size // LINE
        per = CHUNK_BYTES // LINE
        trial.chunks = lines // per
        trial.aux = lines
        trial.size = per * LINE
        trial.dst_step, trial.src_step = per * 4, 0     # uint32 indices
    else:
        trial.chunks = trial.size // CHUNK_BYTES
        trial.size = CHUNK_BYTES
        step = CHUNK_BYTES
        trial.dst_step = step if trial.dst is not None else 0
        trial.src_step = step if trial.src is not None else 0
    trial.warmup = trial.chunks
    trial.extra["chunk_bytes"] = CHUNK_BYTES
    return trial


# ---- the experiment ---------------------------------------------------------------

@register
class Bandwidth(BandwidthAnswers, Experiment):
    name = "bandwidth"
    order = 15
    title = "Bandwidth per cache level: read, write, copy, increment, non-temporal, random"
    question = ("How many GB/s does one thread read, write, copy and update in each cache level "
                "and in DRAM, what do the prefetchers give, and when do non-temporal stores pay?")
    seeds = ("004",)
    arms = KINDS + SCALING_ARMS + LATENCY_ARMS
    params = [
        Param("kinds", "list:str", list(KINDS), "what to measure: " + ", ".join(KINDS),
              "read,write", choices=KINDS),
        Param("widths", "list:str", ["auto"], "kernel widths for read/write/copy/rmw/random: "
              "scalar, sse2, avx2, avx512, rep (rep stosb / rep movsb: write and copy), auto = "
              "the widest vector width this CPU has; the nt kinds use movntdq",
              "avx2,rep", choices=WIDTHS + ("auto",)),
        Param("pages", "list:str", ["4k"], "page sizes: 4k and/or thp (MADV_HUGEPAGE)",
              "4k,thp", choices=("4k", "thp")),
        Param("min_size", "size", 4096, "smallest working set, bytes", "16K", minimum=256),
        Param("max_size", "size", "auto", "largest working set, bytes; auto = 4x the last-level "
              "cache (at least 64 MiB, bounded by free memory)", "1G"),
        Param("per_octave", "int", 3, "working sets per doubling (geometric steps)", "4",
              minimum=1, maximum=16),
        Param("sparse_from", "size", SPARSE_FROM, "with sweep=octaves: " + SPARSE_FROM_HELP, "0",
              minimum=0),
        Param("sweep", "str", "octaves", "working sets of the one-thread kinds: octaves = "
              "per_octave sizes from min_size to max_size (the curves, their knees); levels = "
              "one declared size per cache level and DRAM (level_sizes: the geometric middle "
              "of the level's window, DRAM at 2x the LLC -- the same cells every run)",
              "levels", choices=("octaves", "levels")),
        Param("curves", "str", "all", "with sweep=octaves, which kernels get the whole sweep: "
              "all, or widest = the widest vector width's (and rep's and the nt kinds') on the "
              "first page size and at one declared size per level on the others, every other "
              "width at one declared size per level on the first page size "
              "(every width on both page sizes would take hours on a large-LLC machine)",
              "widest", choices=("all", "widest")),
        Param("dram_factor", "float", 4.0, "max_size auto = this many times the last-level "
              "cache (at least 64 MiB, bounded by free memory)", "2", minimum=2.0, maximum=64.0),
        Param("scaling", "list:str", list(SCALING_KINDS), "kinds measured at 1..N threads, one "
              "pinned thread per CPU, each on its own buffer (none = skip): " +
              ", ".join(SCALING_KINDS), "read,copy", choices=SCALING_KINDS + ("none",)),
        Param("latency_levels", "list:str", ["l2", "l3", "dram"], "working sets of the "
              "loaded-vs-idle latency chase, by level (none = skip): l1d, l2, l3, dram",
              "dram", choices=LEVELS + ("none",)),
        Param("threads", "int", 0, "most threads of the scaling and loaded-latency parts; 0 = "
              "every CPU this process may use", "2", minimum=0, maximum=64),
        Param("cpus", "list:int", "auto", "CPUs for the threaded parts (auto = every CPU this "
              "process may run on); the measuring CPU (cpu) runs thread 0", "0,1", minimum=0),
    ]
    presets = {
        # 5 samples (min_samples: fewer make every comparison inconclusive)
        # x 3 replicas (COMMON_PRESETS), at one declared working set per
        # level: an octave sweep spent most of a replica in the DRAM-sized
        # cells that answer nothing but the knees (docs/machine-notes.md)
        "quick": {"samples": 5, "min_sample_ms": 0.5, "per_octave": 1, "dram_factor": 2,
                  "sweep": "levels",
                  "kinds": ",".join(k for k in KINDS if k != "nt_copy"),
                  # the threaded parts' quick share: read scaling only (a team
                  # sample needs every CPU at once, which a busy machine rarely
                  # gives), and no loaded latency: its loader streams a buffer of
                  # its own, 2x the LLC, faulted in anew every replica (slowly
                  # in a VM: the host faults it back), for a ratio whose CI is wide with
                  # one loader (docs/machine-notes.md); --full measures it
                  "scaling": "read", "latency_levels": "none"},
        # curves for the widest width on 4 KiB pages, every other width and
        # THP at the level cells, to 2x the LLC at 2 sizes per octave (every
        # width on both page sizes at 4 per octave would take hours).
        # Samples of 1 ms (a sample is never less than one pass, so this
        # shortens only the cache-sized cells and their re-warms) and one
        # size per doubling past sparse_from (docs/machine-notes.md)
        # 5 samples x 3 replicas as in quick (the replicas make the CI)
        "full": {"samples": 5, "min_sample_ms": 1.0, "per_octave": 2, "dram_factor": 2,
                 "curves": "widest", "widths": "scalar,sse2,avx2,avx512,rep",
                 "pages": "4k,thp"},
    }
    questions = _questions()

    plots = (
        # one panel per kind (a full run has ~30 kind x kernel x page-size
        # lines: on one panel the legend covered the curves)
        PlotSpec("kinds", "GB/s vs working set, one panel per kind", kind="curve",
                 x="size_bytes", series=("kernel", "pages"), size_x=True,
                 arms=("read", "write", "copy", "rmw", "nt_write", "nt_copy"),
                 facets=("arm",), facet_title="{arm}: GB/s vs working set",
                 facet_order=(("arm", ("read", "write", "copy", "rmw", "nt_write", "nt_copy")),),
                 ylabel="GB/s", xlabel="working set (bytes)"),
        PlotSpec("random", "sequential vs random line order (what the prefetchers give)",
                 kind="curve", x="size_bytes", series=("arm", "kernel", "pages"), size_x=True,
                 arms=("read", "random"), log_y=True, ylabel="GB/s (log)",
                 xlabel="working set (bytes)"),
        PlotSpec("nt", "non-temporal vs normal stores, and reading the data back", kind="curve",
                 x="size_bytes", series=("arm", "kernel", "pages"), size_x=True,
                 arms=("write", "nt_write", "write_readback", "nt_write_readback"),
                 ylabel="GB/s", xlabel="working set (bytes)"),
        PlotSpec("scaling", "aggregate GB/s vs threads (each its own buffer)",
                 kind="curve", x="threads", series=("level",), facets=("arm",),
                 facet_title="{arm}: aggregate GB/s vs threads", select={"part": "scaling"}, log_y=True,
                 ylabel="GB/s, all threads (log)", xlabel="threads"),
        PlotSpec("loaded", "random-chase latency, idle vs while the other CPUs stream reads",
                 kind="bars", x="size_bytes", series=("arm",), select={"part": "loaded"},
                 ylabel="ns per load", xlabel="working set of the chase (bytes)"),
    )

    # -- plan --
    def max_bytes(self, params, machine):
        if params["max_size"] != "auto":
            return params["max_size"]
        avail = (machine.get("memory") or {}).get("available_bytes") or (4 << 30)
        factor = params.get("dram_factor", 4.0)
        return int(min(max(factor * Fingerprint.of(machine).llc_bytes, 64 << 20), avail / 4))

    @staticmethod
    def supported(width, machine):
        isa = WIDTH_ISA[width]
        if not isa:
            return True
        flags = machine.get("flags") or {}
        if flags:
            return bool(flags.get(isa))
        from ...lab.core import isa_supported
        return isa_supported(isa)

    def widths(self, params, machine):
        """The planned widths (auto = the widest vector width supported)."""
        out = []
        for w in params["widths"]:
            if w == "auto":
                w = next(x for x in reversed(VECTOR_WIDTHS) if self.supported(x, machine))
            if w not in out and self.supported(w, machine):
                out.append(w)
        return out

    def kernels(self, params, machine):
        """[(kind, kernel)] to measure."""
        widths = self.widths(params, machine)
        widest = next((w for w in reversed(VECTOR_WIDTHS) if w in widths and w != "scalar"),
                      None) or next(w for w in ("avx512", "avx2", "sse2")
                                    if self.supported(w, machine))
        out = []
        for kind in params["kinds"]:
            if kind in ("nt_write", "nt_copy"):
                out.append((kind, KERNELS[kind]["sse2"]))
            elif kind in ("write_readback", "nt_write_readback"):
                out.append((kind, KERNELS[kind][widest]))
            else:
                out += [(kind, KERNELS[kind][w]) for w in widths if w in KERNELS[kind]]
        return out

    def plan(self, params, machine):
        lo, hi = params["min_size"], self.max_bytes(params, machine)
        if hi < lo:
            raise ParamError(f"max_size ({format_size(hi)}) is below min_size ({format_size(lo)})")
        if not self.widths(params, machine):
            raise ParamError(f"widths: this CPU supports none of {', '.join(params['widths'])}")
        pairs = self.kernels(params, machine)
        if not pairs:
            raise ParamError("the kinds and widths given select no kernel (rep applies to write "
                             "and copy only)")
        avail = (machine.get("memory") or {}).get("available_bytes")
        peak = hi + hi // 16 + (2 << 20)      # working set + a random order + alignment
        if avail and peak > avail * 0.8:
            raise ParamError(f"max_size {format_size(hi)} does not fit: {format_size(avail)} "
                             f"of memory is available")
        levels = level_sizes(machine, 1, lo, hi)
        if params.get("sweep") == "levels":
            sizes = [s for _, s in levels] or [lo, hi]
        else:
            sizes = sizes_for(lo, hi, params["per_octave"], data_caches(machine),
                              params.get("sparse_from") or 0)   # runs stored before it: 0
        # the readbacks answer in the largest cache level (nt_readback); from
        # the DRAM cell on they are a detail: a fifth of a quick replica's
        # time, and 4 s of a full one (whole passes of 960 MiB, written and
        # read back, with and without THP)
        cells = set(s for _, s in levels)
        dram = min((s for lid, s in levels if lid == "dram"), default=None)
        skip = {(kind, s) for s in set(sizes) | cells for kind in READBACK_KINDS
                if dram is not None and s >= dram}
        curved = self.curve_kernels(params, machine, pairs)
        # sizes outermost: the kinds of one size run back to back
        pts = [Point(kind, {"size_bytes": s, "pages": pg, "kernel": k})
               for i, pg in enumerate(params["pages"]) for s in sorted(set(sizes) | cells)
               for kind, k in pairs
               if (kind, s) not in skip
               and (s in sizes if curved is None else
                    (s in cells and (i == 0 or k in curved))
                    or (i == 0 and k in curved and s in sizes))]
        return pts + self.team_points(params, machine, lo, hi)

    def curve_kernels(self, params, machine, pairs):
        """The kernels swept over every size (curves=widest: the widest vector
        width's, rep's and the nt kinds'); None = every kernel (curves=all,
        or sweep=levels, whose sizes are the level cells anyway)."""
        if params.get("curves", "all") == "all" or params.get("sweep") == "levels":
            return None
        widest = widest_width(lambda w: self.supported(w, machine))
        return {k for kind, k in pairs
                if k in (KERNELS[kind].get(widest), KERNELS[kind].get("rep"))
                or kind in ("nt_write", "nt_copy", "write_readback", "nt_write_readback")}

    def team_cpus(self, params):
        """The CPUs of the threaded parts, the measuring CPU first (resolved
        once, in the parent, and written back into params)."""
        _, cpus = resolve_cpus(params)
        most = params.get("threads") or len(cpus)
        return cpus[:max(1, min(most, len(cpus)))]

    def team_points(self, params, machine, lo, hi):
        """The thread-scaling and loaded-latency points (none with one CPU)."""
        cpus = self.team_cpus(params)
        if len(cpus) < 2:
            return []
        width = widest_width(lambda w: self.supported(w, machine))
        pg = params["pages"][0]
        pts = self.loaded_points(params, machine, cpus, lo, hi, width)
        kinds = [k for k in params["scaling"] if k != "none"]
        for lid, size in level_sizes(machine, len(cpus), lo, hi):
            for kind in kinds:
                for n in thread_counts(len(cpus)):
                    # DRAM: one set of 2x the LLC split among the threads, as
                    # STREAM splits its arrays (a 2x-LLC set per thread was
                    # twice the passes per sample); a cache level: a set per thread
                    # that the level holds for the whole team
                    each = size // n // 4096 * 4096 if lid == "dram" else size
                    pts.append(Point(f"threads_{kind}", {
                        "part": "scaling", "level": lid, "size_bytes": each, "threads": n,
                        "total_bytes": each * n, "cpus": cpu_text(cpus[:n]), "pages": pg,
                        "kernel": scaling_kernel(kind, width)}))
        return pts

    @staticmethod
    def loaded_points(params, machine, cpus, lo, hi, width):
        """The loaded-latency points, planned before the scaling ones: the
        loaders' buffers (2x the LLC each) are then mapped and faulted once,
        and the scaling part's smaller sets reuse them (lab.pooled_buffer)."""
        pg = params["pages"][0]
        pts = []
        levels = [lv for lv in params["latency_levels"] if lv != "none"]
        for lid, size in level_sizes(machine, 1, lo, hi):
            if lid not in levels:
                continue
            for arm in LATENCY_ARMS:
                pts.append(Point(arm, {
                    "part": "loaded", "level": lid, "size_bytes": size, "threads": len(cpus),
                    "cpus": cpu_text(cpus), "pages": pg, "kernel": "chase_ptr",
                    "loader": KERNELS[LOADER_KIND][width],
                    # each loader streams its own buffer from DRAM (as MLC's do)
                    "loader_bytes": int(max(Fingerprint.of(machine).llc_bytes * DRAM_FROM,
                                            64 << 20))}))
        return pts

    def estimate_seconds(self, params, machine):
        pts = self.plan(params, machine)
        per_cell = params["samples"] * params["min_sample_ms"] / 1000 + 0.01
        big = sum(p.params["size_bytes"] for p in pts) / 5e9 * (params["samples"] + 3)
        return 2 + len(pts) * per_cell + big

    # -- one trial --
    def prepare(self, point, params, lab):
        if point.params.get("part") == "scaling":
            return self.prepare_scaling(point, params, lab)
        if point.params.get("part") == "loaded":
            return self.prepare_loaded(point, params, lab)
        kind, p = point.arm, point.params
        size, kernel, thp = p["size_bytes"], p["kernel"], p["pages"] == "thp"
        extra = {}
        common = dict(metric="bandwidth", difference=False, warmup=1, extra=extra)
        # working sets come from the run's pooled mapping (pooled_set)
        if kind in ("copy", "nt_copy"):
            src, dst, half = copy_halves(lab, "main", size, thp)
            region, trial = dst, Trial(kernel, size=half, src=src, dst=dst, **common)
        elif kind == "random":
            region = pooled_set(lab, "main", size, thp)
            lines = size // LINE
            order_region = lab.pooled_buffer("order", 4 * lines)
            view = np.frombuffer(order_region.buffer, np.uint32, count=lines,
                                 offset=order_region.offset)
            view[:] = kept_order(lab.cache, lines, [params["seed"], size])
            del view
            trial = Trial(kernel, size=size, src=region, dst=order_region, **common)
        elif kind == "read":
            region = pooled_set(lab, "main", size, thp)
            trial = Trial(kernel, size=size, src=region, **common)
        elif kind == "rmw":
            region = pooled_set(lab, "main", size, thp)
            trial = Trial(kernel, size=size, dst=region, value=RMW_INCREMENT, **common)
        else:   # write, nt_write and the readbacks: the fill byte's value semantic
            region = pooled_set(lab, "main", size, thp)
            trial = Trial(kernel, size=size, dst=region, value=FILL_BYTE, **common)
        if thp:
            share = lab.huge_page_share(region)
            if share is not None:
                extra["huge_page_share"] = round(share, 3)
        if kind in CHUNKED_KINDS:
            chunked(trial, kind, size)
            if kind == "random" and lab.llc_bytes and size >= DRAM_FROM * lab.llc_bytes:
                trial.warmup = min(trial.chunks, RANDOM_DRAM_WARM_CHUNKS)
        return trial

    @staticmethod
    def member_buffers(kind, size, lab, thp, member=0):
        """(dst, src, size, value) of one team member's own buffers for `kind`
        (pooled per member; member 0's is the one-thread kinds' mapping)."""
        key = "main" if member == 0 else ("member", member)
        if kind == "copy":
            src, dst, half = copy_halves(lab, key, size, thp)
            return dst, src, half, 0
        region = pooled_set(lab, key, size, thp)
        if kind == "read":
            return None, region, size, 0
        return region, None, size, FILL_BYTE     # write, nt_write

    def prepare_scaling(self, point, params, lab):
        """A team of `threads` members, member 0 on the measuring CPU, each on
        its own buffers, all running the kind's kernel over the same size."""
        p = point.params
        kind = point.arm[len("threads_"):]
        cpus = parse_cpu_text(p["cpus"])
        if cpus[0] != lab.cpu:
            raise MemfxError(f"thread 0 must run on the measuring CPU {lab.cpu}, not {cpus[0]}")
        members, size = [], p["size_bytes"]
        for i, cpu in enumerate(cpus):
            dst, src, n, value = self.member_buffers(kind, size, lab, p["pages"] == "thp", i)
            members.append(TeamMember(cpu, dst=dst, src=src))
        return Trial(p["kernel"], size=n, value=value, dst=members[0].dst, src=members[0].src,
                     metric="bandwidth", difference=False, warmup=1,
                     team=Team(members, "together"))

    def prepare_loaded(self, point, params, lab):
        """The chase on the measuring CPU, alone (idle) or with every other CPU
        of the list streaming reads of its own buffer (loaded)."""
        p = point.params
        cpus = parse_cpu_text(p["cpus"])
        if cpus[0] != lab.cpu:
            raise MemfxError(f"thread 0 must run on the measuring CPU {lab.cpu}, not {cpus[0]}")
        size, thp = p["size_bytes"], p["pages"] == "thp"
        n = size // CHASE_ELEMENT
        # both arms of the cell chase one chain, linked once: the shuffle and
        # the linking of a 960 MiB chain took 1.4 s of a quick replica
        chain = lab.cell_cache.get(("loaded_chain", size, thp))
        if chain is None:
            region = pooled_set(lab, "main", n * CHASE_ELEMENT, thp)
            chain = lab.link_chain(region, CHASE_ELEMENT, n,
                                   kept_order(lab.cache, n, [params["seed"], size]))
            lab.cell_cache[("loaded_chain", size, thp)] = chain
        members = [TeamMember(cpus[0])]
        if point.arm == "loaded_latency":
            chunks = max(1, p["loader_bytes"] // LOADER_CHUNK)
            for i, cpu in enumerate(cpus[1:], 1):
                src = pooled_set(lab, ("member", i), chunks * LOADER_CHUNK, thp)
                members.append(TeamMember(cpu, kernel=p["loader"], src=src, size=LOADER_CHUNK,
                                          count=1, value=0, aux=0, chunks=chunks))
        return Trial("chase_ptr", src=chain, size=0, metric="time", difference=True,
                     warmup=min(n, LOADED_WARM_LOADS), resume=True, extra={"elements": n},
                     team=Team(members, "background"))

    def verify(self, lab, params):
        """Every planned kernel, before anything is timed (see the checkers above)."""
        machine = {"flags": {}}
        planned = [k for _, k in self.kernels(params, machine)]
        cpus = self.team_cpus(params)
        width = widest_width(lambda w: self.supported(w, machine))
        team_kinds = [k for k in params["scaling"] if k != "none"] if len(cpus) > 1 else []
        team_kernels = [scaling_kernel(k, width) for k in team_kinds]
        if len(cpus) > 1 and [lv for lv in params["latency_levels"] if lv != "none"]:
            team_kernels.append(KERNELS[LOADER_KIND][width])
        for kernel in dict.fromkeys(planned + team_kernels):
            row = lab.kernels.get(kernel)
            if row is None:
                raise MemfxError(f"no kernel {kernel!r} in the core")
            if not row.supported:
                continue
            bad = verify_kernel(row)
            if bad:
                raise MemfxError(f"kernel {kernel} failed verification: {bad}")
        for kind in team_kinds:
            bad = check_team(lab, cpus, kind, scaling_kernel(kind, width))
            if bad:
                raise MemfxError(f"team {kind} on CPUs {cpu_text(cpus)} failed verification: {bad}")


