"""What the probe drivers share: building a probe, reading a function's
instructions and loops back from objdump (to check that the timed loop is
the loop the probe is about before anything is timed), and running memfx's
side of a comparison."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def build(name, workdir):
    """Compile benchmarks/probes/<name>.c with gcc -O2 for the baseline ISA
    (a probe picks wide instructions at run time) into workdir."""
    exe = os.path.join(workdir, name)
    subprocess.run(["gcc", "-O2", "-Wall", "-o", exe, os.path.join(HERE, f"{name}.c")],
                   check=True)
    return exe


def disassembly(binary, symbol):
    """[(address, instruction)] of `symbol` in objdump's disassembly."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], check=True,
                         capture_output=True, text=True).stdout
    m = re.search(rf"<{re.escape(symbol)}>:\n(.*?)(?:\n\n|\Z)", out, re.S)
    if not m:
        return []
    insns = []
    for line in m.group(1).splitlines():
        addr, _, text = line.partition(":")
        insns.append((int(addr.strip(), 16), text.strip()))
    return insns


def loops(insns):
    """The bodies of the loops in `insns`: for every jump back to an earlier
    address, the instructions from there to the jump (inclusive)."""
    out = []
    for i, (addr, text) in enumerate(insns):
        m = re.match(r"j\w+\s+([0-9a-f]+)", text)
        if m and int(m.group(1), 16) <= addr:
            start = int(m.group(1), 16)
            out.append([t for a, t in insns[: i + 1] if a >= start])
    return out


def memfx_document(args):
    """The --json document of `python -m memfx run ARGS`, or None when the
    run fails (its last stderr line is printed; the probe's columns still
    print and memfx's read "-")."""
    done = subprocess.run([sys.executable, "-m", "memfx", "run", *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"memfx run failed (exit {done.returncode}): {tail}", file=sys.stderr)
        return None
    return json.loads(done.stdout)
