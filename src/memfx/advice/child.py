"""The process advice starts to time one thing where the parent cannot:

- libc under other GLIBC_TUNABLES (glibc reads them once, at process start):
  the core's own ``copy_libc`` / ``set_libc`` kernel, as the copy experiment
  measured it (``"what": "kernel"``);
- one of GCC's two builds of the same fixed-size copies, with and without
  -mmemcpy-strategy= / -mmemset-strategy= (``"what": "library"``: a shared
  object's ``mfx_<op>_<size>`` functions, timed by the core's time_call).

Either way a sample is sized and taken by memfx/lab/harness.py, the lab's
own harness, and timed by the core's loop: the check and the experiment it
checks measure alike, and nothing here is code in a string.

Run by its path, with the standard library only (`python -I -S child.py
SPEC`: no site-packages, so start-up stays ~20 ms); SPEC is one JSON object:

    core      path of the C core (memfx.lab.core.core_file())
    harness   path of memfx/lab/harness.py (memfx.lab.core.harness_file())
    what      "kernel" or "library"
    kernel    with "kernel": a core kernel's name, e.g. copy_libc
    library   with "library": a shared object's path; op: "copy" or "set"
    sizes     sizes in bytes;  samples: samples per size;  min_ms: a sample's
              least duration;  value: the byte a set writes (default 0x5a)

It prints one JSON line: {size: [ns per call, ...]}, or {"error": why}.
"""
import ctypes
import importlib.machinery
import importlib.util
import json
import mmap
import sys


def _load(name, path):
    """A module from its file: the core (an extension) or the harness."""
    if path.endswith(".py"):
        loader = importlib.machinery.SourceFileLoader(name, path)
    else:
        loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def measure(spec):
    core = _load("memfx.lab._core", spec["core"])
    harness = _load("memfx_lab_harness", spec["harness"])
    sizes = [int(s) for s in spec["sizes"]]
    value = int(spec.get("value", 0x5A))
    hz = core.tsc_hz(10.0)
    target = float(spec["min_ms"]) * 1e-3 * hz
    page = mmap.PAGESIZE
    top = max(sizes) + page
    # page-aligned, so dst - src = 0 (mod 4096): no 4K aliasing between the
    # loads and the stores still in flight
    src, dst = mmap.mmap(-1, top), mmap.mmap(-1, top)
    core.touch(src, 0, top, page)
    core.touch(dst, 0, top, page)
    if spec["what"] == "kernel":
        rows = {k["name"]: k for k in core.kernels()}
        row = rows.get(spec["kernel"])
        if row is None or not row["supported"]:
            return {"error": f"kernel {spec['kernel']} not available"}

        def timer(size):
            return lambda count: core.run(row["index"], dst, 0, src, 0, size, value, count, 0)[0]
    elif spec["what"] == "library":
        library, op = ctypes.CDLL(spec["library"]), spec["op"]
        if op not in ("copy", "set"):
            return {"error": f"op {op}: copy or set"}

        def timer(size):
            try:
                fn = ctypes.cast(getattr(library, f"mfx_{op}_{size}"), ctypes.c_void_p).value
            except AttributeError:
                raise LookupError(f"{spec['library']} has no mfx_{op}_{size}") from None
            return lambda count: core.time_call(fn, op, dst, src, size, count, value)
    else:
        return {"error": f"what {spec['what']!r}: kernel or library"}
    out = {}
    for size in sizes:
        try:
            ticks_of = timer(size)
        except LookupError as e:
            return {"error": str(e)}
        count = harness.calibrated_count(ticks_of, target)
        out[size] = harness.per_call_ns(ticks_of, count, int(spec["samples"]), hz)
    return out


def main(argv):
    if len(argv) != 2:
        print(json.dumps({"error": "usage: child.py SPEC_JSON"}))
        return 2
    print(json.dumps(measure(json.loads(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
