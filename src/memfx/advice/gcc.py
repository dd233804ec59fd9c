"""GCC advice: -m{memcpy,memset}-strategy= ranges derived from a copy run's
curves, and the check that compiles them and measures them in a child
process (advise.py gathers, advises and re-exports every name)."""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile

from ..experiments import copy as copy_analysis
from ..model import findings as fnd
from ..model.errors import MemfxError
from .common import (
    _child_cpu,
    _interleave,
    compare_variants,
    decide,
    disagreement_text,
    replica_disagreement,
    run_child,
)

# ---- GCC -m{memcpy,memset}-strategy= --------------------------------------
#
# Syntax and rules, from GCC's i386 options documentation ("-mmemcpy-strategy=
# strategy ... a comma-separated list of alg:max_size:dest_align triplets")
# and its parser (gcc/config/i386/i386-options.cc,
# ix86_parse_stringop_strategy_string): each range is alg:max_size:dest_align;
# alg is one of the names below (gcc/config/i386/stringop.def); max_size is a C
# int read with %d and is inclusive (a copy of n bytes uses the first range
# whose max_size >= n; -1 means no limit); sizes must increase; the last
# max_size must be -1; at most MAX_STRINGOP_ALGS = 4 ranges (i386.h);
# dest_align is "align" (align the destination first) or "noalign".
GCC_ALGORITHMS = ("libcall", "rep_byte", "rep_4byte", "rep_8byte", "byte_loop", "loop",
                  "unrolled_loop", "vector_loop")
MAX_RANGES = 4
GCC_INT_MAX = 2**31 - 1
# No alignment prologue: memfx's strategies are measured without one, and
# the prologue is part of what the seed's thread objected to in GCC's "REP
# MOVSQ with manual alignment".
DEST_ALIGN = "noalign"

# memfx copy strategy -> the GCC algorithm that emits the same kind of code.
# nt maps to libcall: glibc itself switches to non-temporal stores above its
# threshold, so a size range where NT wins is one to hand to the library.
STRATEGY_ALG = {
    "rep_movsb": "rep_byte", "rep_stosb": "rep_byte",
    "rep_movsq": "rep_8byte", "rep_stosq": "rep_8byte",
    "gpr_unrolled": "unrolled_loop",
    "sse": "vector_loop", "avx2": "vector_loop", "avx512": "vector_loop",
    "libc": "libcall", "nt": "libcall",
}
# The vector loop GCC emits when compiling for baseline x86-64 (no -march)
# uses SSE2 registers only, so AVX2/AVX-512 curves must not argue for it.
BASELINE_VECTOR = ("sse",)

OPS = {"copy": "memcpy", "set": "memset"}
MODE_PREFERENCE = ("throughput", "chained", "latency")
METRIC = "ns_per_call"

# A strategy missing at a size costs this factor when a merge would need it.
_MISSING_PENALTY = math.log(1e3)


class StrategyError(ValueError):
    """A -mmemcpy-strategy= / -mmemset-strategy= string GCC would reject."""


class NoCopyResults(MemfxError):
    """advise needs a complete copy run."""


def validate_strategy(s):
    """Parse a GCC strategy string; raise StrategyError if GCC would reject it
    (or if it has unreachable ranges).  Returns [(alg, max_size, dest_align)]."""
    if not isinstance(s, str) or not s:
        raise StrategyError("empty strategy string")
    if s != s.strip() or any(c.isspace() for c in s):
        raise StrategyError(f"whitespace in strategy string {s!r}")
    parts = s.split(",")
    if len(parts) > MAX_RANGES:
        raise StrategyError(f"{len(parts)} ranges in {s!r}; GCC accepts at most {MAX_RANGES}")
    out = []
    for part in parts:
        fields = part.split(":")
        if len(fields) != 3:
            raise StrategyError(f"range {part!r} is not alg:max_size:dest_align")
        alg, max_text, align = fields
        if alg not in GCC_ALGORITHMS:
            raise StrategyError(f"unknown algorithm {alg!r}; known: {', '.join(GCC_ALGORITHMS)}")
        if not re.fullmatch(r"-1|[1-9][0-9]*", max_text):
            raise StrategyError(f"max_size {max_text!r} in {part!r} is not -1 or a positive integer")
        max_size = int(max_text)
        if max_size > GCC_INT_MAX:
            raise StrategyError(f"max_size {max_size} does not fit GCC's int")
        if align not in ("align", "noalign"):
            raise StrategyError(f"dest_align {align!r} in {part!r} is not align or noalign")
        if out:
            prev = out[-1][1]
            if prev == -1:
                raise StrategyError(f"range {part!r} follows a -1 range and is unreachable")
            if max_size != -1 and max_size <= prev:
                raise StrategyError(f"max_size {max_size} does not increase (previous {prev})")
        out.append((alg, max_size, align))
    if out[-1][1] != -1:
        raise StrategyError(f"the last max_size must be -1 in {s!r}")
    return out


def strategy_string(ranges):
    """GCC strategy string from ranges [(alg_or_strategy, max_size[, dest_align])]
    or dicts with alg/strategy, max_size, dest_align.  The last range's
    max_size is written as -1 whatever it was.  Validated before it is returned."""
    if not ranges:
        raise StrategyError("no ranges")
    items = []
    for i, r in enumerate(ranges):
        if isinstance(r, dict):
            alg = r.get("alg") or r.get("strategy")
            max_size, align = r.get("max_size"), r.get("dest_align", DEST_ALIGN)
        else:
            alg, max_size = r[0], r[1]
            align = r[2] if len(r) > 2 else DEST_ALIGN
        alg = STRATEGY_ALG.get(alg, alg)
        if i == len(ranges) - 1:
            max_size = -1
        items.append(f"{alg}:{int(max_size)}:{align}")
    s = ",".join(items)
    validate_strategy(s)
    return s


# ---- curves from a copy result document ------------------------------------

def modes_of(points, op):
    """Timing modes of `op` in the copy points, the preferred one first."""
    return copy_analysis.modes_of([p for p in points if p.get("metric") == METRIC], op)


def point_curves(points, op, mode):
    """{strategy: {size: (median, ci_low, ci_high)}}: the copy analysis's curves."""
    return copy_analysis.point_curves(points, op, mode)


def _fastest(candidates):
    """Name of the smallest median in {name: (median, lo, hi, ...)}."""
    return min(candidates, key=lambda k: candidates[k][0])


def complete_sizes(table):
    """Sizes of {size: {name: ...}} measured for every regular competitor.
    A sweep may refine around a crossover with only the two strategies
    concerned; at such a size the others are missing, not slower, so it
    cannot say which one is fastest.  Regular = present at half the sizes or more."""
    count = {}
    for row in table.values():
        for name in row:
            count[name] = count.get(name, 0) + 1
    regular = {n for n, c in count.items() if c * 2 >= len(table)}
    return [s for s in sorted(table) if regular <= set(table[s])]


def shown_ranges(ranges, curves):
    """Copy's best-strategy ranges (computed by the copy analysis, never
    here) with what the advice shows beside them: the range's median ns at
    its first and last size, and the strategies tied with it at every
    compared size of the range (copy's tie rule)."""
    out = []
    sizes = copy_analysis.comparable_sizes(curves) if curves else []
    for r in ranges:
        k = r["strategy"]
        inside = [z for z in sizes if r["min_size"] <= z <= r["max_size"]]
        tied = None
        for z in inside:
            acc = copy_analysis.acceptable(curves, z, copy_analysis.CLEAR_WIN) - {k}
            tied = acc if tied is None else tied & acc
        c = curves.get(k) or {}
        out.append(dict(r, median_ns_first=(c.get(r["min_size"]) or (None,))[0],
                        median_ns_last=(c.get(r["max_size"]) or (None,))[0],
                        tied=sorted(tied or ())))
    return out


# ---- GCC ranges --------------------------------------------------------------

def alg_table(curves, vector_strategies=BASELINE_VECTOR):
    """{size: {alg: (median, lo, hi, strategy)}}: for each GCC algorithm the
    fastest memfx strategy that GCC's code for it resembles."""
    table = {}
    for strategy, curve in curves.items():
        alg = STRATEGY_ALG.get(strategy)
        if alg is None or (alg == "vector_loop" and strategy not in vector_strategies):
            continue
        for size, st in curve.items():
            if size > GCC_INT_MAX:
                continue          # max_size is a C int; the last range (-1) covers these
            cur = table.setdefault(size, {}).get(alg)
            if cur is None or st[0] < cur[0]:
                table[size][alg] = (*st, strategy)
    return {s: t for s, t in sorted(table.items()) if t}


def _cost(table, size, alg):
    st = table[size].get(alg)
    return None if st is None else st[0]


def _loss(table, sizes, alg):
    """Sum over sizes of log(cost of alg / cost of the best alg): 0 when alg is
    best everywhere; a missing alg costs _MISSING_PENALTY."""
    total = 0.0
    for s in sizes:
        best = min(v[0] for v in table[s].values())
        c = _cost(table, s, alg)
        total += _MISSING_PENALTY if c is None else math.log(c / best)
    return total


def _collapse(ranges):
    out = []
    for r in ranges:
        if out and out[-1]["alg"] == r["alg"]:
            out[-1]["sizes"] = out[-1]["sizes"] + r["sizes"]
        else:
            out.append({"alg": r["alg"], "sizes": list(r["sizes"])})
    return out


def merge_ranges(ranges, table, max_ranges=MAX_RANGES):
    """Merge [{alg, sizes}] down to max_ranges: repeatedly hand the range whose
    loss of gain is smallest (sum of log cost ratios over its sizes) to the
    neighbour's algorithm."""
    ranges = _collapse(ranges)
    original = {tuple(r["sizes"]) for r in ranges}
    while len(ranges) > max_ranges:
        best = None
        for i, r in enumerate(ranges):
            for j in (i - 1, i + 1):
                if 0 <= j < len(ranges):
                    delta = _loss(table, r["sizes"], ranges[j]["alg"]) - _loss(table, r["sizes"], r["alg"])
                    if best is None or delta < best[0]:
                        best = (delta, i, j)
        _, i, j = best
        ranges[i] = {"alg": ranges[j]["alg"], "sizes": ranges[i]["sizes"]}
        ranges = _collapse(ranges)
    # Merging is local: a range grown from alternating neighbours may end up
    # with the algorithm that is not the best over all of it.  Refit each
    # merged range; a range left as it came keeps its algorithm (chosen by
    # the copy analysis, ties to the simplest).
    algs = sorted({a for row in table.values() for a in row})
    for r in ranges:
        if tuple(r["sizes"]) not in original:
            r["alg"] = min(algs, key=lambda a: (_loss(table, r["sizes"], a), a != r["alg"]))
    return _collapse(ranges)


def _tied(table, size, a, b, band):
    """Both algorithms measured at `size` and within the band of each other."""
    ca, cb = _cost(table, size, a), _cost(table, size, b)
    return ca is not None and cb is not None and max(ca, cb) <= min(ca, cb) * (1 + band)


def roundest(lo, hi):
    """The integer in [lo, hi] with the most trailing zero bits (there is
    one): 128 before 96 before 88."""
    for k in range(max(hi, 1).bit_length(), -1, -1):
        m = (hi >> k) << k
        if m >= lo and m > 0:
            return m
    return hi


def _pair_loss(table, sizes, a, b, t):
    """What threshold t costs between a (sizes <= t) and b (above): the
    summed log cost ratio to the cheaper of the two where t picks the
    dearer (a missing algorithm costs _MISSING_PENALTY)."""
    total = 0.0
    for s in sizes:
        mine, other = (a, b) if s <= t else (b, a)
        cm, co = _cost(table, s, mine), _cost(table, s, other)
        total += _MISSING_PENALTY if cm is None else (0.0 if co is None else
                                                      max(0.0, math.log(cm / co)))
    return total


def snap_boundaries(ranges, table, band=None):
    """Each boundary of [{alg, sizes}] placed where its two algorithms
    cross, then on the roundest size (roundest) of the tie around it.

    The crossing is the threshold of least _pair_loss over the sizes of the
    two ranges (the nearest to where copy's ranges put it among equals):
    copy's ranges end where a strategy stops being within CLEAR_WIN of the
    fastest, an edge that noise moves far on curves that part slowly
    (56-96 B between replicas of one run), and a merge leaves a boundary
    where a third strategy's range was.  The tie is the thresholds reached
    from it by handing over only sizes where the two are within the
    no-effect band of each other (either is as good there), each range
    keeping a size; a canonical point inside it does not move with noise,
    so replicas agree on it (vector_loop:124 and :92 from two quick surveys
    of one machine).  Returns [{alg, sizes, threshold}] (the last range's
    threshold is None)."""
    band = fnd.threshold("effect_band") if band is None else band
    sizes = sorted(table)
    out = [dict(r, sizes=sorted(r["sizes"])) for r in ranges]
    for i in range(len(out) - 1):
        a, b = out[i]["alg"], out[i + 1]["alg"]
        first, j = sizes.index(out[i]["sizes"][0]), sizes.index(out[i]["sizes"][-1])
        end = sizes.index(out[i + 1]["sizes"][-1])
        both = sizes[first:end + 1]
        j = min(range(first, end), key=lambda k: (round(_pair_loss(table, both, a, b, sizes[k]), 9),
                                                 abs(k - j)))
        lo = j
        while lo > first and _tied(table, sizes[lo], a, b, band):
            lo -= 1
        hi = j
        while hi + 1 < end and _tied(table, sizes[hi + 1], a, b, band):
            hi += 1
        t = roundest(sizes[lo], sizes[hi + 1] - 1)
        out[i]["sizes"] = [s for s in both if s <= t]
        out[i + 1]["sizes"] = [s for s in both if s > t]
        out[i]["threshold"] = t
    if out:
        out[-1]["threshold"] = None
    return out


def alg_at(string, size):
    """The algorithm a GCC strategy string gives a copy of `size` bytes."""
    for alg, max_size, _ in validate_strategy(string):
        if max_size == -1 or size <= max_size:
            return alg
    return None


def gcc_stability(pooled, replicas, curves, vector_strategies=BASELINE_VECTOR, earlier=()):
    """Does the pooled string hold across the replicas (each analysed alone:
    replicas' {"string"}) and the machine's earlier runs (``earlier``, each
    one's pooled {"string"}: a host state this run's replicas never saw is
    still a state the advice must hold in)?  common.replica_disagreement
    over the sizes compared, each algorithm costed by its fastest strategy
    on the pooled curves.  None without a pooled string or two voters."""
    strings = [r.get("string") for r in replicas if r and r.get("string")]
    before = [r.get("string") for r in earlier if r and r.get("string")]
    if not pooled.get("string") or len(strings) + len(before) < 2:
        return None
    table = alg_table(curves, vector_strategies)
    sizes = complete_sizes(table)
    picks = [(lambda z, s=s: alg_at(s, z) if s else None) for s in strings + before]
    d = replica_disagreement(sizes, lambda z: alg_at(pooled["string"], z), picks,
                             lambda z, alg: None if alg is None else _cost(table, z, alg))
    return {**d, "replica_strings": strings, "earlier_strings": before,
            "reason": disagreement_text(d, len(strings), "algorithm", len(before))}


def _geo_ratio(table, sizes, alg_a, alg_b):
    """Geometric mean over sizes of cost(alg_b) / cost(alg_a) where both exist."""
    logs = [math.log(_cost(table, s, alg_b) / _cost(table, s, alg_a)) for s in sizes
            if _cost(table, s, alg_a) and _cost(table, s, alg_b)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def gcc_usable(curves, vector_strategies=BASELINE_VECTOR):
    """The curves of the strategies GCC's algorithms stand for (no AVX loops
    unless allowed: baseline GCC code has SSE2 registers only)."""
    return {k: c for k, c in curves.items() if k in STRATEGY_ALG
            and (STRATEGY_ALG[k] != "vector_loop" or k in vector_strategies)}


def _op_of(curves):
    return "set" if any(k in copy_analysis.STRATEGIES["set"][:2] for k in curves) else "copy"


def gcc_ranges(curves, ranges=None, vector_strategies=BASELINE_VECTOR, max_ranges=MAX_RANGES,
               op=None):
    """The GCC strategy for one op from its curves: {"string", "ranges": [...]}
    or None when there is nothing to compare.

    The ranges are the copy analysis's best-strategy ranges over the
    strategies GCC can emit (`ranges`, e.g. the copy answer's
    baseline_ranges; computed by copy's best_ranges when not given), mapped
    to GCC algorithms; only when there are more than GCC's four does the
    range whose loss is smallest go to its neighbour (merge_ranges); each
    boundary then goes where its two algorithms cross, on the roundest size
    of their tie (snap_boundaries), so noise does not move it.  Each range
    says which sizes it covers, which measured strategy stands for its
    algorithm, and how much faster that is than the runner-up algorithm
    (geometric mean ratio)."""
    table = alg_table(curves, vector_strategies)
    if len(table) < 1 or all(len(t) < 2 for t in table.values()):
        return None
    table = {size: table[size] for size in complete_sizes(table)}
    if ranges is None:
        op = op or _op_of(curves)
        ranges = copy_analysis.best_ranges(gcc_usable(curves, vector_strategies),
                                           copy_analysis.SIMPLICITY[op])
    ranges = [r for r in ranges if r["strategy"] in STRATEGY_ALG]
    if not ranges:
        return None
    # every compared size belongs to the copy range that covers it, or to
    # the one before it (a size between two ranges, or one copy did not compare)
    items = [{"alg": STRATEGY_ALG[r["strategy"]], "sizes": []} for r in ranges]
    for size in table:
        i = max([j for j, r in enumerate(ranges) if r["min_size"] <= size] or [0])
        items[i]["sizes"].append(size)
    ranges = snap_boundaries(merge_ranges([it for it in items if it["sizes"]], table, max_ranges),
                             table)
    out = []
    for i, r in enumerate(ranges):
        sizes = r["sizes"]
        others = {a for s in sizes for a in table[s]} - {r["alg"]}
        runner_up, ratio = None, None
        for a in sorted(others):
            g = _geo_ratio(table, sizes, r["alg"], a)
            if g is not None and (ratio is None or g < ratio):
                runner_up, ratio = a, g
        rep = sizes[len(sizes) // 2]
        st = table[rep].get(r["alg"])
        out.append({
            "alg": r["alg"], "min_size": sizes[0],
            "max_size": -1 if i == len(ranges) - 1 else r["threshold"],
            "last_measured_size": sizes[-1], "n_sizes": len(sizes),
            "strategies": sorted({table[s][r["alg"]][3] for s in sizes if r["alg"] in table[s]}),
            "runner_up": runner_up,
            "speedup_vs_runner_up": ratio,
            "example": {"size": rep, "ns": st[0] if st else None,
                        "runner_up_ns": _cost(table, rep, runner_up) if runner_up else None},
            "dest_align": DEST_ALIGN,
        })
    return {"string": strategy_string([(r["alg"], r["max_size"], DEST_ALIGN) for r in out]),
            "ranges": out}


# ---- the GCC check -----------------------------------------------------------------

CHECK_SIZES = (16, 32, 64, 128, 168, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536)
CHECK_MAX_SIZE = 4 << 20

# The functions under test: one per size and op.  Each starts on its own
# page, so a function whose code is identical in both builds sits at the same
# page offset in both (with PIE, ASLR moves whole pages), and a longer body
# elsewhere cannot shift it: without this, layout alone moved identical code
# by +-20% here.
_C_FUNCS = r"""/* memfx advise: fixed-size copies and sets, expanded by GCC according to
   -mmemcpy-strategy= / -mmemset-strategy= (compiled with and without them). */
#include <stddef.h>

#define SIZES %(sizes)s

/* noipa: GCC must expand each body on its own and keep every call. */
#define X(n) \
  __attribute__((noipa, aligned(4096))) void mfx_copy_##n(char *d, const char *s) \
  { __builtin_memcpy(d, s, n); } \
  __attribute__((noipa, aligned(4096))) void mfx_set_##n(char *d, int c) \
  { __builtin_memset(d, c, n); }
SIZES
#undef X

struct mfx_entry { size_t size; void (*copy)(char *, const char *); void (*set)(char *, int); };
const struct mfx_entry mfx_table[] = {
#define X(n) {n, mfx_copy_##n, mfx_set_##n},
SIZES
#undef X
};
const size_t mfx_table_len = sizeof mfx_table / sizeof mfx_table[0];
"""

def gcc_test_source(sizes):
    """The C file of the functions under test (built into a shared object
    that advice's child times with the lab's harness: child.py)."""
    sizes = sorted({int(s) for s in sizes})
    return _C_FUNCS % {"sizes": " ".join(f"X({s})" for s in sizes)}


def gcc_flags(strings):
    """strings: {"memcpy": s or None, "memset": s or None} -> flag list."""
    flags = []
    for fn in ("memcpy", "memset"):
        s = strings.get(fn)
        if s:
            validate_strategy(s)
            flags.append(f"-m{fn}-strategy={s}")
    return flags


def _classify(body):
    """What GCC emitted for one function body (assembly text)."""
    text = body.lower()
    m = re.search(r"\brep[a-z]*\s+(movs|stos)([bwlq])", text)
    if m:
        return f"rep {m.group(1)}{m.group(2)}"
    if re.search(r"\b(call|jmp)\s+(memcpy|memset)\b", text):
        return "call " + re.search(r"\b(?:call|jmp)\s+(memcpy|memset)", text).group(1)
    loop = bool(re.search(r"\n\s*j(?!mp)[a-z]+\s+\.l\w+", text)) and bool(re.search(r"\n\.l\w+:", text))
    vec = "%xmm" in text or "%ymm" in text or "%zmm" in text
    if loop:
        return "vector loop" if vec else "gpr loop"
    return "straight-line moves" + (" (xmm)" if vec else "")


def parse_codegen(asm):
    """{function name: (kind, normalised body)} from `gcc -S` output."""
    out = {}
    current, lines = None, []

    def close():
        if current:
            raw = "\n".join(lines)
            # Label numbers differ between two compilations of the same code.
            out[current] = (_classify("\n" + raw), re.sub(r"\.L\d+", ".L", raw))
    for line in asm.splitlines():
        m = re.match(r"^(mfx_(?:copy|set)_\d+):", line)
        if m:
            close()
            current, lines = m.group(1), []
            continue
        if current is None:
            continue
        s = line.strip()
        if s.startswith(".cfi") or s.startswith(".size") or s.startswith(".p2align") \
                or s.startswith(".globl") or s.startswith(".type") or s.startswith(".section") \
                or s.startswith(".text"):
            continue
        if s.startswith(".LFE") or s.startswith(".LFB"):
            continue
        lines.append(s)
    close()
    return out


class GccCheck:
    """Builds and runs the fixed-size test, default vs advised strings."""

    def __init__(self, gcc=None, workdir=None):
        self.gcc = gcc or shutil.which("gcc")
        if not self.gcc:
            raise MemfxError("gcc not found")
        self._tmp = None
        self.workdir = workdir
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="memfx-advise-")
            self.workdir = self._tmp.name

    def close(self):
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _gcc(self, args):
        proc = subprocess.run([self.gcc, *args], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise MemfxError(f"gcc failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        return proc

    def build(self, sizes, strings):
        """Compile the functions for `sizes` twice, into two shared objects:
        GCC's default and with the strings; returns {variant: {"library",
        "flags", "codegen": {fn: kind}, "bodies"}}.  The timed loop is the
        core's (child.py), so only the functions differ between the two."""
        funcs = os.path.join(self.workdir, "strategy_funcs.c")
        with open(funcs, "w") as f:
            f.write(gcc_test_source(sizes))
        out = {}
        for variant, flags in (("default", []), ("advised", gcc_flags(strings))):
            # Baseline x86-64 on purpose (no native-CPU tuning flags): the
            # strings are advice for code built the portable way, and this is
            # how memfx is built.  -fPIC: the functions are a shared object.
            common = ["-O2", "-std=gnu11", "-fPIC", *flags]
            library = os.path.join(self.workdir, f"funcs_{variant}.so")
            self._gcc([*common, "-shared", "-o", library, funcs])
            code = parse_codegen(self._gcc([*common, "-S", "-o", "-", funcs]).stdout)
            out[variant] = {"library": library, "flags": flags,
                            "codegen": {k: v[0] for k, v in code.items()},
                            "bodies": {k: v[1] for k, v in code.items()}}
        return out

    @staticmethod
    def run_library(library, op, sizes, samples, min_ms, cpu, timeout=120):
        """{size: [ns per call]} of the library's mfx_<op>_<size> functions,
        timed in advice's child process."""
        return run_child({"what": "library", "library": library, "op": op,
                          "sizes": sorted(int(s) for s in sizes), "samples": samples,
                          "min_ms": min_ms}, cpu=cpu, timeout=timeout, what="strategy check")


def check_sizes(ranges, base=CHECK_SIZES, limit=CHECK_MAX_SIZE):
    """The ladder plus each range boundary and the size just above it."""
    sizes = set(base)
    for r in ranges or []:
        b = r.get("last_measured_size") if r.get("max_size") == -1 else r.get("max_size")
        if b and b > 0:
            sizes.update((b, b + 1))
    return sorted(s for s in sizes if 0 < s <= limit)


def gcc_check(strings, sizes, rounds=9, samples=5, min_ms=0.5, seed=0, gcc=None, on_round=None):
    """Measure the advised strings against GCC's default.  strings: {"memcpy":
    s or None, "memset": ...}; sizes: {"memcpy": [...], "memset": [...]}.
    Returns {fn: {"per_size", "overall", "decision", "reason", "codegen"}}."""
    all_sizes = sorted({s for v in sizes.values() for s in v})
    cpu = _child_cpu()
    with GccCheck(gcc) as chk:
        built = chk.build(all_sizes, strings)
        results = {}
        for fn, op in (("memcpy", "copy"), ("memset", "set")):
            if not strings.get(fn):
                continue
            want = set(sizes.get(fn) or [])
            prefix = f"mfx_{op}_"
            codegen = []
            affected = []
            for s in sorted(want):
                name = f"{prefix}{s}"
                d = built["default"]["bodies"].get(name)
                a = built["advised"]["bodies"].get(name)
                differs = d is not None and a is not None and d != a
                codegen.append({"size": s, "default": built["default"]["codegen"].get(name),
                                "advised": built["advised"]["codegen"].get(name), "differs": differs})
                if differs:
                    affected.append(s)

            def run_one(variant, op=op, want=want):
                return GccCheck.run_library(built[variant]["library"], op, want, samples, min_ms,
                                            cpu)
            data = _interleave(("default", "advised"), rounds, seed, run_one, on_round)
            cmp = compare_variants(data["default"], data["advised"], affected, seed=seed)
            decision, reason = decide(cmp["overall"], cmp["per_size"], cmp["classes"])
            if not affected:
                reason = "the strings do not change GCC's code at any checked size"
            for row in cmp["per_size"]:
                row.update(next(c for c in codegen if c["size"] == row["size"]))
            results[fn] = {**cmp, "decision": decision, "reason": reason,
                           "flags": f"-m{fn}-strategy={strings[fn]}", "rounds": rounds,
                           "samples_per_process": samples, "compiler": _gcc_version(chk.gcc),
                           "cflags": "-O2 (baseline x86-64)", "cpu": cpu}
    return results


def _gcc_version(gcc):
    try:
        return subprocess.run([gcc, "--version"], capture_output=True, text=True,
                              timeout=10).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None
