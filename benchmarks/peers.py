#!/usr/bin/env python3
"""memfx side by side with the established memory benchmarks (issue 16).

Runs memfx and whichever peer benchmarks are installed (or pointed at with
--peer NAME=PATH) on one CPU, interleaved -- for each measure in turn, memfx,
peer A, peer B, ...; then again, --reps times -- and prints one row per
measure:

    measure | memfx median [min-max] | each peer median [min-max] |
        memfx/peers' median | paired | memfx/best peer | paired ratio

Every measure uses the same access pattern on both sides: a random pointer
chase over 64-byte elements (one cache line each) for latency, a sequential
fill of one region with a non-zero byte for memset / non-temporal fill, one
copy call over the whole buffer for copy.  Each repetition contributes one
figure per tool (the tool's own summary of its samples); median and range are
taken over the repetitions.  Bandwidths are GB/s (1e9 bytes/s) of bytes
written (fills) or bytes copied (copies: STREAM and likwid-bench count read +
write bytes, so their figures are halved here).  The bandwidth group (issue
11) puts memfx's `bandwidth` experiment, single thread, widest vector kernel,
beside likwid-bench load/store/copy/store_mem (_avx512 where the CPU has it),
clamchowder's MemoryBandwidth read, STREAM Copy and tinymembench's NT fill:
sequential read at mid-L1, mid-L2, 64 MiB (and 1 GiB), write at mid-L1 and
64 MiB, copy and NT write at 64 MiB.

This is a benchmark, not a test: nothing in CI runs it and no test depends on
it.  The peers' sources never enter this repository; README.md ("Comparing
with other tools") says where to get each one and how to build it.  A peer
that is missing is listed as "not found"; a peer that fails or prints
something unexpected is reported, and the run goes on.

    python benchmarks/peers.py                       # every peer found, 3 reps
    python benchmarks/peers.py --quick --reps 3      # no 1 GiB points
    python benchmarks/peers.py --peer multichase=~/src/multichase/multichase \
        --only latency --json results.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# ----------------------------------------------------------------------------
# Measures


@dataclass(frozen=True)
class Measure:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    group: str  # for --only: latency, fill, copy, zero, bandwidth


def size_label(nbytes: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def cache_size(cpu: int, level: int, kinds=("Data", "Unified")) -> int | None:
    """Size in bytes of this CPU's cache at `level`, from sysfs."""
    base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cache")
    for index in sorted(base.glob("index*")):
        try:
            if int((index / "level").read_text()) != level:
                continue
            if (index / "type").read_text().strip() not in kinds:
                continue
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        match = re.fullmatch(r"(\d+)([KMG]?)", text)
        if match:
            return int(match.group(1)) * {"": 1, "K": KiB, "M": MiB, "G": GiB}[match.group(2)]
    return None


@dataclass
class Plan:
    """The sizes every tool is asked about, derived once from the machine."""
    latency_sizes: dict[str, int]          # name -> bytes
    fill_sizes: list[int]
    copy_size: int
    zero_size: int
    read_sizes: dict[str, int] = field(default_factory=dict)   # name -> bytes (bandwidth group)
    # the bandwidth group's cache-resident writes (issue 45: the store port limit)
    write_sizes: dict[str, int] = field(default_factory=dict)
    measures: list[Measure] = field(default_factory=list)

    def measure(self, key: str) -> Measure:
        return next(m for m in self.measures if m.key == key)


def make_plan(cpu: int, quick: bool, only: set[str] | None, match: list[str] | None = None) -> Plan:
    # Mid-cache points: half of the level's capacity sits well inside it on
    # every replacement policy; fall back to typical sizes when sysfs is silent.
    l1 = cache_size(cpu, 1) or 32 * KiB
    l2 = cache_size(cpu, 2) or 1 * MiB
    latency_sizes = {"mid-L1": l1 // 2, "mid-L2": l2 // 2, "256 MiB": 256 * MiB}
    fill_sizes = [64 * MiB]
    if not quick:
        latency_sizes["1 GiB"] = 1 * GiB
        fill_sizes.append(1 * GiB)
    # Single-thread read bandwidth at the scale points of issue 11 (mid-L1,
    # mid-L2, 64 MiB, 1 GiB); writes, copies and NT writes at 64 MiB.
    read_sizes = {"mid-L1": l1 // 2, "mid-L2": l2 // 2, "64 MiB": 64 * MiB}
    if not quick:
        read_sizes["1 GiB"] = 1 * GiB
    plan = Plan(latency_sizes, fill_sizes, copy_size=64 * MiB, zero_size=256 * MiB,
                read_sizes=read_sizes, write_sizes={"mid-L1": l1 // 2})
    measures = []
    for name, size in latency_sizes.items():
        for pages, pages_label in (("4k", "4 KiB pages"), ("thp", "THP")):
            label = f"random chase {name}" + (f" ({size_label(size)})" if name.startswith("mid") else "")
            measures.append(Measure(f"lat_{size}_{pages}", f"{label}, {pages_label}", "ns", False, "latency"))
    for size in fill_sizes:
        measures.append(Measure(f"memset_{size}", f"memset fill {size_label(size)}", "GB/s", True, "fill"))
        measures.append(Measure(f"ntfill_{size}", f"NT fill {size_label(size)}", "GB/s", True, "fill"))
    measures.append(Measure(f"copy_libc_{plan.copy_size}", f"copy libc memcpy {size_label(plan.copy_size)}",
                            "GB/s", True, "copy"))
    measures.append(Measure(f"copy_nt_{plan.copy_size}", f"copy NT {size_label(plan.copy_size)}",
                            "GB/s", True, "copy"))
    measures.append(Measure("zero_ratio", f"zero/non-zero AVX2 fill speed {size_label(plan.zero_size)}",
                            "x", True, "zero"))
    # The non-zero fill's own speed, beside the ratio: a loop that does not
    # reach the memory's store bandwidth shows no zero effect at all (here
    # zero-fill-bench on 4 KiB pages once filled at 18.5 GB/s with a ratio of
    # 1.0, against 22-27 GB/s and 1.08-1.23 with THP).
    measures.append(Measure("zero_fill_one", f"non-zero AVX2 fill {size_label(plan.zero_size)}",
                            "GB/s", True, "zero"))
    for name, size in read_sizes.items():
        label = f"read {name}" + (f" ({size_label(size)})" if name.startswith("mid") else "")
        measures.append(Measure(f"bwread_{size}", label, "GB/s", True, "bandwidth"))
    for name, size in plan.write_sizes.items():
        measures.append(Measure(f"bwwrite_{size}", f"write (store) {name} ({size_label(size)})",
                                "GB/s", True, "bandwidth"))
    size = plan.copy_size
    measures.append(Measure(f"bwwrite_{size}", f"write (store) {size_label(size)}", "GB/s", True,
                            "bandwidth"))
    measures.append(Measure(f"bwcopy_{size}", f"copy (vector loop) {size_label(size)}", "GB/s", True,
                            "bandwidth"))
    measures.append(Measure(f"bwntwrite_{size}", f"NT write {size_label(size)}", "GB/s", True,
                            "bandwidth"))
    plan.measures = [m for m in measures if (only is None or m.group in only)
                     and (match is None or any(text in m.label.lower() for text in match))]
    return plan


# ----------------------------------------------------------------------------
# Jobs: one command that yields figures for one or more measures


class PeerError(Exception):
    """A tool ran but gave nothing usable; the message says why."""


@dataclass
class Job:
    argv: list[str]
    parse: Callable[[str, str, dict], dict[str, float]]
    env: dict[str, str] | None = None
    timeout_s: float = 600.0
    # A line that ends the useful part of the output: the tool is stopped
    # there (tinymembench goes on to a latency sweep that is not compared).
    stop_after: str | None = None
    # The page size the figure is for.  "4k": the tool runs with transparent
    # huge pages disabled for its process (prctl PR_SET_THP_DISABLE, inherited
    # across fork and exec), as memfx holds its 4 KiB arms to 4 KiB pages --
    # with THP "always", a tool that just mallocs gets huge pages whenever the
    # kernel has some free, and its "4 KiB" figure is a mix.  "thp": the tool
    # asks for them itself (madvise).  None: the tool chooses per arm (memfx).
    # Either way the share of huge pages the tool really got is read from
    # /proc/PID/smaps_rollup while it runs, and a figure on the wrong pages is
    # not counted.
    pages: str | None = "4k"
    buffer_bytes: int = 0       # the tool's working set, where the job knows it
    # The measures the job yields figures for: a repetition runs the jobs in
    # the order of their first measure, every tool's job for a measure back
    # to back, so the figures a paired ratio divides are seconds apart.
    keys: tuple[str, ...] = ()


@dataclass
class RunContext:
    cpu: int
    quick: bool
    db_path: str


@dataclass
class Tool:
    name: str
    binaries: tuple[str, ...]          # names looked up on PATH / under --peers-dir
    how_to_get: str
    jobs: Callable[["Tool", str, Plan, RunContext], list[Job]]
    note: str = ""
    # False: the tool's access pattern differs from memfx's (shown, but left
    # out of the "peers' median" that memfx must agree with).
    same_pattern: bool = True
    # True: the tool sleeps between its own timed loops (likwid-bench idles
    # about a second per run), so its share of the CPU over the whole run
    # says nothing about whether other work shared the CPU while it timed.
    idles_by_design: bool = False


def stop_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


PR_SET_THP_DISABLE = 41          # <linux/prctl.h>, since Linux 3.15


def child_setup(cpu: int, no_thp: bool) -> Callable[[], None]:
    """preexec_fn of a job: pin the tool to the measuring CPU, and for a "4k"
    job turn transparent huge pages off in it."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        os.sched_setaffinity(0, {cpu})
        if no_thp and libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_THP_DISABLE)")
    return setup


# The resident set is read this long after the start, then at this interval:
# reading smaps_rollup walks the tool's page tables (about 1 ms per GiB of
# 4 KiB pages) on the CPU the tool runs on, so it is read seldom.
SHARE_FIRST_READ_S = 0.3
SHARE_READ_INTERVAL_S = 1.5
SHARE_MIN_RESIDENT = 8 * MiB     # below this the tool has not allocated its buffer yet
THP_JOB_MIN_SHARE = 0.5          # a "thp" figure needs this much of the memory on huge pages
FOURK_JOB_MAX_SHARE = 0.02       # a "4k" figure tolerates this much on huge pages
# A THP figure is only checked when the tool's buffer is this large: smaller
# ones are mostly the program itself, and a buffer under 2 MiB cannot be one
# huge page anyway (memfx's own THP arm is not huge-backed there either).
THP_CHECK_MIN_BUFFER = 32 * MiB


def huge_page_share(pid: int) -> float | None:
    """AnonHugePages / Rss of a running process, or None when it is small or gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "AnonHugePages") and rest.split():
            fields[name] = int(rest.split()[0]) * KiB
    rss = fields.get("Rss", 0)
    if rss < SHARE_MIN_RESIDENT:
        return None
    return fields.get("AnonHugePages", 0) / rss


def wrong_pages(job: Job, share: float | None) -> str | None:
    """Why a job's figures are not on the page size its measure is for, or None."""
    if (job.pages == "thp" and share is not None and share < THP_JOB_MIN_SHARE
            and job.buffer_bytes >= THP_CHECK_MIN_BUFFER):
        return f"asked for huge pages but got {100 * share:.0f}% of its memory on them"
    if job.pages == "4k" and share is not None and share > FOURK_JOB_MAX_SHARE:
        return f"should run on 4 KiB pages but had {100 * share:.0f}% on huge pages"
    return None


# How often the supervisor looks at a running tool.  It runs on another CPU
# than the tool where there is one (see pin_to); on the measuring CPU each
# look would preempt the tool (memfx rejects such samples: at 20 ms, most of
# its 3 ms samples at 64 MiB were).
POLL_INTERVAL_S = 0.05


def run_job(job: Job, cpu: int) -> tuple[dict[str, float], dict]:
    """Run one command pinned to `cpu` and parse its output."""
    env = dict(os.environ)
    if job.env:
        env.update(job.env)
    try:
        # Own process group: lmbench forks workers, and a stop must reach them.
        proc = subprocess.Popen(job.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, start_new_session=True,
                                preexec_fn=child_setup(cpu, job.pages == "4k"))
    except OSError as exc:
        raise PeerError(f"cannot start {job.argv[0]}: {exc}") from exc
    # Reap the child with wait4 to get its own peak resident size (tinymembench's
    # buffer size is read from it); threads drain the pipes meanwhile.
    chunks: dict[str, list[str]] = {"out": [], "err": []}
    seen_stop = threading.Event()

    def drain(stream, key):
        for line in stream:
            chunks[key].append(line)
            if key == "out" and job.stop_after and re.search(job.stop_after, line):
                seen_stop.set()
    readers = [threading.Thread(target=drain, args=(stream, key), daemon=True)
               for key, stream in (("out", proc.stdout), ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    started = time.monotonic()
    deadline = started + job.timeout_s
    next_share_read = started + SHARE_FIRST_READ_S
    share = None                # the largest huge-page share seen (None: never big enough)
    stopped = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() >= next_share_read:
            seen = huge_page_share(proc.pid)
            if seen is not None:
                share = seen if share is None else max(share, seen)
            next_share_read = time.monotonic() + SHARE_READ_INTERVAL_S
        if seen_stop.is_set() and not stopped:
            stop_group(proc.pid, signal.SIGTERM)
            stopped = True
        if time.monotonic() > deadline:
            stop_group(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
            raise PeerError(f"timed out after {job.timeout_s:.0f} s")
        time.sleep(POLL_INTERVAL_S)
    proc.returncode = 0 if stopped else os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join()
    stdout, stderr = "".join(chunks["out"]), "".join(chunks["err"])
    wall = max(time.monotonic() - started, 1e-9)
    # The share of the CPU the tool got: a wall-clock benchmark that shared its
    # CPU with other work reports inflated times (memfx drops such samples).
    info = {"maxrss_kib": usage.ru_maxrss, "cpu_share": (usage.ru_utime + usage.ru_stime) / wall,
            "huge_page_share": share}
    if proc.returncode != 0:
        tail = (stderr.strip() or stdout.strip()).splitlines()[-1:] or ["(no output)"]
        raise PeerError(f"exit status {proc.returncode}: {tail[0][:160]}")
    why = wrong_pages(job, share)
    if why:
        raise PeerError(why)
    return job.parse(stdout, stderr, info), info


def last_float(pattern: str, text: str, what: str) -> float:
    found = re.findall(pattern, text, re.MULTILINE)
    if not found:
        raise PeerError(f"no {what} in the output")
    value = found[-1]
    return float(value if isinstance(value, str) else value[-1])


# ---------------------------------------------------------------- memfx


def memfx_env() -> dict[str, str]:
    """What the memfx jobs add to the environment: nothing.  They run the
    memfx installed for --python (`pip install .`); the repository's src/
    holds no built extension, and put first on PYTHONPATH it would shadow
    the installed memfx with a memfx.lab._core that has no kernels."""
    return {}


def memfx_problem(python: str) -> str | None:
    """Why `python` cannot run memfx's kernels (None when it can)."""
    probe = "import memfx.lab._core as c; c.kernels; print(c.__file__)"
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                             env={**os.environ, **memfx_env()}, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {python}: {exc}"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return (f"{python} cannot import memfx with its C core ({last}); "
                "install it first: pip install .")
    return None


_memfx_params_cache: dict[str, set[str]] = {}


def memfx_params(python: str, experiment: str) -> set[str]:
    """Parameter names an experiment accepts (from `memfx list --json`)."""
    if not _memfx_params_cache:
        try:
            out = subprocess.run([python, "-m", "memfx", "list", "--json"], capture_output=True,
                                 text=True, env={**os.environ, **memfx_env()}, timeout=120)
            for exp in json.loads(out.stdout):
                # each parameter is a dict with its name (older memfx: "name [kind...]")
                names = {p["name"] if isinstance(p, dict) else p.split(" ", 1)[0]
                         for p in exp.get("params", [])}
                _memfx_params_cache[exp["name"]] = names
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
    return _memfx_params_cache.get(experiment, set())


def memfx_document(stdout: str) -> dict:
    try:
        doc = json.loads(stdout)
    except ValueError as exc:
        raise PeerError(f"memfx printed no JSON document ({exc})") from None
    if doc.get("status") not in ("complete", None):
        raise PeerError(f"memfx run status {doc.get('status')}: {doc.get('error')}")
    return doc


def memfx_point(doc: dict, arm: str, size: int, **params) -> dict:
    """The point of `arm` at exactly `size` (nearest size if a run moved it)."""
    candidates = [p for p in doc.get("points", []) if p.get("arm") == arm
                  and all(p.get("params", {}).get(k) == v for k, v in params.items())]
    if not candidates:
        raise PeerError(f"memfx document has no {arm} point {params}")
    best = min(candidates, key=lambda p: abs(math.log(p["params"]["size_bytes"] / size)))
    if abs(best["params"]["size_bytes"] / size - 1) > 0.05:
        raise PeerError(f"memfx measured no {arm} point near {size_label(size)}")
    if best.get("median") is None:
        raise PeerError(f"memfx {arm} at {size_label(size)}: no accepted sample "
                        f"({best.get('rejected', '?')} rejected)")
    return best


def memfx_jobs(tool: Tool, python: str, plan: Plan, ctx: RunContext) -> list[Job]:
    base = [python, "-m", "memfx", "run"]
    common = ["--json", "-q", "--quick", "--db", ctx.db_path, "--set", f"cpu={ctx.cpu}"]
    env = memfx_env()
    keys = {m.key for m in plan.measures}
    jobs = []
    latency_params = memfx_params(python, "latency")
    arms = ["--set", "arms=random"] if "arms" in latency_params else []
    # One page size per run, as every peer runs: the job then sits next to
    # the peers' jobs for the same measure, seconds apart (see run_order).
    for size in plan.latency_sizes.values():
        for pages in ("4k", "thp"):
            key = f"lat_{size}_{pages}"
            if key not in keys:
                continue
            def parse_latency(out, err, info, size=size, pages=pages, key=key):
                return {key: memfx_point(memfx_document(out), "random", size, pages=pages)["median"]}
            jobs.append(Job(base + ["latency"] + common + arms + [
                "--set", f"min_size={size}", "--set", f"max_size={size}", "--set", f"pages={pages}",
                "--set", "refine=false"], parse_latency, env, keys=(key,)))
    for size in plan.fill_sizes:
        if f"memset_{size}" not in keys:
            continue
        def parse_fill(out, err, info, size=size):
            doc = memfx_document(out)
            return {f"memset_{size}": memfx_point(doc, "one", size, kernel="memset")["median"],
                    f"ntfill_{size}": memfx_point(doc, "one", size, kernel="nt_sse")["median"]}
        jobs.append(Job(base + ["fill"] + common + [
            "--set", "kernels=memset,nt_sse", "--set", "values=one", "--set", f"min_size={size}",
            "--set", f"max_size={size}", "--set", "points=2"], parse_fill, env,
            keys=(f"memset_{size}", f"ntfill_{size}")))
    size = plan.copy_size
    if f"copy_libc_{size}" in keys:
        def parse_copy(out, err, info, size=size):
            doc = memfx_document(out)
            figures = {}
            for arm, key in (("libc", f"copy_libc_{size}"), ("nt", f"copy_nt_{size}")):
                point = memfx_point(doc, arm, size, op="copy", mode="throughput")
                figures[key] = point["params"]["size_bytes"] / point["median"]  # bytes/ns = GB/s
            return figures
        # The copy sweep always starts at 1 byte; keep its small part coarse.
        jobs.append(Job(base + ["copy"] + common + [
            "--set", "ops=copy", "--set", "modes=throughput", "--set", "strategies=libc,nt",
            "--set", f"max_size={size}", "--set", "small_max=16", "--set", "per_octave=1",
            "--set", "refine=false"], parse_copy, env, keys=(f"copy_libc_{size}", f"copy_nt_{size}")))
    if "zero_ratio" in keys:
        size = plan.zero_size
        def parse_zero(out, err, info, size=size):
            doc = memfx_document(out)
            zero = memfx_point(doc, "zero", size, kernel="avx2")["median"]
            one = memfx_point(doc, "one", size, kernel="avx2")["median"]
            return {"zero_ratio": zero / one, "zero_fill_one": one}
        jobs.append(Job(base + ["fill"] + common + [
            "--set", "kernels=avx2", "--set", "values=zero,one", "--set", f"min_size={size}",
            "--set", f"max_size={size}", "--set", "points=2"], parse_zero, env,
            keys=("zero_ratio", "zero_fill_one")))
    jobs += memfx_bandwidth_jobs(base, common, env, plan, keys)
    for job in jobs:
        job.pages = None    # memfx madvises each buffer for its arm's page size and reports the share
    return jobs


def memfx_bandwidth_jobs(base, common, env, plan, keys):
    # The bandwidth experiment, single thread, the widest vector kernel
    # (widths=auto), one working set per run.  Its copy of working set W
    # copies W/2 bytes and counts read + write bytes; here a copy is bytes
    # copied per second, so the working set is twice the copy and the
    # figure is halved.
    single = ["--set", "scaling=none", "--set", "latency_levels=none", "--set", "widths=auto"]
    jobs = []
    for size in plan.read_sizes.values():
        if f"bwread_{size}" not in keys:
            continue
        def parse_read(out, err, info, size=size):
            return {f"bwread_{size}": memfx_point(memfx_document(out), "read", size)["median"]}
        jobs.append(Job(base + ["bandwidth"] + common + single + [
            "--set", "kinds=read", "--set", f"min_size={size}", "--set", f"max_size={size}"],
            parse_read, env, keys=(f"bwread_{size}",)))
    for size in plan.write_sizes.values():
        if f"bwwrite_{size}" not in keys:
            continue
        def parse_l1_write(out, err, info, size=size):
            return {f"bwwrite_{size}": memfx_point(memfx_document(out), "write", size)["median"]}
        jobs.append(Job(base + ["bandwidth"] + common + single + [
            "--set", "kinds=write", "--set", f"min_size={size}", "--set", f"max_size={size}"],
            parse_l1_write, env, keys=(f"bwwrite_{size}",)))
    size = plan.copy_size
    if f"bwwrite_{size}" in keys:
        def parse_write(out, err, info, size=size):
            doc = memfx_document(out)
            return {f"bwwrite_{size}": memfx_point(doc, "write", size)["median"],
                    f"bwntwrite_{size}": memfx_point(doc, "nt_write", size)["median"]}
        jobs.append(Job(base + ["bandwidth"] + common + single + [
            "--set", "kinds=write,nt_write", "--set", f"min_size={size}", "--set", f"max_size={size}"],
            parse_write, env, keys=(f"bwwrite_{size}", f"bwntwrite_{size}")))
    if f"bwcopy_{size}" in keys:
        def parse_copy(out, err, info, size=size):
            return {f"bwcopy_{size}": memfx_point(memfx_document(out), "copy", 2 * size)["median"] / 2}
        jobs.append(Job(base + ["bandwidth"] + common + single + [
            "--set", "kinds=copy", "--set", f"min_size={2 * size}", "--set", f"max_size={2 * size}"],
            parse_copy, env, keys=(f"bwcopy_{size}",)))
    return jobs


def cpu_has(flag: str) -> bool:
    """The flag is in /proc/cpuinfo (e.g. avx512f), as the peers' own dispatch sees it."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and f" {flag}" in f" {line.split(':', 1)[-1]} "
                       for line in f)
    except OSError:
        return False


# ---------------------------------------------------------------- latency peers


def multichase_jobs(tool, path, plan, ctx):
    # -s 64: one element per cache line; -T = the whole set: the visiting order
    # is one random cycle over all lines (the default -T 256K keeps it inside
    # 256 KiB blocks, which is not memfx's pattern).  -a: the average of -n
    # half-second samples, a typical figure like every other column (memfx's
    # median; multichase's default, the best sample, reads 5-15 % lower on a
    # host whose other tenants share the DRAM, as this one does).
    samples = "2" if ctx.quick else "3"
    jobs = []
    keys = {m.key for m in plan.measures}
    for size in plan.latency_sizes.values():
        for pages in ("4k", "thp"):
            key = f"lat_{size}_{pages}"
            if key not in keys:
                continue
            # -H madvises an arena mapped at exactly the size asked for: one
            # under 2 MiB holds no aligned 2 MiB span, so it is never on a
            # huge page and its "THP" figure would be a 4 KiB-page one.
            if pages == "thp" and size < 2 * MiB:
                continue
            argv = [path, "-a", "-m", str(size), "-s", "64", "-T", str(size), "-n", samples]
            if pages == "thp":
                argv.append("-H")
            jobs.append(Job(argv, lambda out, err, info, key=key:
                            {key: last_float(r"^\s*([0-9.]+)\s*$", out, "latency figure")},
                            pages=pages, buffer_bytes=size, keys=(key,)))
    return jobs


def memory_latency_jobs(tool, path, plan, ctx):
    # clamchowder's MemoryLatency, asm chase (mov r, [r]), one size per run;
    # -hugepages falls back to an madvise(MADV_HUGEPAGE) buffer, i.e. THP.
    jobs = []
    keys = {m.key for m in plan.measures}
    for size in plan.latency_sizes.values():
        for pages in ("4k", "thp"):
            key = f"lat_{size}_{pages}"
            if key not in keys:
                continue
            argv = [path, "-test", "asm", "-sizekb", str(size // KiB)]
            if ctx.quick:
                argv += ["-iter", "30000000"]
            if pages == "thp":
                argv.append("-hugepages")
            jobs.append(Job(argv, lambda out, err, info, key=key:
                            {key: last_float(r"^\d+,([0-9.]+)\s*$", out, "KB,ns line")},
                            pages=pages, buffer_bytes=size, keys=(key,)))
    return jobs


def lat_mem_rd_jobs(tool, path, plan, ctx):
    # lmbench's lat_mem_rd sweeps every size up to its length argument
    # (16 per octave), so only the cache-resident points are affordable;
    # -t visits lines in random order within pages taken in random order.
    wanted = {size for name, size in plan.latency_sizes.items() if name.startswith("mid")}
    keys = {f"lat_{size}_4k" for size in wanted} & {m.key for m in plan.measures}
    if not keys:
        return []
    length_mb = max(1, math.ceil(max(wanted) / MiB))

    def parse(out, err, info):
        figures = {}
        for line in (out + "\n" + err).splitlines():
            match = re.match(r"^\s*([0-9.]+)\s+([0-9.]+)\s*$", line)
            if not match:
                continue
            size = float(match.group(1)) * MiB
            for target in wanted:
                if abs(size / target - 1) < 0.01:
                    figures[f"lat_{target}_4k"] = float(match.group(2))
        missing = [k for k in keys if k not in figures]
        if missing:
            raise PeerError(f"no line for {', '.join(missing)}")
        return {k: figures[k] for k in keys}
    return [Job([path, "-t", "-N", "1" if ctx.quick else "3", str(length_mb), "64"], parse,
                keys=tuple(sorted(keys)))]


# ---------------------------------------------------------------- bandwidth peers


def likwid_jobs(tool, path, plan, ctx):
    # likwid-bench counts every stream's bytes: a copy of N bytes is 2N of
    # data volume over a 2N working set, so copies get twice the size and half
    # the figure.  MByte/s is 1e6 bytes/s.
    keys = {m.key for m in plan.measures}
    jobs = []

    def job(test, working_set, key, divisor):
        def parse(out, err, info):
            return {key: last_float(r"^MByte/s:\s*([0-9.]+)", out, "MByte/s line") / 1000 / divisor}
        return Job([path, "-t", test, "-w", f"N:{working_set}B:1"], parse, keys=(key,))
    for size in plan.fill_sizes:
        if f"memset_{size}" in keys:
            jobs.append(job("store_avx", size, f"memset_{size}", 1))
            jobs.append(job("store_mem_avx", size, f"ntfill_{size}", 1))
    size = plan.copy_size
    if f"copy_libc_{size}" in keys:
        jobs.append(job("copy_avx", 2 * size, f"copy_libc_{size}", 2))
        jobs.append(job("copy_mem_avx", 2 * size, f"copy_nt_{size}", 2))
    # bandwidth group: the widest vector tests this CPU runs (AVX-512 where
    # the flag is there, else AVX)
    wide = "avx512" if cpu_has("avx512f") else "avx"
    for read_size in plan.read_sizes.values():
        if f"bwread_{read_size}" in keys:
            jobs.append(job(f"load_{wide}", read_size, f"bwread_{read_size}", 1))
    for write_size in [*plan.write_sizes.values(), size]:
        if f"bwwrite_{write_size}" in keys:
            jobs.append(job(f"store_{wide}", write_size, f"bwwrite_{write_size}", 1))
    if f"bwcopy_{size}" in keys:
        jobs.append(job(f"copy_{wide}", 2 * size, f"bwcopy_{size}", 2))
    if f"bwntwrite_{size}" in keys:
        jobs.append(job(f"store_mem_{wide}", size, f"bwntwrite_{size}", 1))
    return jobs


def memory_bandwidth_jobs(tool, path, plan, ctx):
    # clamchowder's MemoryBandwidth: one size, one thread; prints "KB,GB/s"
    # followed by per-thread columns.
    keys = {m.key for m in plan.measures}
    jobs = []
    for size in plan.fill_sizes:
        for method, key in (("repstosb", f"memset_{size}"), ("sse_ntwrite", f"ntfill_{size}")):
            if key in keys:
                jobs.append(Job([path, "-threads", "1", "-sizekb", str(size // KiB), "-method", method],
                                lambda out, err, info, key=key:
                                {key: last_float(r"^\d+,([0-9.]+)(?:,[0-9.]+)*\s*$", out, "KB,GB/s line")},
                                keys=(key,)))
    # bandwidth group: its asm read loop, AVX-512 where the CPU has it
    method = "avx512" if cpu_has("avx512f") else "avx"
    for size in plan.read_sizes.values():
        key = f"bwread_{size}"
        if key in keys and size >= KiB:
            jobs.append(Job([path, "-threads", "1", "-sizekb", str(size // KiB), "-method", method],
                            lambda out, err, info, key=key:
                            {key: last_float(r"^\d+,([0-9.]+)(?:,[0-9.]+)*\s*$", out, "KB,GB/s line")},
                            keys=(key,)))
    return jobs


TINYMEMBENCH_ROWS = {  # tinymembench line name -> measure kind
    "standard memset": "memset",
    "SSE2 nontemporal fill": "ntfill",
    "standard memcpy": "copy_libc",
    "SSE2 nontemporal copy": "copy_nt",
}


def tinymembench_jobs(tool, path, plan, ctx):
    # tinymembench has no options: its buffer is the compile-time SIZE in
    # main.c (32 MiB upstream).  The buffer size is read back from the peak
    # resident size (two buffers of SIZE), and its figures only count for the
    # measures at that size.
    keys = {m.key for m in plan.measures}

    def parse(out, err, info):
        sizes = {"memset": plan.fill_sizes, "ntfill": plan.fill_sizes,
                 "copy_libc": [plan.copy_size], "copy_nt": [plan.copy_size]}
        also = {"ntfill": "bwntwrite"}    # the bandwidth group's NT write is its NT fill
        buffer = 2 ** round(math.log2(max(info["maxrss_kib"] * KiB / 2, 1)))
        figures = {}
        for line in out.splitlines():
            match = re.match(r"^\s*(.+?)\s*:\s*([0-9.]+)\s*MB/s", line)
            if match and match.group(1) in TINYMEMBENCH_ROWS:
                kind = TINYMEMBENCH_ROWS[match.group(1)]
                if buffer in sizes[kind]:
                    for name in (kind, also.get(kind)):
                        key = f"{name}_{buffer}"
                        if name and key in keys:
                            figures[key] = float(match.group(2)) / 1000
        if not figures:
            raise PeerError(f"built with a {size_label(buffer)} buffer; the measures need "
                            f"{size_label(plan.copy_size)} (rebuild with SIZE changed, see README)")
        return figures
    wanted = keys & {f"{k}_{plan.copy_size}" for k in list(TINYMEMBENCH_ROWS.values()) + ["bwntwrite"]}
    return [Job([path], parse, timeout_s=900, stop_after=r"SSE2 nontemporal fill\s*:",
                keys=tuple(sorted(wanted)))] if wanted else []


def stream_jobs(tool, path, plan, ctx):
    # STREAM Copy is c[j] = a[j] over STREAM_ARRAY_SIZE doubles (a compile-time
    # constant); its MB/s counts read + write bytes, halved here.  The rate is
    # taken from the average time, as the other tools report typical figures.
    size = plan.copy_size
    wanted = [k for k in (f"copy_libc_{size}", f"bwcopy_{size}") if k in {m.key for m in plan.measures}]
    if not wanted:
        return []

    def parse(out, err, info):
        elements = int(last_float(r"Array size = (\d+)", out, "array size"))
        element_bytes = int(last_float(r"uses (\d+) bytes per array element", out, "element size"))
        if elements * element_bytes != size:
            raise PeerError(f"arrays of {size_label(elements * element_bytes)}; the measure needs "
                            f"{size_label(size)} (build with -DSTREAM_ARRAY_SIZE={size // element_bytes})")
        match = re.search(r"^Copy:\s+([0-9.]+)\s+([0-9.]+)", out, re.MULTILINE)
        if not match:
            raise PeerError("no Copy line")
        return {key: size / float(match.group(2)) / 1e9 for key in wanted}
    return [Job([path], parse, env={"OMP_NUM_THREADS": "1"}, keys=tuple(wanted))]


def bw_mem_jobs(tool, path, plan, ctx):
    # lmbench bw_mem bcopy: libc bcopy of the whole buffer per call; prints
    # "<MB> <MB/s>" (1e6) on stderr.
    size = plan.copy_size
    key = f"copy_libc_{size}"
    if key not in {m.key for m in plan.measures}:
        return []
    return [Job([path, "-N", "5", str(size), "bcopy"],
                lambda out, err, info: {key: last_float(r"^\s*[0-9.]+\s+([0-9.]+)\s*$", out + "\n" + err,
                                                        "MB MB/s line") / 1000}, keys=(key,))]


def zero_fill_bench_jobs(tool, path, plan, ctx):
    # zero-fill-bench fill0 / fill1: std::fill of 32-bit zeros / ones
    # (vectorised to AVX2 by its own Makefile, which targets the host CPU); --size is in bytes.
    if "zero_ratio" not in {m.key for m in plan.measures}:
        return []

    def parse(out, err, info):
        rates: dict[str, list[float]] = {}
        for line in out.splitlines():
            cells = line.split(",")
            if len(cells) >= 5 and cells[1] in ("fill0", "fill1"):
                try:
                    rates.setdefault(cells[1], []).append(float(cells[4]))
                except ValueError:
                    continue
        if set(rates) != {"fill0", "fill1"}:
            raise PeerError("no fill0/fill1 rows in the CSV")
        return {"zero_ratio": statistics.median(rates["fill0"]) / statistics.median(rates["fill1"]),
                "zero_fill_one": statistics.median(rates["fill1"])}
    return [Job([path, "--algos=fill0,fill1", f"--size={plan.zero_size}", "--csv"], parse,
                keys=("zero_ratio", "zero_fill_one"))]


TOOLS = [
    Tool("memfx", (), "this repository", memfx_jobs),
    Tool("multichase", ("multichase",), "github.com/google/multichase: make", multichase_jobs),
    Tool("MemoryLatency", ("MemoryLatency_amd64", "MemoryLatency"),
         "github.com/clamchowder/Microbenchmarks: cd MemoryLatency && make amd64", memory_latency_jobs),
    Tool("lat_mem_rd", ("lat_mem_rd",), "lmbench (github.com/intel/lmbench): make build", lat_mem_rd_jobs,
         note="page-random order (-t), mid-L1/mid-L2 only; not the same pattern", same_pattern=False),
    Tool("likwid-bench", ("likwid-bench",), "Debian/Ubuntu package likwid, or github.com/RRZE-HPC/likwid",
         likwid_jobs, note="store_avx / store_mem_avx / copy_avx / copy_mem_avx; bandwidth: "
         "load / store / copy / store_mem, _avx512 where the CPU has it, else _avx",
         idles_by_design=True),
    Tool("tinymembench", ("tinymembench",),
         "github.com/ssvb/tinymembench: SIZE in main.c set to 64 MiB, then make", tinymembench_jobs),
    Tool("MemoryBandwidth", ("MemoryBandwidth_amd64", "MemoryBandwidth"),
         "github.com/clamchowder/Microbenchmarks: cd MemoryBandwidth && make amd64", memory_bandwidth_jobs,
         note="repstosb / sse_ntwrite; bandwidth read: avx512 or avx"),
    Tool("bw_mem", ("bw_mem",), "lmbench (github.com/intel/lmbench): make build", bw_mem_jobs),
    Tool("STREAM", ("stream_c.exe", "stream"),
         "github.com/jeffhammond/STREAM: make stream_c.exe CFLAGS='-O2 -fopenmp -DSTREAM_ARRAY_SIZE=8388608'",
         stream_jobs, note="Copy kernel (a compiled loop)"),
    Tool("zero-fill-bench", ("zero-fill-bench", "bench"),
         "github.com/travisdowns/zero-fill-bench: make", zero_fill_bench_jobs),
]

# Where the binaries sit inside each project's own build tree, for --peers-dir.
BUILD_TREE_PATHS = {
    "multichase": ["multichase/multichase"],
    "MemoryLatency": ["Microbenchmarks/MemoryLatency/MemoryLatency_amd64"],
    "lat_mem_rd": ["lmbench/bin/*/lat_mem_rd"],
    "likwid-bench": [],
    "tinymembench": ["tinymembench-64M/tinymembench", "tinymembench/tinymembench"],
    "MemoryBandwidth": ["Microbenchmarks/MemoryBandwidth/MemoryBandwidth_amd64"],
    "bw_mem": ["lmbench/bin/*/bw_mem"],
    "STREAM": ["STREAM/stream_c.exe"],
    "zero-fill-bench": ["zero-fill-bench/bench"],
}


def locate(tool: Tool, pointed: dict[str, str], peers_dir: Path | None) -> str | None:
    if tool.name in pointed:
        path = os.path.expanduser(pointed[tool.name])
        return path if os.access(path, os.X_OK) else None
    if peers_dir is not None:
        for pattern in BUILD_TREE_PATHS.get(tool.name, []):
            for hit in sorted(peers_dir.glob(pattern)):
                if os.access(hit, os.X_OK) and hit.is_file():
                    return str(hit)
    for binary in tool.binaries:
        if binary == "bench":  # too generic a name to trust on PATH
            continue
        found = shutil.which(binary)
        if found:
            return found
    return None


# ----------------------------------------------------------------------------
# Running and reporting


def pin_to(cpu: int | None) -> int:
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[-1] if cpu is None else cpu
    if chosen not in allowed:
        raise SystemExit(f"peers.py: CPU {chosen} is not in the allowed set {allowed}")
    # Every tool is pinned to `chosen` as it starts (child_setup); this
    # supervisor keeps off that CPU when there is another one.
    os.sched_setaffinity(0, set(allowed) - {chosen} or {chosen})
    return chosen


def summary(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt_value(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def fmt_cell(stats: dict | None) -> str:
    if stats is None:
        return "-"
    if stats["n"] == 1:
        return fmt_value(stats["median"])
    return f"{fmt_value(stats['median'])} [{fmt_value(stats['min'])}-{fmt_value(stats['max'])}]"


def paired_ratios(by_rep: dict[str, dict[int, float]], peer: str) -> list[float]:
    """memfx / peer within each repetition both measured.  A repetition's
    jobs run seconds apart, so a host whose other tenants load the memory for
    minutes at a time moves both figures of a pair alike: the ratios spread
    less than the figures do."""
    mine, theirs = by_rep.get("memfx", {}), by_rep.get(peer, {})
    return [mine[r] / theirs[r] for r in sorted(mine) if r in theirs]


def paired_median_ratios(by_rep: dict[str, dict[int, float]], peers: list[str]) -> list[float]:
    """memfx / the median of these peers' figures, within each repetition
    that has memfx and at least one of them."""
    mine = by_rep.get("memfx", {})
    out = []
    for r in sorted(mine):
        theirs = [by_rep[p][r] for p in peers if r in by_rep.get(p, {})]
        if theirs:
            out.append(mine[r] / statistics.median(theirs))
    return out


def fmt_ratios(ratios: list[float]) -> str:
    if len(ratios) < 2:
        return "-"
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"


def build_table(plan: Plan, results: dict, peer_names: list[str],
                by_rep: dict | None = None,
                other_pattern: set[str] = frozenset()) -> tuple[list[str], list[list[str]]]:
    """One row per measure.  "memfx/peers' median" is what issue 16 holds
    memfx to: its median over the median of the same-pattern peers' medians
    (tools in `other_pattern` are shown but left out of it); its paired
    form divides within each repetition, whose jobs run seconds apart."""
    header = ["measure", "memfx"] + peer_names + ["memfx/peers' median", "paired", "memfx/best peer",
                                                   "paired ratio"]
    rows = []
    for measure in plan.measures:
        per_tool = {name: summary(results[measure.key].get(name, [])) for name in ["memfx"] + peer_names}
        peers = [(name, s["median"]) for name, s in per_tool.items() if name != "memfx" and s]
        same = [value for name, value in peers if name not in other_pattern]
        ratio = paired = versus_median = paired_median = "-"
        if per_tool["memfx"] and same:
            versus_median = f"{per_tool['memfx']['median'] / statistics.median(same):.2f} (of {len(same)})"
            same_names = [name for name, _ in peers if name not in other_pattern]
            paired_median = fmt_ratios(paired_median_ratios((by_rep or {}).get(measure.key, {}), same_names))
        if per_tool["memfx"] and peers:
            pick = max if measure.higher_is_better else min
            best_name, best = pick(peers, key=lambda item: item[1])
            ratio = f"{per_tool['memfx']['median'] / best:.2f} ({best_name})"
            paired = fmt_ratios(paired_ratios((by_rep or {}).get(measure.key, {}), best_name))
        rows.append([f"{measure.label} [{measure.unit}]", fmt_cell(per_tool["memfx"])]
                    + [fmt_cell(per_tool[name]) for name in peer_names] + [versus_median, paired_median, ratio, paired])
    return header, rows


def render_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule] + [line(r) for r in rows])


def machine_line(cpu: int) -> str:
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model") and key not in fields:
                fields[key] = value.strip()
    except OSError:
        pass
    return (f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, "
            f"model {fields.get('model', '?')}), {os.cpu_count()} logical CPUs, pinned to CPU {cpu}")


def report(args, cpu, plan, tools, missing, results, failures, timings, shares, reps_done,
           by_rep=None) -> str:
    """The table and its notes; writes the --json document as a side effect."""
    lines = []
    ran_peers = [tool.name for tool, _ in tools if tool.name != "memfx"]
    shown_peers = [name for name in ran_peers if any(name in results[k] for k in results)]
    other_pattern = {tool.name for tool, _ in tools if not tool.same_pattern}
    header, rows = build_table(plan, results, shown_peers, by_rep, other_pattern)
    lines.append(f"Machine: {machine_line(cpu)}")
    lines.append(f"{reps_done} interleaved repetition(s); cells are median [min-max] over them; "
                 "'paired' is memfx / the same-pattern peers' median, and the paired ratio memfx / the "
                 "best peer, within each repetition, median [min-max].")
    lines.append(render_table(header, rows))
    for tool, path in tools:
        if tool.name in timings:
            note = f" ({tool.note})" if tool.note else ""
            share = ""
            if shares.get(tool.name):
                share = f", CPU share {100 * statistics.median(shares[tool.name]):.0f}% (median over runs)"
            lines.append(f"  {tool.name}: {path}{note}, {timings[tool.name]:.0f} s{share}")
    idle_by_design = {tool.name for tool, _ in tools if tool.idles_by_design}
    crowded = sorted(name for name, values in shares.items()
                     if name != "memfx" and name not in idle_by_design and values
                     and statistics.median(values) < 0.9)
    if crowded:
        lines.append(f"  Note: {', '.join(crowded)} ran on the CPU under 90% of their wall time "
                     "((user + system time) / elapsed, median over runs): for a tool that computes "
                     "flat out, other work shared its CPU and its wall-clock figures are inflated "
                     "(memfx rejects samples with a context switch). Compare on an idle machine.")
    for name, messages in failures.items():
        distinct = sorted(set(messages))
        lines.append(f"  {name} failed {len(messages)}x: " + "; ".join(distinct[:4]))
    for tool in missing:
        lines.append(f"  {tool.name}: not found -- get it from {tool.how_to_get} "
                     f"(then --peer {tool.name}=PATH or --peers-dir)")
    if args.json:
        document = {
            "machine": machine_line(cpu), "reps": reps_done, "quick": args.quick,
            "measures": [{"key": m.key, "label": m.label, "unit": m.unit,
                          "higher_is_better": m.higher_is_better,
                          "figures": results[m.key],
                          "per_rep": {tool: {str(r): v for r, v in reps.items()}
                                      for tool, reps in (by_rep or {}).get(m.key, {}).items()},
                          "summary": {n: summary(v) for n, v in results[m.key].items()}}
                         for m in plan.measures],
            "tools": {tool.name: path for tool, path in tools},
            "failures": failures,
            "cpu_share": shares,
            "not_found": {tool.name: tool.how_to_get for tool in missing},
            "table": {"header": header, "rows": rows},
        }
        text = json.dumps(document, indent=2)
        if args.json == "-":
            if reps_done == args.reps:
                lines.append(text)
        else:
            Path(args.json).write_text(text + "\n")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run memfx and the installed peer memory benchmarks side by side "
                    "(interleaved, pinned to one CPU) and print a comparison table.")
    parser.add_argument("--peer", action="append", default=[], metavar="NAME=PATH",
                        help="use this binary for peer NAME (names: "
                             + ", ".join(t.name for t in TOOLS[1:]) + ")")
    parser.add_argument("--peers-dir", metavar="DIR", default=os.environ.get("MEMFX_PEERS_DIR"),
                        help="folder holding the peers' build trees (default $MEMFX_PEERS_DIR)")
    parser.add_argument("--only", metavar="LIST",
                        help="comma-separated measure groups (latency, fill, copy, zero, bandwidth) and/or "
                             "tool "
                             "names; memfx always runs")
    parser.add_argument("--match", metavar="TEXT[,TEXT]",
                        help="only the measures whose label holds one of these texts (case-insensitive), "
                             "e.g. --match 'chase 1 GiB' for the 1 GiB latency points")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    parser.add_argument("--quick", action="store_true", help="skip the 1 GiB points; shorter peer runs")
    parser.add_argument("--cpu", type=int, help="CPU to pin everything to (default: the last allowed one)")
    parser.add_argument("--python", default=sys.executable, help="Python that runs memfx")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON ('-' = stdout)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    pointed = {}
    for item in args.peer:
        name, sep, path = item.partition("=")
        if not sep or not path:
            parser.error(f"--peer wants NAME=PATH, got {item!r}")
        if name not in {t.name for t in TOOLS[1:]}:
            parser.error(f"--peer: unknown peer {name!r}")
        pointed[name] = path
    args.pointed = pointed
    groups = {"latency", "fill", "copy", "zero", "bandwidth"}
    args.only_groups = args.only_tools = None
    if args.only:
        words = {w.strip() for w in args.only.split(",") if w.strip()}
        tool_names = {t.name for t in TOOLS}
        unknown = words - groups - tool_names
        if unknown:
            parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
        args.only_groups = (words & groups) or None
        args.only_tools = (words & tool_names) or None
    args.match_texts = [w.strip().lower() for w in (args.match or "").split(",") if w.strip()] or None
    return args


def run_order(plan: Plan, jobs: list[tuple[Tool, Job]], rep: int = 0) -> list[tuple[Tool, Job]]:
    """Jobs in the order of their first measure (see Job.keys); within a
    measure memfx first on even repetitions and last on odd ones (A B C, then
    C B A), so a host that drifts over a minute favours no tool; a job that
    names no measure keeps its place at the end."""
    index = {m.key: i for i, m in enumerate(plan.measures)}
    def first(item):
        tool, job = item
        return min((index[k] for k in job.keys if k in index), default=len(index))
    ordered = sorted(jobs, key=first)     # stable: tool order within a measure
    if rep % 2 == 0:
        return ordered
    out, group = [], []
    for item in ordered + [None]:
        if group and (item is None or first(item) != first(group[0])):
            out += group[::-1]
            group = []
        if item is not None:
            group.append(item)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cpu = pin_to(args.cpu)
    plan = make_plan(cpu, args.quick, args.only_groups, args.match_texts)
    if not plan.measures:
        print("peers.py: error: no measure left by --only/--match", file=sys.stderr)
        return 2
    problem = memfx_problem(args.python)
    if problem:
        print(f"peers.py: error: {problem}", file=sys.stderr)
        return 2
    peers_dir = Path(args.peers_dir).expanduser() if args.peers_dir else None

    tools, missing = [], []
    for tool in TOOLS:
        if tool.name != "memfx" and args.only_tools and tool.name not in args.only_tools:
            continue
        path = args.python if tool.name == "memfx" else locate(tool, args.pointed, peers_dir)
        if path is None:
            missing.append(tool)
        else:
            tools.append((tool, path))

    results: dict[str, dict[str, list[float]]] = {m.key: {} for m in plan.measures}
    by_rep: dict[str, dict[str, dict[int, float]]] = {m.key: {} for m in plan.measures}
    failures: dict[str, list[str]] = {}
    timings: dict[str, float] = {}
    shares: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="memfx-peers-") as scratch:
        ctx = RunContext(cpu=cpu, quick=args.quick, db_path=os.path.join(scratch, "memfx.db"))
        planned = {tool.name: tool.jobs(tool, path, plan, ctx) for tool, path in tools}
        planned_jobs = [(tool, job) for tool, _ in tools for job in planned[tool.name]]
        for rep in range(args.reps):
            for tool, job in run_order(plan, planned_jobs, rep):
                print(f"[rep {rep + 1}/{args.reps}] {tool.name}: {' '.join(job.argv[-6:])}",
                      file=sys.stderr, flush=True)
                started = time.monotonic()
                try:
                    figures, info = run_job(job, cpu)
                    shares.setdefault(tool.name, []).append(info["cpu_share"])
                except PeerError as exc:
                    failures.setdefault(tool.name, []).append(str(exc))
                    continue
                except Exception as exc:  # a parser surprised by a peer's output
                    failures.setdefault(tool.name, []).append(f"{type(exc).__name__}: {exc}")
                    continue
                finally:
                    timings[tool.name] = timings.get(tool.name, 0.0) + time.monotonic() - started
                for key, value in figures.items():
                    if key in results and math.isfinite(value) and value > 0:
                        results[key].setdefault(tool.name, []).append(value)
                        by_rep[key].setdefault(tool.name, {})[rep] = value
            if rep + 1 < args.reps:  # a table so far, in case the run is cut short
                print(report(args, cpu, plan, tools, missing, results, failures, timings, shares, rep + 1,
                             by_rep), file=sys.stderr, flush=True)
    print(report(args, cpu, plan, tools, missing, results, failures, timings, shares, args.reps, by_rep))
    if not any("memfx" in per_tool for per_tool in results.values()):
        # a table without the tool it compares is not a comparison
        print("peers.py: error: memfx produced no figure (every memfx cell is '-'); "
              "see its failures above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
