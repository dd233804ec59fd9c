"""`memfx tune -- CMD`: what this machine's measured string-op crossovers are
worth on the user's own program (issue 25; seed 002).

1. Profile.  CMD runs once with LD_PRELOAD of memfx's interposer
   (advice/_interpose/interpose.c), which counts the calls and bytes of memcpy,
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
LD_PRELOAD and the two MEMFX_TUNE_* variables.  CMD runs in its own session
and dies with memfx; when a run ends every process it left is killed
(Runner, end_program).
"""
from __future__ import annotations

import ctypes
import glob
import os
import random
import select
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time

import numpy as np

from ..analysis.documents import TUNE_ARTIFACT as ARTIFACT
from ..analysis.documents import tune_answers as answers  # noqa: F401 (re-exported)
from ..analysis.documents import tune_result_text as _result_text
from ..model import findings as fnd
from ..model import stats
from ..model.errors import MemfxError
from ..model.units import format_change

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

EXIT_PROGRAM_FAILED = 1      # the program failed, timed out, or left no readable profile
MAX_PROFILE_BYTES = 64 << 20  # one block is < 64 KiB (interpose.c); more is not a profile


class ProgramFailed(MemfxError):
    """CMD failed, was killed, timed out or could not be started: the
    program's failure, never bad input (cli: EXIT_PROGRAM_FAILED)."""


class ProfileUnreadable(ProgramFailed):
    """The profiling run left text that is not the interposer's."""


def quoted(word):
    """One word as a shell reads it back, on one line: shlex.quote, or bash's
    $'...' for control characters (a newline must not break a message)."""
    from ..report.render import _CONTROL
    word = str(word)
    if not _CONTROL.search(word):
        return shlex.quote(word)
    named = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return "$'" + _CONTROL.sub(lambda m: named.get(m[0]) or f"\\u{ord(m[0]):04x}",
                               word.replace("\\", "\\\\").replace("'", "\\'")) + "'"


def shown(argv):
    """A command for a one-line message (see quoted)."""
    return " ".join(quoted(a) for a in argv)


# ---- the command -----------------------------------------------------------------

def interposer_path():
    """The interposer shared library installed beside the package."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(p for p in glob.glob(os.path.join(here, "_interpose*.so")) if os.path.isfile(p))
    if not found:
        raise MemfxError("the tune interposer (memfx/advice/_interpose*.so) is not installed: "
                         "reinstall memfx with a C compiler")
    if any(c in found[0] for c in ": "):
        raise MemfxError(f"cannot put {quoted(found[0])} in LD_PRELOAD (its path holds ':' or "
                         "a space)")
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
    from ..lab.machine import _elf_interp
    if not argv:
        raise MemfxError("tune needs a command: memfx tune [OPTIONS] -- CMD [ARGS...]")
    name = argv[0]
    path = name if "/" in name else shutil.which(name)
    if not path or not os.path.exists(path):
        raise MemfxError(f"{quoted(name)}: command not found")
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise MemfxError(f"{quoted(name)}: not an executable file")
    for what, exe in (("", path), (" (the interpreter of its #! line)", _shebang(path))):
        if exe is None or not os.path.isfile(exe):
            continue
        st = os.stat(exe)
        if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            raise MemfxError(f"{quoted(exe)}{what} is set-user/group-ID: the loader ignores "
                             "LD_PRELOAD and GLIBC_TUNABLES for it, so there is nothing to tune")
        if _is_elf(exe) and _elf_interp(exe) is None:
            raise MemfxError(f"{quoted(exe)}{what} is statically linked (no ELF interpreter): "
                             "glibc's tunables and the profiler need the dynamic loader")
    return path


def with_item(base, sep, item):
    """An environment list (`base`, may be None or empty) with `item` appended."""
    return f"{base}{sep}{item}" if base else item


PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 1, 36, 37   # prctl(2)
KILL_GRACE_S = 3.0                # how long killed processes get to disappear


def _proc_table():
    """{pid: (ppid, pgrp, session, state, name)} of every process /proc shows."""
    table = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                head, _, rest = f.read().rpartition(b")")
            state, ppid, pgrp, sid = rest.split()[:4]
        except (OSError, ValueError):
            continue                      # ended meanwhile
        table[int(entry)] = (int(ppid), int(pgrp), int(sid), state.decode("ascii", "replace"),
                             head.partition(b"(")[2].decode("utf-8", "replace"))
    return table


def end_program(leader, before, grace_s=KILL_GRACE_S):
    """SIGKILL the program led by `leader` (unreaped: its ids cannot have
    been reused) and all it left: its group and session, memfx's children
    not in `before` (the program's orphans, re-parented to memfx as
    subreaper), and all their descendants.  /proc is scanned again after
    each round of kills (a killed parent's children move to memfx) until
    none is alive.  Returns (pids killed, [(pid, name)] alive after grace_s)."""
    me, killed, deadline = os.getpid(), set(), time.monotonic() + grace_s
    while True:
        table, children, todo, found = _proc_table(), {}, [leader], set()
        for pid, (ppid, pgrp, sid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
            if leader in (pgrp, sid) or (ppid == me and pid not in before):
                todo.append(pid)
        while todo:
            pid = todo.pop()
            if pid not in found and pid != me:
                found.add(pid)
                todo.extend(children.get(pid, ()))
        alive = {p for p in found if p in table and table[p][3] not in "ZX"}
        for kill, target in [(os.killpg, leader)] + [(os.kill, p) for p in alive]:
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed |= alive
        for pid in found - {leader} - before:    # reap the orphans (the leader is Popen's)
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if not alive or time.monotonic() > deadline:
            return killed, [(pid, table[pid][4]) for pid in sorted(alive)]
        time.sleep(0.01)


def _wait_exit(proc, timeout_s):
    """True once the program exits (unreaped, for end_program), False at the
    timeout.  A pidfd wakes us at once (Popen.wait sleeps up to 50 ms)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):     # no pidfd (Linux < 5.3): Popen's polling
        try:
            return proc.wait(timeout=timeout_s) is not None
        except subprocess.TimeoutExpired:
            return False
    try:
        poller, deadline = select.poll(), time.monotonic() + timeout_s
        poller.register(fd, select.POLLIN)
        while time.monotonic() < deadline:
            if poller.poll(min(deadline - time.monotonic(), 3600.0) * 1000):
                return True
        return False
    finally:
        os.close(fd)


class Runner:
    """Runs CMD: in its own session, pinned to `cpu`, output to /dev/null
    (unless show_output), stdin from /dev/null, each run within
    `timeout_s`; returns the wall time in seconds.  CMD dies with memfx;
    when a run ends all it left is killed (end_program), and what SIGKILL
    could not end is named and kept in `left_running`."""

    def __init__(self, argv, cpu=None, timeout_s=DEFAULT_TIMEOUT_S, show_output=False):
        self.argv, self.cpu, self.timeout_s, self.show_output = list(argv), cpu, timeout_s, show_output
        self.left_running = []            # [(pid, name)]
        try:
            self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            self._prctl = None

    def _preexec(self):
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)   # the program gets Ctrl-C again
        # a kill -9 of memfx must not leave the program running (exec keeps
        # this but for set-user-ID programs, refused); memfx gone already: exit
        if self._prctl is not None:
            self._prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != self._parent:
            os._exit(127)
        if self.cpu is not None:
            os.sched_setaffinity(0, {self.cpu})

    def run(self, env, what):
        self._parent, proc, was = os.getpid(), None, ctypes.c_int(-1)
        before = {pid for pid, row in _proc_table().items() if row[0] == self._parent}
        # Ctrl-C is held back while the program starts: one that arrived
        # inside Popen (the program already running, its process group not
        # yet ours to kill) left the program and its children behind
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            # while the program runs its orphans re-parent to memfx, not
            # init: end_program still finds them
            if self._prctl and self._prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) == 0:
                self._prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0)
            out = None if self.show_output else subprocess.DEVNULL
            t0 = time.perf_counter()
            try:
                proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=out, start_new_session=True,
                                        preexec_fn=self._preexec)
            except (OSError, subprocess.SubprocessError) as e:
                # check_command passed it: it changed since, the program's failure
                raise ProgramFailed(f"cannot run {quoted(self.argv[0])}: "
                                    f"{getattr(e, 'strerror', None) or e} ({what})") from None
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)   # a held Ctrl-C lands here
            exited = _wait_exit(proc, self.timeout_s)
            elapsed = time.perf_counter() - t0
        finally:             # exit, timeout or Ctrl-C: end all it left
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            if proc is not None:
                killed, left = end_program(proc.pid, before)
                self.left_running.extend(left)
                try:
                    proc.wait(timeout=KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
            if was.value >= 0:
                self._prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(was.value), 0, 0, 0)
        left = ("; still running, SIGKILL could not end: " + ", ".join(
            f"{pid} ({quoted(name)})" for pid, name in left)) if left else ""
        if not exited:
            ended = f"its {len(killed)} process(es) were killed" if killed else "it had ended"
            raise ProgramFailed(f"the program did not finish within {self.timeout_s:g} s "
                                f"({what}); {ended}{left} (raise --timeout)")
        status = proc.returncode
        if status != 0:
            how = (f"was killed by signal {-status}" if status < 0 else f"exited with status {status}")
            raise ProgramFailed(f"the program failed: `{shown(self.argv)}` {how} ({what}){left}")
        return elapsed


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
    lo and hi must be edges of the profile, or lo 0: from the smallest."""
    edges = raw["edges"]
    if lo == 0 and hi is None:        # every call (there may be no edges)
        cells = [cell for fn in functions for cell in (raw["pow2"].get(fn) or {}).values()]
    else:
        first = edges.index(lo) + 1 if lo else 0
        last = len(edges) if hi is None else edges.index(hi)
        cells = [cell for fn in functions for j, cell in raw["edge"].get(fn, {}).items()
                 if first <= j <= last]
    return sum(c for c, _ in cells), sum(b for _, b in cells)


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
            calls, nbytes = calls_between(raw, fns, lo, hi)
            label = [n for n in names if thresholds.get(n) == lo]
            regions.append({"group": group, "min": lo, "max": None if hi is None else hi - 1,
                            "from_threshold": label[0] if label else None,
                            "calls": calls, "bytes": nbytes})
    return {"processes": raw["processes"], "edges": raw["edges"], "functions": functions,
            "total_calls": sum(f["calls"] for f in functions.values()),
            "regions": regions}


def profile(runner, edges, env=None):
    """Run CMD once under the interposer; the parsed profile (parse_profile).
    Each process appends its block to a file it opens by path, in a 0700
    directory (mkdtemp) removed afterwards: a descriptor number handed down
    would be the program's own file in some process (`exec 6>>log`)."""
    env = dict(os.environ if env is None else env)
    env["LD_PRELOAD"] = with_item(env.get("LD_PRELOAD"), ":", interposer_path())
    env[EDGES_ENV] = ",".join(str(e) for e in edges)
    where = tempfile.mkdtemp(prefix="memfx-tune-")
    path = env[PROFILE_ENV] = os.path.join(where, "profile")
    try:
        runner.run(env, "profiling run")
        raw = _read_profile(path)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    if raw["processes"] and raw["edges"] != list(edges):
        raise ProfileUnreadable(f"the program changed {EDGES_ENV}: its profile cannot be read")
    raw["edges"] = list(edges)
    return raw


def _read_profile(path):
    try:       # no symlink, FIFO or device the program put in its place
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PROFILE_BYTES:
                raise OSError("not the interposer's file")
            return parse_profile(f.read().decode("ascii", "replace"))
    except FileNotFoundError:          # no process wrote (each exec'd or ended by _exit)
        return parse_profile("")
    except (OSError, ValueError) as e:
        raise ProfileUnreadable(f"the profile of the program cannot be read: "
                                f"{getattr(e, 'strerror', None) or e} (profiling run; did the "
                                f"program write to ${PROFILE_ENV}?)") from None


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
    from ..model.units import format_size
    from .advise import NT_MINIMUM, TUNABLES
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
    from ..analysis.documents import run_document
    from ..store.store import COMPLETE, FAILED, INTERRUPTED
    from .advise import (
        build_advice,
        copy_sources,
        effective_thresholds,
        newest_complete,
        tunables_env,
    )
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
        say(f"profiling `{shown(argv)}` (one run under the interposer)")
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
        _finish(store, run_id, samples, doc, FAILED, str(e), runner)
        raise
    except BaseException as e:
        status = INTERRUPTED if isinstance(e, KeyboardInterrupt) else FAILED
        _finish(store, run_id, samples, doc, status, "interrupted" if status == INTERRUPTED
                else f"{type(e).__name__}: {e}", runner)
        raise
    return _finish(store, run_id, samples, doc, COMPLETE, None, runner)


def _finish(store, run_id, samples, doc, status, error, runner):
    left = [{"pid": pid, "name": name} for pid, name in runner.left_running]
    doc = fnd.jsonable(dict(doc, status=status, error=error, left_running=left))
    if samples:
        store.add_samples(run_id, samples)
    store.set_artifact(run_id, ARTIFACT, doc)
    store.finish_run(run_id, status, error)
    return doc


# ---- reading it back -------------------------------------------------------------

def _interval(lo, hi):
    """Sizes lo..hi (hi None: no end) as a half-open interval: [2112, 4K)."""
    from ..model.units import format_size
    def size(n):
        return str(n) if n < 10000 else format_size(n)
    if lo == hi:
        return size(lo)
    return f"[{size(lo)}, {'inf' if hi is None else size(hi + 1)})"


def render(doc, console):
    """The tune document for people (rich).  Every line is a Text, never
    markup: a command, its arguments or an error print as typed (`[/dim]`)."""
    from rich.text import Text

    from ..model.units import format_size
    from ..report.render import add_row, safe_table, text
    cmd = doc.get("command")
    console.print(Text.assemble(text("memfx tune", "bold"), text(
        f" `{shown(cmd if isinstance(cmd, list) else [cmd or ''])}` (copy run "
        f"{doc['sources'].get('copy')}, glibc {doc['glibc'].get('version') or '?'})")))
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
            console.print(text("the program made no memcpy/memmove/memset call through the PLT"))
        rows = [r for r in prof["regions"] if r["calls"]]
        if rows:
            console.print(text("at glibc's current thresholds: " + "; ".join(
                f"{r['group']} {_interval(r['min'], r['max'])}: {r['calls']} calls"
                for r in rows)))
    for c in doc.get("dropped") or []:
        console.print(text(f"not checked: {c['id']}: {c['why']}", "dim"))
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
    left = ", ".join(f"{p.get('pid')} ({quoted(p.get('name'))})"
                     for p in doc.get("left_running") or [])
    if left:
        console.print(Text.assemble(text("still running", "yellow"),
                                    text(f": SIGKILL could not end: {left}")))
    rec = doc.get("recommendation")
    if doc.get("status") not in (None, "complete"):
        console.print(Text.assemble(text(doc.get("status"), "yellow"),
                                    text(f": {doc.get('error') or ''}")))
    elif rec:
        console.print(Text.assemble(text(rec["line"], "bold"), text(
            f"  gain {format_change(rec['speedup'] - 1, rec['ci_low'] - 1, rec['ci_high'] - 1)} "
            f"over {rec['n']} rounds")))
    else:
        results = "; ".join(f"{c['id']}: {_result_text(c.get('result'))}"
                            for c in doc.get("candidates") or [])
        console.print(text("no change recommended" + (f" ({results})" if results else
                                                      " (no candidate changes glibc's choice at "
                                                      "the sizes the program uses)")))
