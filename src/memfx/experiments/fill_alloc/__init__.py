"""Zeroed memory: calloc vs malloc+memset vs mmap first touch (`fill_alloc`).

Seed 000's footnote: calloc can skip zeroing memory it knows is fresh.  This
experiment times calloc vs malloc+memset vs mmap first touch on fresh and
recycled memory with page faults counted, and (seed 004, issue 13) the cost
of first touch with transparent huge pages, MAP_POPULATE,
madvise(MADV_POPULATE_WRITE) and munmap.  It shares seed 000 with `fill`
and fill's level ratio (fill/analysis.py).
"""
from __future__ import annotations

from ...model import answers as ans
from ...model.answers import LOWER, Question
from ...model.errors import MemfxError, ParamError
from ...model.plotspec import PlotSpec
from ...model.units import format_size
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (
    ALLOC_ARMS,
    FRESH_ONLY,
    THP_BYTES,
    FillAllocAnswers,
)

SEED = "000"

# ---- calloc vs malloc+memset vs mmap first touch ---------------------------------------

ALLOC_RECYCLED = 1
ALLOC_CHECK = 2
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
class FillAlloc(FillAllocAnswers, Experiment):
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


