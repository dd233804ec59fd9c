"""Builds the C core and the `memfx tune` interposer.  Baseline x86-64 ISA
only: wide-vector kernels carry their own target attributes and are chosen
at run time."""
import glob

from setuptools import Extension, setup

CFLAGS = ["-O2", "-std=gnu11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]

core = Extension(
    "memfx.lab._core",
    sources=sorted(glob.glob("src/memfx/lab/_core/*.c") + glob.glob("src/memfx/lab/_core/kernels/*.c")),
    depends=sorted(glob.glob("src/memfx/lab/_core/*.h")),
    extra_compile_args=CFLAGS,
    define_macros=[("MFX_CFLAGS", '"%s"' % " ".join(CFLAGS))],
)

# Not a Python module: a shared library that `memfx tune` puts in LD_PRELOAD
# (memfx/advice/_interpose*.so).  Only its memcpy/memmove/memset (and __*_chk)
# symbols are exported; its own fallback loops must never become calls.
interpose = Extension(
    "memfx.advice._interpose",
    sources=["src/memfx/advice/_interpose/interpose.c"],
    extra_compile_args=CFLAGS + ["-fvisibility=hidden", "-fno-builtin",
                                 "-fno-tree-loop-distribute-patterns"],
    libraries=["dl", "pthread"],
)

setup(ext_modules=[core, interpose])
