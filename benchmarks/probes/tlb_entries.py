"""Build and run the tlb_entries probe and memfx's tlb experiment, pinned to
one CPU, and print how many 4 KiB translations each finds the L1 data TLB
and the L2 TLB hold, with memfx's CI and whether the probe's count is in it.

    python benchmarks/probes/tlb_entries.py [--rounds 3] [--reps 9] [--cpu 1]

The probe (tlb_entries.c) chases a random cycle of pointers, one per page,
laid out as memfx's tlb experiment lays its 4k arm out (element e at
e * (4096 + 64) bytes), over every page count of a fine sweep: one for the
L1 DTLB (--l1, default every count from 32 to 160) and one reaching well
past the L2 TLB (--l2, default 512 to 8192 pages in steps of 32).  Each
round runs the probe (its own interleaved repetitions), then memfx
(`memfx run tlb --quick --set pages=4k`: the 4k arm is the one both
answers read; the huge-page control only words them), alternating, so a
change of host state between them shows as a round that disagrees instead
of as a bias.  Before timing, the hot loops are checked in objdump: the
probe's chase and memfx's chase_ptr must each be a loop of dependent loads,
`mov (%reg),%reg` of one register and nothing else touching memory.

Where a step lies, on the probe's curve (medians over its repetitions):
the plateau below it is the median of the first --edge points of the
window, the one above it that of the last --edge points; a count is fast
while its time stays below the lower plateau plus the larger of 3 x the
plateau's robust scatter and 5 % of the step.  "last fast" is the count
before the first one that leaves that band for good (itself and the next
two counts above it); "half-way" is the first count at or past half the
step (the same rule).  The L2 window starts past 1.25 x the L1d's capacity
in lines (sysfs): one line per page, so the chase leaves the L1d there,
a cache step that is not the TLB's."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

# the drivers share probe_tools.py beside them, also when loaded by path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_tools import build, disassembly, loops, memfx_document

EDGE = 6                 # points that make a plateau's level, at each end of a window
CACHE_MARGIN = 1.25      # the L2 window starts past this x the L1d's capacity in lines


def check_chase(binary, symbol):
    """None when `symbol` holds a loop whose only memory accesses are
    dependent loads `mov (%r),%r` of one register, else what is wrong."""
    insns = disassembly(binary, symbol)
    if not insns:
        return f"{symbol}: not found in {binary}"
    for body in loops(insns):
        mem = [t for t in body if "(" in t and not t.startswith("nop")]
        chase = [t for t in mem if re.fullmatch(r"mov\s+\((%\w+)\),\1", t)]
        if mem and len(chase) == len(mem) and len(chase) >= 4:
            return None
    text = "\n".join(t for _, t in insns)
    return f"{symbol}: no loop of dependent loads (mov (%r),%r, nothing else) in\n{text}"


def loads_per_trip(binary, symbol):
    return max((sum(bool(re.fullmatch(r"mov\s+\((%\w+)\),\1", t)) for t in body)
                for body in loops(disassembly(binary, symbol))), default=0)


def l1d_lines():
    """The L1 data cache's capacity in 64-byte lines from sysfs, or None."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        names = os.listdir(root)
    except OSError:
        return None
    for name in names:
        try:
            def read(f, name=name):
                with open(os.path.join(root, name, f)) as fh:
                    return fh.read().strip()
            if read("level") == "1" and read("type") in ("Data", "Unified"):
                size = read("size")
                mult = {"K": 1 << 10, "M": 1 << 20}.get(size[-1], 1)
                return int(size.rstrip("KM")) * mult // 64
        except (OSError, ValueError):
            continue
    return None


def run_probe(exe, cpu, reps, ms, ranges):
    out = subprocess.run(["taskset", "-c", str(cpu), exe, str(reps), str(ms), *ranges],
                         check=True, capture_output=True, text=True).stdout
    curve, low, note = {}, {}, ""
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "probe":
            curve[int(parts[1])] = float(parts[2])     # median over repetitions
            low[int(parts[1])] = float(parts[3])       # the fastest repetition
        elif line.startswith("# "):
            note = line[2:]
    return curve, low, note


def find_step(curve, above=0):
    """(last fast, half-way, lower ns, upper ns) of the step in `curve`
    ({pages: ns}) among counts above `above` (see the module's doc), or
    None when the window is too short to hold two plateaus."""
    pts = sorted((n, t) for n, t in curve.items() if n > above)
    if len(pts) < 3 * EDGE:
        return None
    ns = [t for _, t in pts]
    low = statistics.median(ns[:EDGE])
    high = statistics.median(ns[-EDGE:])
    scatter = 1.4826 * statistics.median(abs(t - low) for t in ns[:EDGE])
    step = high - low

    def first_leaving(level):
        for i in range(len(pts)):
            if all(t > level for _, t in pts[i:i + 3]):
                return i
        return None
    i = first_leaving(low + max(3 * scatter, 0.05 * step))
    j = first_leaving(low + 0.5 * step)
    last_fast = pts[i - 1][0] if i else None
    half = pts[j][0] if j is not None else None
    return last_fast, half, low, high


def run_memfx(cpu, db):
    doc = memfx_document(["tlb", "--quick", "--json", "-q",
           "--set", "pages=4k", "--set", f"cpu={cpu}", "--db", db])
    if doc is None:
        return {}
    got = {}
    for a in doc["answers"]:
        if a["question"] in ("tlb.l1_entries", "tlb.l2_entries") and a.get("value") is not None:
            got[a["question"]] = (a["value"], a.get("ci_low"), a.get("ci_high"),
                                  [r.get("value") for r in a.get("replicas") or []])
    return got


def fmt(x):
    return "-" if x is None else f"{x:.0f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="probe/memfx alternations")
    ap.add_argument("--reps", type=int, default=9, help="interleaved repetitions per probe run")
    ap.add_argument("--ms", type=float, default=0.5, help="ms per probe sample")
    ap.add_argument("--cpu", type=int, default=os.cpu_count() - 1, help="CPU to pin both to")
    ap.add_argument("--l1", default="32:160:1", help="L1 DTLB sweep, LO:HI:STEP pages")
    ap.add_argument("--l2", default="512:8192:32", help="L2 TLB sweep, LO:HI:STEP pages")
    ap.add_argument("--probe-only", action="store_true", help="skip memfx's runs")
    args = ap.parse_args(argv)
    if args.reps < 7:
        print("note: fewer than 7 repetitions per round", file=sys.stderr)
    for tool in ("gcc", "objdump", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"needs {tool}")
    lines = l1d_lines()
    above = int(CACHE_MARGIN * lines) if lines else 0
    workdir = tempfile.mkdtemp(prefix="tlb-probe-")
    try:
        exe = build("tlb_entries", workdir)
        from memfx.lab import _core
        problems = [p for p in (check_chase(exe, "chase"), check_chase(_core.__file__, "chase_ptr"))
                    if p]
        if problems:
            sys.exit("hot loop check failed:\n" + "\n".join(problems))
        print(f"hot loops: probe chase ({loads_per_trip(exe, 'chase')} per trip) and memfx "
              f"chase_ptr ({loads_per_trip(_core.__file__, 'chase_ptr')} per trip) are dependent "
              f"loads mov (%reg),%reg only")
        rows = []
        for r in range(args.rounds):
            c1, f1, n1 = run_probe(exe, args.cpu, args.reps, args.ms, [args.l1])
            c2, f2, n2 = run_probe(exe, args.cpu, args.reps, args.ms, [args.l2])
            m = {} if args.probe_only else run_memfx(args.cpu, os.path.join(workdir, f"r{r}.db"))
            rows.append((find_step(c1), find_step(c2, above), m,
                         find_step(f1), find_step(f2, above)))
            print(f"round {r + 1}: {n1}; {n2}", file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"4 KiB translations, {args.rounds} round(s), CPU {args.cpu}; probe: {args.reps} "
          f"interleaved repetitions per round, sweeps {args.l1} and {args.l2} pages"
          + (f" (L2 window from {above + 1} pages: L1d = {lines} lines)" if lines else ""))
    head = (f"{'level':<9} {'round':>5}   {'probe last fast':>15} {'(min)':>6} {'half-way':>8} "
            f"{'ns below-above':>15}   {'memfx':>6} {'CI':>13} {'replicas':>16}   "
            f"{'inside CI':>9} {'half-way in CI':>14}")
    print(head)
    print("-" * len(head))
    for k, q in ((0, "tlb.l1_entries"), (1, "tlb.l2_entries")):
        label = ("L1 DTLB", "L2 TLB")[k]
        for r, row in enumerate(rows):
            step, m = row[k], row[2].get(q)
            low_step = row[3 + k]
            fast_min = low_step[0] if low_step else None
            fast, half, lo_ns, hi_ns = step or (None, None, None, None)
            ns = f"{lo_ns:.2f}-{hi_ns:.2f}" if step else "-"
            if m:
                v, lo, hi, reps = m
                ci = f"[{fmt(lo)}, {fmt(hi)}]"
                rep = ",".join(fmt(x) for x in reps) if reps else "-"

                def within(x, lo=lo, hi=hi):
                    return "-" if x is None or lo is None else ("yes" if lo <= x <= hi else "no")
                inside, half_in = within(fast), within(half)
            else:
                v, ci, rep, inside, half_in = None, "-", "-", "-", "-"
            print(f"{label:<9} {r + 1:>5}   {fmt(fast):>15} {fmt(fast_min):>6} {fmt(half):>8} "
                  f"{ns:>15}   {fmt(v):>6} {ci:>13} {rep:>16}   {inside:>9} {half_in:>14}")
    print("probe last fast: the last count on the plateau before the step (see --help), the "
          "count the issue compares;\n(min): the same on the curve of each count's fastest "
          "repetition (disturbances only slow a chase\ndown); half-way: the first count at half "
          "the step (where the step is a ramp, the two differ).\nmemfx: its answer's value and "
          "CI (over its replicas, whose own values follow).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
