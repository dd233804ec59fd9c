"""The lab's team runner (core team.c, Lab team trials): members run on the
CPUs they are pinned to, each on the buffers it is given; the window runs
from the barrier's release to the last finisher, so a member that starts
late lengthens it and the sample is rejected as not concurrent; background
loaders run from before the timed member starts until after it ends; bad
member lists are refused before anything runs.  No timed assertions: every
check is an ordering of TSC stamps the runner guarantees by construction."""
import os

import numpy as np
import pytest

from memfx.experiments.bandwidth import check_team
from memfx.experiments.sharing import _cpuset_cpus
from memfx.lab import _core
from memfx.lab.lab import Lab
from memfx.lab.sampling import TEAM_OVERLAP_MIN, team_overlap
from memfx.model.protocol import Team, TeamMember, Trial

ROWS = {r["name"]: r for r in _core.kernels()}
# The CPUs this process may use, read at collection, before any Lab pins it.
ALLOWED = sorted(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def _unpinned():
    """A Lab pins this process to one CPU; give the tests the full set back
    and leave the mask as they found it."""
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, set(_cpuset_cpus() or before))
    except OSError:
        pass
    yield
    os.sched_setaffinity(0, before)


def two_cpus():
    cpus = ALLOWED
    if len(cpus) < 2:
        pytest.skip("needs two CPUs this process may run on")
    return [cpus[-1], cpus[0]]       # the lab's default CPU (the last) first


@pytest.fixture
def lab():
    cpus = two_cpus()
    lab = Lab(cpu=cpus[0], hardware_counters=False)
    yield lab
    lab.close()


def _member(cpu, kind="read", size=64 << 10, lab=None, **kw):
    region = lab.buffer(size)
    if kind == "read":
        return TeamMember(cpu, src=region, **kw)
    return TeamMember(cpu, dst=region, **kw)


# ---- pure: the concurrency measure ----------------------------------------------

def _th(start, end):
    return {"tsc_start": start, "tsc_end": end}


def test_overlap_is_the_shortest_runs_share_spent_beside_every_other():
    assert team_overlap("together", [_th(0, 100)]) == 1.0
    assert team_overlap("together", [_th(0, 100), _th(0, 100)]) == 1.0
    assert team_overlap("together", [_th(0, 100), _th(100, 200)]) == 0.0
    assert team_overlap("together", [_th(0, 100), _th(300, 400)]) == 0.0
    assert team_overlap("together", [_th(0, 100), _th(50, 150)]) == pytest.approx(0.5)
    # the shortest run inside a long one overlaps fully
    assert team_overlap("together", [_th(0, 1000), _th(100, 200)]) == 1.0
    # background: the share of member 0's window each loader covers (the least)
    assert team_overlap("background", [_th(100, 200), _th(0, 300), _th(0, 300)]) == 1.0
    assert team_overlap("background", [_th(100, 200), _th(0, 300), _th(150, 300)]) == \
        pytest.approx(0.5)
    assert team_overlap("background", [_th(100, 200), _th(250, 300)]) == 0.0


# ---- the runner on real threads ---------------------------------------------------

@pytest.mark.measuring
def test_members_run_on_their_cpus_each_on_its_own_buffer(lab):
    cpus = two_cpus()
    for kind, kernel in (("read", "bw_read_sse2"), ("write", "fill_sse"),
                         ("copy", "copy_sse"), ("nt_write", "fill_nt_sse")):
        assert check_team(lab, cpus, kind, kernel) is None, kind


@pytest.mark.measuring
def test_check_team_catches_a_member_that_writes_the_wrong_bytes(lab):
    # a fill run where a copy is expected writes its byte, not the source
    assert "wrong bytes" in check_team(lab, two_cpus(), "copy", "fill_sse")


@pytest.mark.measuring
def test_a_late_member_lengthens_the_window_and_the_sample_is_rejected(lab):
    cpus = two_cpus()
    size = 64 << 10
    delay = int(lab.tsc_hz * 0.02)                   # 20 ms, far longer than a 64 KiB read
    members = [_member(cpus[0], lab=lab, size=size),
               _member(cpus[1], lab=lab, size=size, delay_ticks=delay)]
    trial = Trial("bw_read_sse2", size=size, metric="bandwidth", difference=False,
                  team=Team(members, "together"))
    rec = lab.sample(trial, 4, 1.0)
    team = lab.last_team
    ends = [th["tsc_end"] for th in team["threads"]]
    starts = [th["tsc_start"] for th in team["threads"]]
    # timed from the release to the LAST finisher: the late member is inside
    assert rec["ticks"] == max(ends) - team["release"]
    assert rec["ticks"] >= delay and starts[1] - team["release"] >= delay
    assert starts[0] >= team["release"] and all(e > s for s, e in zip(starts, ends))
    # so the aggregate figure can only drop: bytes of both / a window >= the delay
    assert rec["value"] <= 2 * size * 4 / (delay * 1e9 / lab.tsc_hz)
    # and the sample is flagged and excluded
    assert rec["counters"]["team_overlap"] < TEAM_OVERLAP_MIN
    assert rec["rejected"] and rec["reason"] == "not_concurrent"
    assert rec["counters"]["team_start_ns_1"] >= delay * 1e9 / lab.tsc_hz * 0.99


@pytest.mark.measuring
def test_background_loaders_stream_before_and_after_the_timed_member(lab):
    cpus = two_cpus()
    n = 4096
    chain = lab.link_chain(lab.buffer(n * 64), 64, n, np.random.default_rng(1).permutation(n))
    chunk, chunks = 64 << 10, 8
    loader = TeamMember(cpus[1], kernel="bw_read_sse2", src=lab.buffer(chunk * chunks),
                        size=chunk, count=1, chunks=chunks)
    trial = Trial("chase_ptr", src=chain, team=Team([TeamMember(cpus[0]), loader], "background"),
                  resume=True)
    rec = lab.sample(trial, 20000, 1.0)
    chase, load = lab.last_team["threads"]
    assert load["calls"] >= 1 and chase["calls"] == 1
    assert load["tsc_start"] <= chase["tsc_start"] and load["tsc_end"] >= chase["tsc_end"]
    assert rec["counters"]["team_overlap"] == 1.0 and rec["counters"]["team_loader_calls"] >= 1
    assert rec["counters"]["team_loader_gb_per_s"] > 0
    # the chase resumes from where it stopped: an element of the chain
    assert (chase["result"] - chain.address) % 64 == 0
    assert 0 <= chase["result"] - chain.address < n * 64
    assert trial.src.address == chase["result"]
    assert rec["metric"] == "ns_per_load" and rec["ticks"] == chase["tsc_end"] - chase["tsc_start"]


@pytest.mark.measuring
def test_a_team_of_one_on_the_callers_cpu(lab):
    m = _member(lab.cpu, lab=lab)
    trial = Trial("bw_read_sse2", size=64 << 10, metric="bandwidth", difference=False,
                  team=Team([m]))
    rec = lab.sample(trial, 2, 1.0)
    assert rec["counters"]["team_threads"] == 1 and rec["counters"]["team_overlap"] == 1.0
    assert lab.last_team["threads"][0]["cpu_start"] == lab.cpu


def _tuple(cpu, index, buf, size, chunks=1):
    return (cpu, index, None, 0, buf, 0, size, 0, 1, 0, 0, chunks)


@pytest.mark.measuring
def test_bad_teams_are_refused_before_anything_runs(lab):
    cpus = two_cpus()
    read = ROWS["bw_read_sse2"]["index"]
    buf = bytearray(4096)
    with pytest.raises(ValueError, match="1..64 members"):
        _core.team_run([])
    with pytest.raises(ValueError, match="given twice"):
        _core.team_run([_tuple(cpus[0], read, buf, 64), _tuple(cpus[0], read, buf, 64)])
    with pytest.raises(ValueError, match="past the end"):
        _core.team_run([_tuple(cpus[0], read, buf, 8192)])
    # a loader's chunks must all lie in its buffer; member 0 is never chunked
    with pytest.raises(ValueError, match="past the end"):
        _core.team_run([_tuple(cpus[0], read, buf, 64), _tuple(cpus[1], read, buf, 1024, 5)],
                       True)
    with pytest.raises(ValueError, match="chunks"):
        _core.team_run([_tuple(cpus[0], read, buf, 64, 2)], True)
    with pytest.raises(ValueError, match="outside a buffer"):
        _core.team_run([(cpus[0], read, None, 0, buf, 5000, 0, 0, 1, 0, 0)])


@pytest.mark.measuring
def test_sharing_and_team_calls_share_the_pool(lab):
    """After a team call, a sharing kernel still lands its threads on their
    CPUs (both dispatch through one pool of pinned threads)."""
    from memfx.experiments import sharing as S
    cpus = two_cpus()
    check_team(lab, cpus, "read", "bw_read_sse2")
    region = S.shared_area(lab, cpus, span=64)
    lab.call(Trial("fs_plain", dst=region, size=2, aux=64), 1000)
    header, slots = S.read_area(region, 2)
    S.check_call("fs_plain", header, slots)
    assert [s["cpu_start"] for s in slots] == cpus


FUZZ_CHILD = r"""
import json, random, sys
from memfx.lab import _core
rows = {r["name"]: r["index"] for r in _core.kernels()}
cpus = [int(c) for c in sys.argv[1].split(",")]
rng = random.Random(7)
ran = refused = 0
for _ in range(300):
    members, bufs = [], []
    for cpu in cpus:
        kernel = rng.choice(["bw_read_sse2", "fill_sse", "copy_sse", "fill_nt_sse"])
        room = rng.randrange(0, 2048)
        dst, src = bytearray(room + 64), bytearray(room + 64)
        dst[room:] = src[room:] = b"\xa5" * 64            # canaries past the room
        size = rng.randrange(0, 2200)
        off = rng.choice([0, rng.randrange(0, 64), rng.randrange(0, 3000)])
        chunks = 1 if not members else rng.choice([1, 1, 2, 3])
        members.append((cpu, rows[kernel], memoryview(dst)[:room], off, memoryview(src)[:room],
                        off, size, 0x5A, 1, 0, 0, chunks))
        bufs.append((dst, src, room))
    try:
        _core.team_run(members, rng.random() < 0.5)
        ran += 1
    except ValueError:
        refused += 1
    for dst, src, room in bufs:
        assert dst[room:] == b"\xa5" * 64 and src[room:] == b"\xa5" * 64, "wrote past a buffer"
print(json.dumps({"ran": ran, "refused": refused}))
"""


@pytest.mark.measuring
def test_team_run_fuzz_refuses_what_does_not_fit_and_never_writes_past_a_buffer():
    """Random members (kernels, sizes, offsets, chunks) on buffers followed by
    canaries, in a child so that a crash fails the test: every call either
    runs or raises ValueError, and no canary changes."""
    import json
    import subprocess
    import sys
    cpus = two_cpus()
    import memfx
    # the child imports the memfx this test imported (installed, in-place or
    # sanitized), never the source tree's unbuilt _core directory
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(memfx.__file__)), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", FUZZ_CHILD, ",".join(map(str, cpus))],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["ran"] > 20 and out["refused"] > 20, out


@pytest.mark.measuring
def test_a_loader_that_does_not_cover_the_timed_window_rejects_the_sample(lab):
    """The lab's judgement of a background call, on stamps it is handed: a
    loader that stopped before the chase ended (a lead-in that timed out, a
    stalled CPU) makes the sample not concurrent."""
    row = lab.kernels["chase_ptr"]
    loader_row = lab.kernels["bw_read_sse2"]
    trial = Trial("chase_ptr", team=Team([TeamMember(0), TeamMember(1)], "background"))

    def judged(loader_start, loader_end):
        lab.last_team = {"release": 0, "mode": "background", "ticks": 1000, "threads": [
            {"tsc_start": 1000, "tsc_end": 2000, "cpu_start": 0, "cpu_end": 0, "cpu_asked": 0,
             "switches": 0, "wait_ns": 0, "calls": 1, "result": 0, "row": row, "size": 0,
             "count": 100},
            {"tsc_start": loader_start, "tsc_end": loader_end, "cpu_start": 1, "cpu_end": 1,
             "cpu_asked": 1, "switches": 0, "wait_ns": 0, "calls": 3, "result": 0,
             "row": loader_row, "size": 1 << 20, "count": 1}]}
        return lab._team_sample(row, trial, 100, 1000, 1.0)
    covered = judged(500, 2500)
    assert not covered["rejected"] and covered["counters"]["team_overlap"] == 1.0
    short = judged(500, 1500)
    assert short["rejected"] and short["reason"] == "not_concurrent"
    assert short["counters"]["team_overlap"] == pytest.approx(0.5)
    judged(500, 2500)
    lab.last_team["threads"][1]["cpu_end"] = 0      # the loader ended on another CPU
    moved = lab._team_sample(row, trial, 100, 1000, 1.0)
    assert moved["rejected"] and moved["reason"] == "migrated"


@pytest.mark.measuring
def test_members_may_share_one_buffer(lab):
    """A Region given to every member (or left to the trial's) is shared:
    both read the same bytes and return the same checksum."""
    from memfx.experiments.bandwidth import _reference_sums
    cpus = two_cpus()
    region = lab.buffer(8192)
    data = np.random.default_rng(3).integers(0, 256, 8192, dtype=np.uint8)
    np.frombuffer(region.buffer, np.uint8, count=8192, offset=region.offset)[:] = data
    trial = Trial("bw_sum_sse2", size=8192, src=region,
                  team=Team([TeamMember(cpus[0]), TeamMember(cpus[1])]))
    threads = lab.team_call(trial, 3)["threads"]
    want = _reference_sums(data.tobytes(), 0, 8192) * 3 % (1 << 64)
    assert [th["result"] for th in threads] == [want, want]
