"""Zeroed memory: calloc vs malloc+memset vs mmap first touch (`fill_alloc`).

Seed 000's footnote: calloc can skip zeroing memory it knows is fresh.  This
experiment times calloc vs malloc+memset vs mmap first touch on fresh and
recycled memory with page faults counted, and (seed 004, issue 13) the cost
of first touch with transparent huge pages, MAP_POPULATE,
madvise(MADV_POPULATE_WRITE) and munmap.  It shares seed 000 with `fill`
(fill.py) and fill's level ratio (_fill_ratio.py).
"""
from __future__ import annotations

import numpy as np

from ...model import answers as ans
from ...model.answers import LOWER, Question
from ...model.details import detail
from ...model.errors import MemfxError, ParamError
from ...model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED, effect_verdict, threshold
from ...model.plotspec import PlotSpec
from ...model.units import format_size
from ..base import Experiment, Param, Point, Trial, register
from ..fill.analysis import level_ratio

SEED = "000"

# ---- calloc vs malloc+memset vs mmap first touch ---------------------------------------

ALLOC_ARMS = {"calloc": "alloc_calloc", "malloc_memset": "alloc_malloc_memset", "mmap": "alloc_mmap",
              # page faults (seed 004, issue 13): first touch with THP, MAP_POPULATE (layout.c)
              "mmap_thp": "fault_mmap_thp", "mmap_populate": "fault_map_populate",
              # madvise(MADV_POPULATE_WRITE) instead of touching, 4 KiB and THP;
              # munmap of a touched region timed alone (layout.c, kernel_ticks)
              "mmap_populate_write": "fault_populate_write",
              "mmap_thp_populate_write": "fault_thp_populate_write",
              "munmap": "fault_munmap", "munmap_thp": "fault_thp_munmap"}
ALLOC_RECYCLED = 1
THP_BYTES = 2 << 20      # x86-64 huge page (PMD) size, SDM Vol. 3A 4.5
ALLOC_CHECK = 2
# Arms that map memory themselves: it is always fresh from the OS.
FRESH_ONLY = tuple(a for a in ALLOC_ARMS if a.startswith(("mmap", "munmap")))
# Arms that ask for huge pages: planned only for regions that can hold one.
THP_ONLY = ("mmap_thp_populate_write", "munmap_thp")
POPULATE_WRITE_ARMS = ("mmap_populate_write", "mmap_thp_populate_write")
MUNMAP_ARMS = ("munmap", "munmap_thp")
# madvise(2) MADV_POPULATE_WRITE, Linux 5.14 (include/uapi/asm-generic/mman-common.h)
MADV_POPULATE_WRITE = 23


def populate_write_refusal():
    """None where madvise(MADV_POPULATE_WRITE) works here, else why not (a
    kernel before 5.14 answers EINVAL)."""
    import errno
    import mmap
    m = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(MADV_POPULATE_WRITE)
    except OSError as e:
        why = "EINVAL: the kernel predates Linux 5.14" if e.errno == errno.EINVAL \
            else errno.errorcode.get(e.errno, str(e.errno))
        return f"madvise(MADV_POPULATE_WRITE) failed here ({why})"
    except (AttributeError, ValueError) as e:
        return f"madvise is not available to Python here ({e})"
    finally:
        m.close()
    return None


@register
class FillAlloc(Experiment):
    name = "fill_alloc"
    order = 21
    title = "Zeroed memory: calloc vs malloc+memset vs mmap first touch"
    question = ("How much does calloc save over malloc+memset on fresh and on recycled memory, "
                "and what do the page faults cost?")
    seeds = (SEED,)
    arms = tuple(ALLOC_ARMS)
    params = [
        Param("sizes", "list:size", [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20],
              "allocation sizes, bytes", "1M,16M", minimum=4096),
        Param("memory", "list:str", ["fresh", "recycled"],
              "fresh = every block comes from the OS (mmap); recycled = freed heap memory is reused "
              "(glibc mmap disabled for the call)", "fresh", choices=("fresh", "recycled")),
    ]
    presets = {
        # first touches in a VM can be async page faults, during which the
        # guest switches tasks: samples of many ms are often rejected, so the
        # quick sizes stay small
        "quick": {"sizes": "256K,4M", "samples": 7, "min_sample_ms": 1.0},
        "full": {"samples": 7, "min_sample_ms": 2.0},
    }

    questions = (
        Question("fill_alloc.calloc_vs_memset_fresh", "How much faster is calloc than "
                 "malloc+memset on memory fresh from the OS?", "ratio", SEED,
                 "time malloc+memset / calloc (alloc, zero, touch every page, free): median over "
                 "sizes of per-size ratios of medians, two-stage bootstrap CI; detected beyond "
                 "effect_min", band=ans.EFFECT_BAND),
        Question("fill_alloc.calloc_vs_memset_recycled", "How much faster is calloc than "
                 "malloc+memset on recycled heap memory?", "ratio", SEED,
                 "time malloc+memset / calloc on reused heap memory, as for fresh memory", band=ans.EFFECT_BAND),
        Question("fill_alloc.mmap_vs_calloc", "Is mmap + first touch faster than calloc on "
                 "fresh memory?", "ratio", SEED,
                 "time calloc / mmap first touch, fresh memory, over sizes", band=ans.EFFECT_BAND),
        Question("fill_alloc.thp_first_touch", "How much cheaper is the first touch of memory "
                 "backed by transparent huge pages than by 4 KiB pages?", "ratio", "004",
                 "time 4 KiB first touch / THP first touch, fresh memory, over sizes", band=ans.EFFECT_BAND),
        Question("fill_alloc.populate_vs_touch", "Is MAP_POPULATE cheaper than faulting pages in "
                 "by touching them?", "ratio", "004",
                 "time touch / MAP_POPULATE, fresh memory, over sizes", band=ans.EFFECT_BAND),
        Question("fill_alloc.ns_per_page", "What does obtaining one 4 KiB page from the OS cost "
                 "(map, first touch, unmap)?", "ns", "004",
                 "median ns per 4 KiB page of mmap first touch at the largest size measured; THP "
                 "and MAP_POPULATE and page faults per page in details", better=LOWER),
        Question("fill_alloc.populate_write_vs_touch", "Is madvise(MADV_POPULATE_WRITE) "
                 "cheaper than faulting 4 KiB pages in by touching them?", "ratio", "004",
                 "time touch / MADV_POPULATE_WRITE (map, obtain, touch, unmap), fresh memory, "
                 "median over sizes of per-size ratios of medians; not measured where the "
                 "kernel refuses the advice (before Linux 5.14)", band=ans.EFFECT_BAND),
        Question("fill_alloc.thp_populate_vs_touch", "Is pre-faulting transparent huge pages "
                 "(MADV_HUGEPAGE + MADV_POPULATE_WRITE) cheaper than touching them?", "ratio",
                 "004", "time THP touch / THP MADV_POPULATE_WRITE, regions of 2 MiB or more "
                 "(with THP in madvise mode, MAP_POPULATE faults the pages in before "
                 "MADV_HUGEPAGE can apply, so the huge-page arm pre-faults with the madvise)", band=ans.EFFECT_BAND),
        Question("fill_alloc.munmap_per_page", "What does unmapping a touched region cost per "
                 "4 KiB page?", "ns", "004",
                 "median over samples of munmap's own time (fenced TSC reads around the call) / "
                 "4 KiB pages, largest size measured; every size in details", better=LOWER,
                 # host-shared: munmap ends with a TLB shootdown, an IPI to the other
                 # vCPU that the hypervisor delivers; the A/As read it in two host
                 # states about 1.8x apart (docs/stability.md)
                 host_shared=True),
        Question("fill_alloc.munmap_per_thp", "What does unmapping a touched region backed by "
                 "transparent huge pages cost per 2 MiB page?", "ns", "004",
                 "median over samples of munmap's own time / 2 MiB pages, largest size "
                 "measured (2 MiB or more)", better=LOWER,
                 # host-shared: freeing a huge page walks its 512 page structs (32 KiB of
                 # kernel memory), and moves with the host between surveys
                 # (docs/machine-notes.md, "Host-shared answers")
                 host_shared=True),
    )
    plots = (
        PlotSpec("alloc", "zeroed memory: ns per call (alloc, zero, touch, free)",
                 series=("arm", "memory"), size_x=True, log_y=True,
                 arms=tuple(a for a in ALLOC_ARMS if a not in MUNMAP_ARMS),
                 xlabel="allocation size (bytes)", ylabel="ns per call (log)"),
        PlotSpec("munmap", "munmap of a touched region: ns per call (the munmap alone)",
                 series=("arm",), size_x=True, log_y=True, arms=MUNMAP_ARMS,
                 xlabel="region size (bytes)", ylabel="ns per munmap (log)"),
    )

    def plan(self, params, machine):
        avail = (machine.get("memory") or {}).get("available_bytes")
        big = max(params["sizes"])
        if avail and 2 * big > avail * 0.8:
            raise ParamError(f"sizes: {format_size(big)} does not fit in {format_size(avail)} available")
        skip = set(POPULATE_WRITE_ARMS) if populate_write_refusal() else set()
        return [Point(arm, {"size_bytes": s, "memory": mem})
                for mem in dict.fromkeys(params["memory"])
                for s in sorted(set(params["sizes"]))
                for arm in ALLOC_ARMS
                if not (arm in FRESH_ONLY and mem == "recycled")   # mmap memory is always fresh
                and not (arm in THP_ONLY and s < THP_BYTES) and arm not in skip]

    def prepare(self, point, params, lab):
        aux = ALLOC_RECYCLED if point.params["memory"] == "recycled" else 0
        # whether the populate-write arms could run, recorded with the touch
        # arm's samples: the answer reads the reason from the data
        extra = {"populate_write_refused": int(populate_write_refusal() is not None)} \
            if point.arm == "mmap" else {}
        return Trial(ALLOC_ARMS[point.arm], size=point.params["size_bytes"], aux=aux,
                     metric="time", difference=False, reject_page_faults=False, warmup=1,
                     kernel_ticks=point.arm in MUNMAP_ARMS, extra=extra)

    def verify(self, lab, params):
        """Every strategy must hand out zeroed memory, also after the heap was dirtied."""
        refused = populate_write_refusal()
        for arm, kname in ALLOC_ARMS.items():
            if refused and arm in POPULATE_WRITE_ARMS:
                continue
            for mem in params["memory"]:
                if arm in FRESH_ONLY and mem == "recycled":
                    continue
                aux = ALLOC_CHECK | (ALLOC_RECYCLED if mem == "recycled" else 0)
                for size in (4096, 100_000, min(params["sizes"])):
                    bad = lab.call(Trial(kname, size=size, aux=aux), 2)
                    if bad:
                        raise MemfxError(f"{arm} ({mem}) returned {bad} non-zero bytes of {size}")

    def analyze(self, data):
        pts = [p for p in data.points if p.get("values")]
        by = {(p["arm"], p["params"]["memory"], p["params"]["size_bytes"]): p for p in pts}
        out = []
        for name, slow, fast, mem, what in (
                ("calloc_vs_memset_fresh", "malloc_memset", "calloc", "fresh",
                 "calloc vs malloc+memset, fresh memory"),
                ("calloc_vs_memset_recycled", "malloc_memset", "calloc", "recycled",
                 "calloc vs malloc+memset, recycled heap memory"),
                ("mmap_vs_calloc", "calloc", "mmap", "fresh", "mmap first touch vs calloc"),
                ("thp_first_touch", "mmap", "mmap_thp", "fresh",
                 "first touch with THP vs 4 KiB pages, regions of 2 MiB or more"),
                ("populate_vs_touch", "mmap", "mmap_populate", "fresh",
                 "MAP_POPULATE vs first touch")):
            # a region smaller than a huge page cannot be backed by one (x86-64
            # 2 MiB pages, SDM Vol. 3A 4.5): THP is judged from the sizes that can
            floor = THP_BYTES if name == "thp_first_touch" else 0
            out.append(self._speedup(name, by, slow, fast, mem, what, floor))
        out.append(self._per_page(data, by))
        for name, slow, fast, floor, what in (
                ("populate_write_vs_touch", "mmap", "mmap_populate_write", 0,
                 "madvise(MADV_POPULATE_WRITE) vs first touch, 4 KiB pages"),
                ("thp_populate_vs_touch", "mmap_thp", "mmap_thp_populate_write", THP_BYTES,
                 "MADV_POPULATE_WRITE vs first touch, transparent huge pages")):
            a = self._speedup(name, by, slow, fast, "fresh", what, floor)
            if a.verdict == ans.NOT_MEASURED:
                refused = any((s.get("counters") or {}).get("populate_write_refused")
                              for s in data.samples if s["arm"] == "mmap")
                a.because = ("madvise(MADV_POPULATE_WRITE) was refused on the machine measured "
                             "(it needs Linux 5.14+; EINVAL before): the arm was not run"
                             if refused else a.because + "; madvise(MADV_POPULATE_WRITE) is "
                             "planned only where the kernel accepts it (Linux 5.14+)")
            else:
                unit_bytes = THP_BYTES if floor else 4096
                # the times per page beside the ratio
                a.details = [d.updated(**{f"ns_per_page_{arm}": d[f"ns_{arm}"]
                                          / (d["size_bytes"] / unit_bytes) for arm in (slow, fast)})
                             for d in a.details]
            out.append(a)
        out.append(self._munmap(by, "munmap_per_page", "munmap", 4096, "4 KiB page"))
        out.append(self._munmap(by, "munmap_per_thp", "munmap_thp", THP_BYTES, "2 MiB page"))
        return out

    def _munmap(self, by, name, arm, page, what):
        """ns per page of munmap alone, at the largest size measured; every size in details."""
        q = self.declared(name)
        sizes = sorted(s for a, m, s in by if a == arm and m == "fresh" and s >= page)
        if not sizes:
            return ans.not_measured(q, f"the sweep did not measure munmap ({arm}) of a region "
                                       f"of {format_size(page)} or more")
        details = []
        for s in sizes:
            per = np.asarray(by[(arm, "fresh", s)]["values"], float) / (s / page)
            one = ans.measured(q, per, "")
            details.append(detail(f"{format_size(s)}", size_bytes=s, value=one.value,
                                  unit="ns", ci_low=one.ci_low, ci_high=one.ci_high,
                                  pages=s // page, point=ans.point_key(by[(arm, "fresh", s)])))
        big = sizes[-1]
        per = np.asarray(by[(arm, "fresh", big)]["values"], float) / (big / page)
        a = ans.measured(q, per, "", evidence=[d["point"] for d in details], details=details,
                         estimator="median of samples (munmap ticks / pages), largest size")
        rest = "; ".join(f"{d['value']:.0f} ns at {d['label']}" for d in details[:-1])
        a.because = (f"munmap of a touched {format_size(big)} region: {a.value:.0f} ns per "
                     f"{what}" + (f" ({rest})" if rest else ""))
        return a

    def _speedup(self, name, by, slow, fast, mem, what, floor=0):
        """Time slow / time fast over the sizes measured of at least `floor`
        bytes (> 1: `fast` is faster); every size in details."""
        q = self.declared(name)
        every = sorted(s for a, m, s in by if a == slow and m == mem and (fast, mem, s) in by)
        sizes = [s for s in every if s >= floor]
        if not sizes:
            return ans.not_measured(q, f"the sweep did not measure {slow} and {fast} on {mem} "
                                       f"memory at a common size"
                                    + (f" of {format_size(floor)} or more" if floor else ""))
        pairs = [(by[(slow, mem, s)]["values"], by[(fast, mem, s)]["values"]) for s in sizes]
        r = level_ratio(pairs, min_samples=threshold("min_samples"))
        if r is None:
            return ans.not_measured(q, f"no size has positive times for both {slow} and {fast}")
        details = []
        for s in every:
            a, b = by[(slow, mem, s)]["values"], by[(fast, mem, s)]["values"]
            rs = level_ratio([(a, b)])
            if rs is None:
                continue
            details.append(detail(f"{format_size(s)}", size_bytes=s, value=rs["ratio"],
                                  verdict=effect_verdict(rs["ratio"], rs["ci_low"], rs["ci_high"],
                                                         rs["n_a"], rs["n_b"]),
                                  unit="ratio", ci_low=rs["ci_low"], ci_high=rs["ci_high"],
                                  **{f"ns_{slow}": float(np.median(a)),
                                     f"ns_{fast}": float(np.median(b))},
                                  in_value=s >= floor,
                                  points=[ans.point_key(by[(slow, mem, s)]),
                                          ans.point_key(by[(fast, mem, s)])]))
        verdict = effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])
        word = {DETECTED: f"{fast} is {r['ratio']:.2f}x as fast" if r["ratio"] >= 1
                else f"{fast} is slower ({r['ratio']:.2f}x)",
                NOT_DETECTED: f"no difference beyond ±{threshold('effect_min'):.0%}"}.get(
                    verdict, f"{r['ratio']:.2f}x")    # inconclusive: results.py adds why
        few = min(r["n_a"], r["n_b"])
        if verdict == INCONCLUSIVE and few < threshold("min_samples"):
            word += f" (only {few} accepted samples at some size; min_samples = " \
                    f"{threshold('min_samples')})"
        because = (f"{what}: {word} (time {slow} / {fast}, median over "
                   f"{format_size(sizes[0])}..{format_size(sizes[-1])})")
        return ans.Answer(question=q.id, verdict=verdict, because=because, value=r["ratio"],
                          ci_low=r["ci_low"], ci_high=r["ci_high"], details=details,
                          evidence=[k for d in details for k in d["points"]],
                          estimator="median over sizes of per-size ratios of medians (time); "
                                    "two-stage bootstrap CI")

    def _per_page(self, data, by):
        q = self.declared("ns_per_page")
        page = 4096
        faults = {}
        for s in data.samples:
            pf = (s.get("counters") or {}).get("page_faults")
            if pf is not None and not s.get("rejected"):
                faults.setdefault((s["arm"], s["point"]["memory"]), []).append(
                    pf / s["length"] / (s["point"]["size_bytes"] / page))
        details = []
        for arm in ("mmap", "mmap_thp", "mmap_populate", "mmap_populate_write",
                    "mmap_thp_populate_write"):
            big = max((s for a, m, s in by if a == arm and m == "fresh"), default=None)
            if big:
                per = np.asarray(by[(arm, "fresh", big)]["values"], float) / (big / page)
                fs = faults.get((arm, "fresh"))
                details.append(detail(f"{arm} {format_size(big)}", arm=arm,
                                      size_bytes=big, value=float(np.median(per)), unit="ns",
                                      faults_per_page=float(np.median(fs)) if fs else None,
                                      point=ans.point_key(by[(arm, "fresh", big)])))
        for (arm, mem), fs in sorted(faults.items()):
            if arm not in FRESH_ONLY:
                details.append(detail(f"{arm} {mem} page faults", arm=arm, memory=mem,
                                      value=float(np.median(fs)), unit="faults/page",
                                      min=float(np.min(fs)), max=float(np.max(fs))))
        big = max((s for a, m, s in by if a == "mmap" and m == "fresh"), default=None)
        if big is None:
            return ans.not_measured(q, "the sweep did not measure mmap first touch on fresh memory")
        per = np.asarray(by[("mmap", "fresh", big)]["values"], float) / (big / page)
        a = ans.measured(q, per, "", evidence=[ans.point_key(by[("mmap", "fresh", big)])],
                         details=details, estimator="median of samples / pages, largest size")
        others = "; ".join(f"{d['arm']} {d['value']:.0f} ns" for d in details
                           if d.get("unit") == "ns" and d["arm"] != "mmap")
        a.because = (f"mmap + first touch of {format_size(big)}: {a.value:.0f} ns per 4 KiB page"
                     + (f"; {others}" if others else ""))
        return a
