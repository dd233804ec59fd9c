"""`memfx tune -- CMD`: what this machine's measured string-op crossovers are
worth on the user's own program (issue 25; seed 002).

1. Profile.  CMD runs once with LD_PRELOAD of memfx's interposer
   (_interpose/interpose.c), which counts the calls and bytes of memcpy,
   memmove, memset and their __*_chk forms per power-of-two size bucket and
   per interval between "edges": glibc's current thresholds and every
   candidate value, so the profile says exactly how many calls each
   candidate would send down another path.
2. Candidates.  GLIBC_TUNABLES settings that change glibc's choice at sizes
   CMD really uses: the thresholds `memfx advise` derives from the newest
   stored copy run (advise.build_advice, never a second derivation here);
   the non-temporal threshold glibc would have chosen from the operating
   system's last-level cache size when its own (CPUID) figure is larger;
   glibc.malloc.hugetlb=1 where the stored latency run found huge pages
   faster and CMD copies or sets buffers of a huge page or more.  At most
   MAX_CANDIDATES, each with its reason.
3. Check.  A warm-up run, then `rounds` rounds in which the baseline and
   every candidate run once each, in a shuffled order, pinned to one CPU.
   A candidate's speedup is baseline time / candidate time paired within a
   round; its CI is stats.bootstrap_ci of the median of those ratios.  Only
   a CI wholly above 1 + tune_noise_band is recommended.
4. Store.  A run of the pseudo-experiment "tune": every execution is a
   sample (the profiling run and the warm-up kept as rejected samples), and
   the tune document is its "tune" artifact; documents.run_document turns
   the candidates into answers, so `memfx show`, `runs` and `compare` see it.

CMD's environment is passed on unchanged apart from GLIBC_TUNABLES (a
candidate's setting appended to the user's own) and, while profiling,
LD_PRELOAD and the two MEMFX_TUNE_* variables.  CMD runs in its own session;
a timeout or Ctrl-C kills its whole process group.
"""
from __future__ import annotations

import glob
import os
import random
import shlex
import shutil
import signal
import stat
import subprocess
import time

import numpy as np

from . import findings as fnd
from . import stats
from .documents import TUNE_ARTIFACT as ARTIFACT  # noqa: F401 (re-exported)
from .documents import tune_answers as answers  # noqa: F401 (re-exported)
from .documents import tune_result_text as _result_text
from .errors import MemfxError
from .units import format_change

SCHEMA_VERSION = 1
TUNE_KIND = "memfx-tune"
EXPERIMENT = "tune"          # the pseudo-experiment name of a tune record in the store
MAX_CANDIDATES = 4
DEFAULT_ROUNDS = 7
DEFAULT_TIMEOUT_S = 300.0
METRIC = "ns_per_run"
PROFILE_ENV = "MEMFX_TUNE_PROFILE"
EDGES_ENV = "MEMFX_TUNE_EDGES"
MAX_EDGES = 32               # interpose.c: MAX_EDGES
HUGETLB = "glibc.malloc.hugetlb"

FUNCTIONS = ("memcpy", "memmove", "memset", "__memcpy_chk", "__memmove_chk", "__memset_chk")
COPY_FUNCTIONS = ("memcpy", "memmove", "__memcpy_chk", "__memmove_chk")
SET_FUNCTIONS = ("memset", "__memset_chk")
# which calls each glibc threshold governs (advise.TUNABLES names)
GOVERNS = {"rep_movsb_threshold": COPY_FUNCTIONS, "non_temporal_threshold": COPY_FUNCTIONS,
           "rep_stosb_threshold": SET_FUNCTIONS}

EXIT_PROGRAM_FAILED = 1


class ProgramFailed(MemfxError):
    """CMD exited with a non-zero status, was killed, or timed out."""


# ---- the command -----------------------------------------------------------------

def interposer_path():
    """The interposer shared library installed beside the package."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(p for p in glob.glob(os.path.join(here, "_interpose*.so")) if os.path.isfile(p))
    if not found:
        raise MemfxError("the tune interposer (memfx/_interpose*.so) is not installed: "
                         "reinstall memfx with a C compiler")
    if any(c in found[0] for c in ": "):
        raise MemfxError(f"cannot put {found[0]} in LD_PRELOAD (its path holds ':' or a space)")
    return found[0]


def _is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _shebang(path):
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    return words[0] if words else None


def check_command(argv):
    """The executable CMD names (resolved on PATH), or MemfxError with one
    line: missing, not executable, static (no PT_INTERP: the dynamic loader
    never runs, so neither LD_PRELOAD nor GLIBC_TUNABLES can act) or
    set-user/group-ID (the loader ignores both in secure mode)."""
    from .machine import _elf_interp
    if not argv:
        raise MemfxError("tune needs a command: memfx tune [OPTIONS] -- CMD [ARGS...]")
    name = argv[0]
    path = name if "/" in name else shutil.which(name)
    if not path or not os.path.exists(path):
        raise MemfxError(f"{name}: command not found")
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise MemfxError(f"{name}: not an executable file")
    for what, exe in (("", path), (" (the interpreter of its #! line)", _shebang(path))):
        if exe is None or not os.path.isfile(exe):
            continue
        st = os.stat(exe)
        if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            raise MemfxError(f"{exe}{what} is set-user/group-ID: the loader ignores LD_PRELOAD "
                             "and GLIBC_TUNABLES for it, so there is nothing to tune")
        if _is_elf(exe) and _elf_interp(exe) is None:
            raise MemfxError(f"{exe}{what} is statically linked (no ELF interpreter): glibc's "
                             "tunables and the profiler need the dynamic loader")
    return path


def with_item(base, sep, item):
    """An environment list (`base`, may be None or empty) with `item` appended."""
    return f"{base}{sep}{item}" if base else item


class Runner:
    """Runs CMD: in its own session, pinned to `cpu`, output to /dev/null
    (unless show_output), stdin from /dev/null, each run within
    `timeout_s`; returns the wall time in seconds."""

    def __init__(self, argv, cpu=None, timeout_s=DEFAULT_TIMEOUT_S, show_output=False):
        self.argv, self.cpu, self.timeout_s, self.show_output = list(argv), cpu, timeout_s, show_output

    def _preexec(self):
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)   # the program gets Ctrl-C again
        if self.cpu is not None:
            os.sched_setaffinity(0, {self.cpu})

    def run(self, env, what, pass_fds=()):
        out = None if self.show_output else subprocess.DEVNULL
        t0 = time.perf_counter()
        # Ctrl-C is held back while the program starts: one that arrived
        # inside Popen (the program already running, its process group not
        # yet ours to kill) left the program and its children behind
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=out, start_new_session=True,
                                    preexec_fn=self._preexec, pass_fds=tuple(pass_fds))
        except OSError as e:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            raise MemfxError(f"cannot run {self.argv[0]}: {e.strerror or e}") from None
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            raise
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)   # a held Ctrl-C lands here
            status = proc.wait(timeout=self.timeout_s)
            elapsed = time.perf_counter() - t0
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise ProgramFailed(f"the program did not finish within {self.timeout_s:g} s "
                                f"({what}); its process group was killed (raise --timeout)") from None
        except BaseException:            # Ctrl-C: end CMD's whole process group first
            _kill_group(proc)
            raise
        if status != 0:
            how = (f"was killed by signal {-status}" if status < 0 else f"exited with status {status}")
            raise ProgramFailed(f"the program failed: `{shlex.join(self.argv)}` {how} ({what})")
        return elapsed


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


# ---- the profile -----------------------------------------------------------------

def parse_profile(text):
    """The interposer's blocks (one per process) -> {"processes", "edges",
    "pow2": {fn: {bucket: [calls, bytes]}}, "edge": {fn: {bucket: [calls,
    bytes]}}}, summed over processes.  Lines of another shape are refused."""
    out = {"processes": 0, "edges": None, "pow2": {}, "edge": {}}
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if words == ["memfx-tune-profile", "1"]:
            inside = True
            out["processes"] += 1
            continue
        if not inside:
            raise ValueError(f"profile line {n}: expected a memfx-tune-profile header")
        if words[0] == "end":
            inside = False
        elif words[0] == "pid":
            continue
        elif words[0] == "edges":
            edges = [int(w) for w in words[1:]]
            if out["edges"] is not None and out["edges"] != edges:
                raise ValueError(f"profile line {n}: processes disagree on the edges")
            out["edges"] = edges
        elif words[0] in ("pow2", "edge") and len(words) == 5 and words[1] in FUNCTIONS:
            bucket, calls, nbytes = (int(w) for w in words[2:])
            cell = out[words[0]].setdefault(words[1], {}).setdefault(bucket, [0, 0])
            cell[0] += calls
            cell[1] += nbytes
        else:
            raise ValueError(f"profile line {n}: cannot read {line[:60]!r}")
    if inside:
        raise ValueError("profile ends inside a block (a process was cut short)")
    out["edges"] = out["edges"] or []
    return out


def pow2_range(bucket):
    """(smallest, largest) size of a power-of-two bucket."""
    return (0, 0) if bucket == 0 else (1 << (bucket - 1), (1 << bucket) - 1)


def calls_between(raw, functions, lo, hi=None):
    """(calls, bytes) of `functions` at sizes lo <= s < hi (hi None: no end);
    lo and hi must be edges of the profile."""
    edges = raw["edges"]
    first = edges.index(lo) + 1
    last = len(edges) if hi is None else edges.index(hi)
    calls = nbytes = 0
    for fn in functions:
        for j, (c, b) in raw["edge"].get(fn, {}).items():
            if first <= j <= last:
                calls += c
                nbytes += b
    return calls, nbytes


def summarize_profile(raw, thresholds):
    """The stored profile: per function, its totals and power-of-two
    buckets; and the calls re-bucketed at glibc's current thresholds."""
    functions = {}
    for fn in FUNCTIONS:
        cells = raw["pow2"].get(fn) or {}
        if not cells:
            continue
        buckets = [{"min": pow2_range(k)[0], "max": pow2_range(k)[1], "calls": c, "bytes": b}
                   for k, (c, b) in sorted(cells.items())]
        functions[fn] = {"calls": sum(b["calls"] for b in buckets),
                         "bytes": sum(b["bytes"] for b in buckets), "buckets": buckets}
    regions = []
    for group, fns, names in (("copy", COPY_FUNCTIONS, ("rep_movsb_threshold", "non_temporal_threshold")),
                              ("set", SET_FUNCTIONS, ("rep_stosb_threshold",))):
        cuts = sorted({thresholds[n] for n in names if thresholds.get(n) in raw["edges"]})
        bounds = [0] + cuts
        for i, lo in enumerate(bounds):
            hi = bounds[i + 1] if i + 1 < len(bounds) else None
            if lo == 0:
                calls, nbytes = _below(raw, fns, hi)
            else:
                calls, nbytes = calls_between(raw, fns, lo, hi)
            label = [n for n in names if thresholds.get(n) == lo]
            regions.append({"group": group, "min": lo, "max": None if hi is None else hi - 1,
                            "from_threshold": label[0] if label else None,
                            "calls": calls, "bytes": nbytes})
    return {"processes": raw["processes"], "edges": raw["edges"], "functions": functions,
            "total_calls": sum(f["calls"] for f in functions.values()),
            "regions": regions}


def _below(raw, functions, hi):
    if hi is None:
        return (sum(c for fn in functions for c, _ in (raw["pow2"].get(fn) or {}).values()),
                sum(b for fn in functions for _, b in (raw["pow2"].get(fn) or {}).values()))
    last = raw["edges"].index(hi)
    calls = nbytes = 0
    for fn in functions:
        for j, (c, b) in raw["edge"].get(fn, {}).items():
            if j <= last:
                calls += c
                nbytes += b
    return calls, nbytes


def profile(runner, edges, env=None):
    """Run CMD once under the interposer; the parsed profile (parse_profile).
    The table travels through an anonymous memory file inherited by CMD, so
    nothing is written to the file system."""
    env = dict(os.environ if env is None else env)
    env["LD_PRELOAD"] = with_item(env.get("LD_PRELOAD"), ":", interposer_path())
    env[EDGES_ENV] = ",".join(str(e) for e in edges)
    fd = os.memfd_create("memfx-tune-profile", 0)
    try:
        os.set_inheritable(fd, True)
        env[PROFILE_ENV] = f"/proc/self/fd/{fd}"
        runner.run(env, "profiling run", pass_fds=(fd,))
        size = os.fstat(fd).st_size
        text = os.pread(fd, size, 0).decode("ascii", "replace") if size else ""
    finally:
        os.close(fd)
    try:
        raw = parse_profile(text)
    except ValueError as e:
        raise MemfxError(f"the profile of the program cannot be read: {e}") from None
    if raw["processes"] and raw["edges"] != list(edges):
        raise MemfxError("the program changed MEMFX_TUNE_EDGES: its profile cannot be read")
    raw["edges"] = list(edges)
    return raw


# ---- candidates ------------------------------------------------------------------

def huge_page_bytes():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 2 << 20


def _answer(doc, qid):
    return next((a for a in (doc or {}).get("answers") or [] if a.get("question") == qid), None)


def propose(advice_tunables, glibc, machine, latency_doc=None, user_tunables=None,
            hugepage=None):
    """Candidate settings before the profile: [{id, tunable, name, value,
    current, functions, min_size, reason, source}].  Pure.

    advice_tunables: advise.build_advice(...)["glibc"]["tunables"];
    glibc: machine.glibc_tunables(); machine: the fingerprint (its "llc");
    latency_doc: the newest latency result document or None."""
    from .advise import NT_MINIMUM, TUNABLES
    from .units import format_size
    thresholds = (glibc or {}).get("thresholds") or {}
    out = []

    def add(name, tunable, value, reason, source, functions, current):
        if value is None or value == current:
            return
        if any(c["tunable"] == tunable and c["value"] == value for c in out):
            return
        out.append({"id": f"{tunable.rsplit('.', 1)[-1]}={value}", "tunable": tunable,
                    "name": name, "value": int(value), "current": current,
                    "functions": list(functions), "reason": reason, "source": source})
    for p in advice_tunables or []:
        if p.get("name") not in GOVERNS:
            continue
        where = f"copy run {p.get('run_id') or '?'}"
        if p.get("proposed") is not None:
            add(p["name"], p["tunable"], p["proposed"],
                f"{where}: {p.get('reason') or 'measured optimum'}",
                "copy", GOVERNS[p["name"]], thresholds.get(p["name"]))
            continue
        # advise keeps glibc's value when the kernels' curves gain less than
        # effect_min from moving it; the program itself (its cache
        # footprint, its mix of sizes) may still gain: the check decides
        best = p.get("optimum")
        floor = NT_MINIMUM if p["name"] == "non_temporal_threshold" else 0
        if isinstance(best, int) and best > floor:
            add(p["name"], p["tunable"], best,
                f"{where}: the measured crossover of its curves ({p.get('reason')})",
                "copy", GOVERNS[p["name"]], thresholds.get(p["name"]))
    # glibc sizes its non-temporal threshold from the cache size CPUID gives
    # it; where the operating system reports a smaller last-level cache, the
    # same fraction of the OS's figure is where glibc would have put it.
    llc = (machine or {}).get("llc") or {}
    nt = thresholds.get("non_temporal_threshold")
    own, seen = llc.get("glibc_bytes"), llc.get("sysfs_bytes")
    if nt and own and seen and own > seen:
        value = max(NT_MINIMUM + 1, int(seen * nt / own) // 4096 * 4096)
        add("non_temporal_threshold", TUNABLES["non_temporal_threshold"], value,
            f"glibc took its threshold ({format_size(nt)}) from a {format_size(own)} last-level "
            f"cache, the OS reports {format_size(seen)}: the same fraction of the OS's figure",
            "llc", GOVERNS["non_temporal_threshold"], nt)
    hp = _answer(latency_doc, "latency.huge_page_benefit")
    if hp and hp.get("verdict") == fnd.DETECTED and (hp.get("value") or 0) > 1 \
            and HUGETLB not in (user_tunables or ""):
        size = hugepage or huge_page_bytes()
        out.append({"id": "hugetlb=1", "tunable": HUGETLB, "name": "hugetlb", "value": 1,
                    "current": None, "functions": list(FUNCTIONS), "min_size": size,
                    "reason": (f"latency run {latency_doc.get('run_id')}: {hp.get('because')}; "
                               f"malloc'd buffers of {format_size(size)} or more can then be "
                               "backed by huge pages"),
                    "source": "latency"})
    return out[:MAX_CANDIDATES]


def edges_for(candidates, thresholds):
    """The sizes the interposer splits its edge buckets at: glibc's current
    thresholds, every candidate value (both ends of what it changes), and
    the huge-page size of a hugetlb candidate."""
    edges = {v for k, v in thresholds.items() if k in GOVERNS and isinstance(v, int) and v > 0}
    for c in candidates:
        edges.add(c["min_size"] if c["name"] == "hugetlb" else c["value"])
    return sorted(edges)[:MAX_EDGES]


def affected(candidate, raw):
    """(calls, bytes) the profile made at sizes whose glibc path the
    candidate changes: lo <= s < hi between current and new threshold (glibc
    takes the upper path at s >= threshold); for hugetlb, calls of a huge
    page or more."""
    if candidate["name"] == "hugetlb":
        return calls_between(raw, candidate["functions"], candidate["min_size"])
    cur = candidate["current"]
    if cur is None or cur not in raw["edges"] or candidate["value"] not in raw["edges"]:
        return 0, 0
    lo, hi = sorted((cur, candidate["value"]))
    return calls_between(raw, candidate["functions"], lo, hi)


def accepted_by_glibc(candidate, effective):
    """None when glibc takes the candidate's value (or cannot tell), else
    the reason it does not.  effective: advise.effective_thresholds' answer
    under the candidate's GLIBC_TUNABLES."""
    if candidate["name"] == "hugetlb" or effective is None:
        return None
    got = effective.get(candidate["name"])
    if got != candidate["value"]:
        return f"glibc does not take {candidate['value']} for {candidate['tunable']} (it uses {got})"
    return None


# ---- the check -------------------------------------------------------------------

def check(runner, variants, rounds, seed=0, on_run=None):
    """Warm-up (baseline once), then `rounds` rounds of every variant in a
    shuffled order.  variants: {id: env}, "baseline" first.  Returns
    ({id: [seconds per round]}, warm-up seconds)."""
    warm = runner.run(variants["baseline"], "warm-up run")
    if on_run:
        on_run("baseline", None, warm)
    rng = random.Random(seed)
    times = {v: [] for v in variants}
    for r in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        for v in order:
            t = runner.run(variants[v], f"round {r + 1}, {v}")
            times[v].append(t)
            if on_run:
                on_run(v, r, t)
    return times, warm


def speedup(baseline, candidate, band=None, seed=0):
    """Paired speedups (baseline / candidate per round), their median with a
    bootstrap CI (stats.bootstrap_ci), and the verdict: faster (CI wholly
    above 1 + band), slower (wholly below 1 - band), no_difference (within
    the band), inconclusive (otherwise, or fewer rounds than min_ci_samples)."""
    band = fnd.threshold("tune_noise_band") if band is None else band
    ratios = [b / c for b, c in zip(baseline, candidate) if c > 0]
    out = {"ratios": ratios, "n": len(ratios), "speedup": None, "ci_low": None, "ci_high": None,
           "gain": None, "noise_band": band, "verdict": "inconclusive",
           "baseline_median_s": float(np.median(baseline)) if baseline else None,
           "candidate_median_s": float(np.median(candidate)) if candidate else None}
    if not ratios:
        return out
    lo, hi = stats.bootstrap_ci(ratios, np.median, confidence=fnd.threshold("ci_level"), seed=seed)
    value = float(np.median(ratios))
    out.update(speedup=value, ci_low=lo, ci_high=hi, gain=value - 1.0)
    if len(ratios) < fnd.threshold("min_ci_samples"):
        out["verdict"] = "inconclusive"
    elif lo > 1.0 + band:
        out["verdict"] = "faster"
    elif hi < 1.0 - band:
        out["verdict"] = "slower"
    elif lo >= 1.0 - band and hi <= 1.0 + band:
        out["verdict"] = "no_difference"
    return out


def recommendation(candidates):
    """The checked candidate with the largest speedup among those measured
    faster, or None."""
    faster = [c for c in candidates if (c.get("result") or {}).get("verdict") == "faster"]
    if not faster:
        return None
    best = max(faster, key=lambda c: c["result"]["speedup"])
    return {"candidate": best["id"], "env": best["env"],
            "line": f"GLIBC_TUNABLES={best['env']}",
            "speedup": best["result"]["speedup"], "ci_low": best["result"]["ci_low"],
            "ci_high": best["result"]["ci_high"], "n": best["result"]["n"]}


# ---- the whole command -----------------------------------------------------------

def tune(argv, store, machine, rounds=DEFAULT_ROUNDS, timeout_s=DEFAULT_TIMEOUT_S, cpu=None,
         show_output=False, run_missing=False, runner_fn=None, progress=None, glibc=None,
         effective=None, env=None):
    """Profile, propose, check and store; returns the tune document.
    runner_fn(name) runs a missing experiment (--run-missing); glibc and
    effective (env value -> thresholds) may be given (tests)."""
    from .advise import build_advice, copy_sources, effective_thresholds, newest_complete, \
        tunables_env
    from .documents import run_document
    from .store import COMPLETE, FAILED, INTERRUPTED
    env = dict(os.environ if env is None else env)
    say = progress or (lambda msg: None)
    path = check_command(argv)
    sources = copy_sources(store, run_missing, runner_fn, related=())
    copy_doc = run_document(store, sources["copy"]["id"])
    latency = newest_complete(store, "latency")
    latency_doc = run_document(store, latency["id"]) if latency else None
    glibc = glibc if glibc is not None else ((machine or {}).get("glibc") or {}).get("diagnostics") \
        or {}
    effective = effective or effective_thresholds
    thresholds = {k: v for k, v in (glibc.get("thresholds") or {}).items()}
    advice = build_advice(copy_doc, glibc, machine)
    for p in advice["glibc"]["tunables"]:
        p["run_id"] = copy_doc["run_id"]
    base_tunables = env.get("GLIBC_TUNABLES")
    proposed = propose(advice["glibc"]["tunables"], glibc, machine, latency_doc, base_tunables)
    runner = Runner(argv, cpu=cpu, timeout_s=timeout_s, show_output=show_output)
    params = {"command": shlex.join(argv), "rounds": rounds, "timeout_s": timeout_s,
              "cpu": cpu, "show_output": show_output}
    run_id = store.begin_run(EXPERIMENT, params, None, machine)
    doc = {"schema_version": SCHEMA_VERSION, "kind": TUNE_KIND, "run_id": run_id,
           "command": list(argv), "executable": path,
           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "rounds": rounds, "timeout_s": timeout_s, "cpu": cpu,
           "noise_band": fnd.threshold("tune_noise_band"),
           "sources": {"copy": copy_doc["run_id"],
                       "latency": latency_doc["run_id"] if latency_doc else None},
           "glibc": {"available": bool(glibc.get("available")), "version": glibc.get("version"),
                     "thresholds": thresholds, "user_tunables": base_tunables},
           "llc": {k: ((machine or {}).get("llc") or {}).get(k)
                   for k in ("sysfs_bytes", "glibc_bytes")},
           "profile": None, "candidates": [], "dropped": [], "recommendation": None}
    samples = []

    def keep(arm, seconds, rnd=None, rejected=None):
        samples.append({"arm": arm, "point": {}, "metric": METRIC, "unit": "ns",
                        "value": seconds * 1e9, "ns": seconds * 1e9,
                        "counters": {} if rnd is None else {"round": rnd},
                        "rejected": rejected is not None, "reason": rejected})
    try:
        say(f"profiling `{shlex.join(argv)}` (one run under the interposer)")
        t0 = time.perf_counter()
        raw = profile(runner, edges_for(proposed, thresholds), env)
        keep("profile", time.perf_counter() - t0,
             rejected="profiling run (under the LD_PRELOAD interposer): not compared")
        doc["profile"] = summarize_profile(raw, thresholds)
        variants = {"baseline": env}
        for c in proposed:
            c["affected_calls"], c["affected_bytes"] = affected(c, raw)
            c["env"] = tunables_env(base_tunables, c["tunable"], c["value"])
            if not c["affected_calls"]:
                doc["dropped"].append(dict(c, why="the program made no call at the sizes it changes"))
                continue
            refused = accepted_by_glibc(c, effective(c["env"]) if glibc.get("available") else None)
            if refused:
                doc["dropped"].append(dict(c, why=refused))
                continue
            doc["candidates"].append(c)
            variants[c["id"]] = dict(env, GLIBC_TUNABLES=c["env"])
        if len(variants) > 1:
            say(f"checking {len(variants) - 1} candidate(s): warm-up, then {rounds} rounds "
                f"in shuffled order")

            def on_run(v, r, t):
                keep(v, t, r, rejected="warm-up run" if r is None else None)
            times, _ = check(runner, variants, rounds, on_run=on_run)
            doc["baseline"] = {"times_s": times["baseline"],
                               "median_s": float(np.median(times["baseline"]))}
            for c in doc["candidates"]:
                c["result"] = dict(speedup(times["baseline"], times[c["id"]]),
                                   times_s=times[c["id"]])
            doc["recommendation"] = recommendation(doc["candidates"])
    except ProgramFailed as e:
        _finish(store, run_id, samples, doc, FAILED, str(e))
        raise
    except BaseException as e:
        status = INTERRUPTED if isinstance(e, KeyboardInterrupt) else FAILED
        _finish(store, run_id, samples, doc, status, "interrupted" if status == INTERRUPTED
                else f"{type(e).__name__}: {e}")
        raise
    return _finish(store, run_id, samples, doc, COMPLETE, None)


def _finish(store, run_id, samples, doc, status, error):
    doc = fnd.jsonable(dict(doc, status=status, error=error))
    if samples:
        store.add_samples(run_id, samples)
    store.set_artifact(run_id, ARTIFACT, doc)
    store.finish_run(run_id, status, error)
    return doc


# ---- reading it back -------------------------------------------------------------

def _interval(lo, hi):
    """Sizes lo..hi (hi None: no end) as a half-open interval: [2112, 4K)."""
    from .units import format_size
    def size(n):
        return str(n) if n < 10000 else format_size(n)
    if lo == hi:
        return size(lo)
    return f"[{size(lo)}, {'inf' if hi is None else size(hi + 1)})"


def render(doc, console):
    """The tune document for people (rich)."""
    from rich.markup import escape

    from .render import add_row, safe_table
    from .units import format_size
    console.print(f"[bold]memfx tune[/bold] `{escape(shlex.join(doc.get('command') or []))}` "
                  f"(copy run {doc['sources'].get('copy')}, glibc "
                  f"{escape(str(doc['glibc'].get('version') or '?'))})")
    prof = doc.get("profile")
    if prof:
        t = safe_table("function", "calls", "bytes", "sizes (power-of-two buckets: calls)",
                       title=f"Profile ({prof['processes']} process(es))")
        for fn, f in prof["functions"].items():
            add_row(t, fn, str(f["calls"]), format_size(f["bytes"]),
                    ", ".join(f"{_interval(b['min'], b['max'])}: {b['calls']}"
                              for b in f["buckets"]))
        console.print(t)
        if not prof["functions"]:
            console.print("the program made no memcpy/memmove/memset call through the PLT")
        rows = [r for r in prof["regions"] if r["calls"]]
        if rows:
            console.print("at glibc's current thresholds: " + "; ".join(
                f"{r['group']} {_interval(r['min'], r['max'])}: {r['calls']} calls"
                for r in rows))
    for c in doc.get("dropped") or []:
        console.print(f"[dim]not checked: {escape(c['id'])}: {escape(c['why'])}[/dim]")
    if doc.get("candidates"):
        t = safe_table("candidate", "calls it changes", "speedup [CI]", "verdict", "reason",
                       title=f"Candidates (noise band {doc['noise_band']:.0%})")
        for c in doc["candidates"]:
            r = c.get("result") or {}
            ci = "-" if r.get("speedup") is None else \
                f"{r['speedup']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] n={r['n']}"
            add_row(t, c["id"], str(c.get("affected_calls", 0)), ci,
                    (r.get("verdict") or "-").replace("_", " "), c["reason"])
        console.print(t)
    rec = doc.get("recommendation")
    if doc.get("status") not in (None, "complete"):
        console.print(f"[yellow]{doc.get('status')}[/yellow]: {escape(str(doc.get('error') or ''))}")
    elif rec:
        console.print(f"[bold]{escape(rec['line'])}[/bold]  gain "
                      f"{format_change(rec['speedup'] - 1, rec['ci_low'] - 1, rec['ci_high'] - 1)} "
                      f"over {rec['n']} rounds")
    else:
        results = "; ".join(f"{c['id']}: {_result_text(c.get('result'))}"
                            for c in doc.get("candidates") or [])
        console.print("no change recommended" + (f" ({results})" if results else
                                                 " (no candidate changes glibc's choice at the "
                                                 "sizes the program uses)"))
