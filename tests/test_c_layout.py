"""The layouts the kernels share with Python come from one header
(lab/_core/layout_shared.h), exported by the core and read, never copied,
by the experiments (issue 44 item 4)."""
import re
from pathlib import Path

import pytest

from memfx.experiments import _kit
from memfx.experiments.store_forward import kernels as sfk
from memfx.lab.core import core_layout

CORE = Path(__file__).resolve().parent.parent / "src" / "memfx" / "lab" / "_core"


def test_the_core_exports_every_constant_of_the_header_with_its_value():
    text = (CORE / "layout_shared.h").read_text()
    defined = {m.group(1): int(m.group(2))
               for m in re.finditer(r"^#define ((?:SH|SF|XCHG)_\w+) (\d+)", text, re.M)}
    assert defined and core_layout() == defined


def test_no_kernel_source_defines_a_shared_constant_again():
    names = set(core_layout())
    for path in CORE.rglob("*.c"):
        for m in re.finditer(r"^#define (\w+)", path.read_text(), re.M):
            assert m.group(1) not in names, f"{path.name} defines {m.group(1)} again"


def test_the_experiments_read_the_cores_values():
    lay = core_layout()
    assert (_kit.HEADER, _kit.BARRIER, _kit.STOP, _kit.CPUS, _kit.SLOTS, _kit.SLOT_BYTES,
            _kit.COUNTERS) == tuple(lay[f"SH_{n}"] for n in (
                "HEADER", "BARRIER", "STOP", "CPUS", "SLOTS", "SLOT_BYTES", "COUNTERS"))
    assert _kit.MAX_THREADS == lay["SH_MAX_THREADS"] and _kit.XCHG_TAG_SHIFT == lay["XCHG_TAG_SHIFT"]
    assert sfk.MAX_MOVES == lay["SF_MAX_MOVES"] and sfk.ENTRY_MAX_BYTES == lay["SF_SLOT_BYTES"]


@pytest.mark.measuring
def test_run_takes_keyword_arguments_as_its_docstring_names_them():
    import mmap

    from memfx.lab import _core
    rows = {r["name"]: r for r in _core.kernels()}
    buf = mmap.mmap(-1, 8192)
    buf[4096:4096 + 64] = bytes(range(64))
    _core.run(kernel=rows["copy_libc"]["index"], dst=buf, dst_off=0, src=buf, src_off=4096,
              size=64, value=0, count=1, aux=0)
    assert buf[:64] == bytes(range(64))
    with pytest.raises(TypeError):
        _core.run(kernel=rows["copy_libc"]["index"], dst=buf, dst_off=0, src=buf, src_off=4096,
                  size=64, value=0, count=1, aux=0, no_such=1)
    assert _core.run.__doc__.startswith("run(kernel, dst, dst_off, src, src_off, size, value, "
                                        "count, aux, perf_fds=None, rdpmc_pages=None")
