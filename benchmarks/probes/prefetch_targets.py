"""Build and run the prefetch_targets probe and memfx's prefetch cost part,
pinned to one CPU, and print ns per prefetcht0 by target side by side.

    python benchmarks/probes/prefetch_targets.py [--rounds 3] [--reps 9] [--cpu 1]

Each round runs the probe (its own interleaved repetitions), then memfx,
alternating, so that a change of host state between them shows as a round
that disagrees instead of as a bias.  Before timing, the hot loops are
checked in objdump: the probe's loop_reg and memfx's pf_rep_t0 must each be
eight prefetcht0 of one register and a counter.  Columns: ns per prefetch
and the ratio to the L1 line, which is what the two loops share (their
loops without the prefetch are not the same loop)."""
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
from probe_tools import build, disassembly, memfx_document

TARGETS = ("l1", "null", "unmapped", "prot_none", "kernel", "kernel_hole", "noncanonical")


def hot_loop(binary, symbol):
    """The instructions of `symbol` in objdump's disassembly of `binary`."""
    return [text for _, text in disassembly(binary, symbol)]


def check_eight_prefetches(binary, symbol):
    """Eight prefetcht0 of one register in a row, then the loop's branch
    back: the loop the columns are about."""
    insns = hot_loop(binary, symbol)
    text = "\n".join(insns)
    m = re.search(r"((?:prefetcht0 \(%\w+\)\n){8})", text + "\n")
    if not m:
        return f"{symbol}: no run of eight prefetcht0 in\n{text}"
    regs = set(re.findall(r"\((%\w+)\)", m.group(1)))
    if len(regs) != 1:
        return f"{symbol}: the eight prefetches use {sorted(regs)}"
    return None


def run_probe(exe, cpu, reps):
    out = subprocess.run(["taskset", "-c", str(cpu), exe, str(reps)], check=True,
                         capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "probe":
            got[(parts[1], parts[2])] = tuple(float(x) for x in parts[3:6])
    return got


def run_memfx(cpu, db):
    doc = memfx_document(["prefetch", "--quick", "--json", "-q",
           "--set", "parts=cost", "--set", "targets=" + ",".join(TARGETS),
           "--set", "kinds=t0", "--set", "modes=throughput", "--set", f"cpu={cpu}",
           "--db", db])
    if doc is None:
        return {}
    answer = next(a for a in doc["answers"] if a["question"] == "prefetch.null_cost")
    got = {}
    for d in answer.get("details") or []:
        if d["mode"] == "throughput":
            got.setdefault(d["target"], {})[d["kind"]] = d["value"]
    return {t: (v.get("t0"), v.get("none")) for t, v in got.items()}


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(x, unit=""):
    return "-" if x is None else f"{x:.3f}{unit}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="probe/memfx alternations")
    ap.add_argument("--reps", type=int, default=9, help="interleaved repetitions per probe run")
    ap.add_argument("--cpu", type=int, default=os.cpu_count() - 1, help="CPU to pin both to")
    args = ap.parse_args(argv)
    for tool in ("gcc", "objdump", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"needs {tool}")
    workdir = tempfile.mkdtemp(prefix="pf-probe-")
    try:
        exe = build("prefetch_targets", workdir)
        from memfx.lab import _core
        problems = [check_eight_prefetches(exe, "loop_reg"),
                    check_eight_prefetches(_core.__file__, "pf_rep_t0")]
        problems = [p for p in problems if p]
        if problems:
            sys.exit("hot loop check failed:\n" + "\n".join(problems))
        print("hot loops: probe loop_reg and memfx pf_rep_t0 are 8 x prefetcht0 (%reg) per trip")
        probe, memfx = [], []
        for r in range(args.rounds):
            probe.append(run_probe(exe, args.cpu, args.reps))
            memfx.append(run_memfx(args.cpu, os.path.join(workdir, f"r{r}.db")))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def probe_ns(shape, target, which):
        return med([p.get((shape, target), (None, None, None))[which] for p in probe])

    def memfx_ns(target, which):
        return med([m.get(target, (None, None))[which] for m in memfx])

    m_l1 = memfx_ns("l1", 0)
    print(f"ns per prefetcht0, median of {args.rounds} round(s), CPU {args.cpu}; "
          f"probe: {args.reps} interleaved repetitions per round")
    head = (f"{'target':<13} {'memfx':>7} {'/l1':>7}   {'probe':>7} {'/l1':>7}   "
            f"{'memfx/probe':>11}   {'probe table':>11} {'/l1':>7}")
    print(head)
    print("-" * len(head))
    for t in TARGETS:
        m, p = memfx_ns(t, 0), probe_ns("reg", t, 0)
        print(f"{t:<13} {fmt(m):>7} {fmt(m / m_l1 if m and m_l1 else None, 'x'):>7}   "
              f"{fmt(p):>7} {fmt(probe_ns('reg', t, 2), 'x'):>7}   "
              f"{fmt(m / p if m and p else None, 'x'):>11}   "
              f"{fmt(probe_ns('table', t, 0)):>11} {fmt(probe_ns('table', t, 2), 'x'):>7}")
    print(f"{'(no prefetch)':<13} {fmt(memfx_ns('l1', 1)):>7} {'':>7}   "
          f"{fmt(probe_ns('reg', 'l1', 1)):>7} {'':>7}   {'':>11}   "
          f"{fmt(probe_ns('table', 'l1', 1)):>11}")
    print("memfx: pf_rep_t0, one address in a register, 8 prefetches per trip; probe: the same "
          "loop (loop_reg), its /l1\nthe median of per-round ratios.  probe table: one table "
          "load and add per prefetch (memfx's pf_tput loop,\nwhich it keeps for the dram "
          "target): there a page walk overlaps the loop's other work.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
