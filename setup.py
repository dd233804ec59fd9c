"""Builds the C core.  Baseline x86-64 ISA only: wide-vector kernels carry
their own target attributes and are chosen at run time."""
import glob

from setuptools import Extension, setup

CFLAGS = ["-O2", "-std=gnu11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]

core = Extension(
    "memfx._core",
    sources=sorted(glob.glob("src/memfx/_core/*.c") + glob.glob("src/memfx/_core/kernels/*.c")),
    depends=sorted(glob.glob("src/memfx/_core/*.h")),
    extra_compile_args=CFLAGS,
    define_macros=[("MFX_CFLAGS", '"%s"' % " ".join(CFLAGS))],
)

setup(ext_modules=[core])
