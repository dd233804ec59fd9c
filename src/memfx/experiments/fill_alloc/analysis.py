"""fill_alloc's analysis: calloc vs malloc+memset vs mmap first touch
(speed-ups by fill's level ratio), the munmap cost and the cost per page,
as methods of FillAllocAnswers, which FillAlloc inherits (a mixin: `self`
is the registered experiment), with the arm table they read.  The protocol
(__init__.py) re-exports every name."""
from __future__ import annotations

import numpy as np

from ...model import answers as ans
from ...model.details import detail
from ...model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED, effect_verdict, threshold
from ...model.units import format_size
from ..fill.analysis import level_ratio

ALLOC_ARMS = {"calloc": "alloc_calloc", "malloc_memset": "alloc_malloc_memset", "mmap": "alloc_mmap",
              # page faults (seed 004, issue 13): first touch with THP, MAP_POPULATE (layout.c)
              "mmap_thp": "fault_mmap_thp", "mmap_populate": "fault_map_populate",
              # madvise(MADV_POPULATE_WRITE) instead of touching, 4 KiB and THP;
              # munmap of a touched region timed alone (layout.c, kernel_ticks)
              "mmap_populate_write": "fault_populate_write",
              "mmap_thp_populate_write": "fault_thp_populate_write",
              "munmap": "fault_munmap", "munmap_thp": "fault_thp_munmap"}


THP_BYTES = 2 << 20      # x86-64 huge page (PMD) size, SDM Vol. 3A 4.5


# Arms that map memory themselves: it is always fresh from the OS.
FRESH_ONLY = tuple(a for a in ALLOC_ARMS if a.startswith(("mmap", "munmap")))


class FillAllocAnswers:
    """The answers of the FillAlloc experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

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
