"""The lab: buffers, pinning, perf counters, cycle calibration and the
sampling loop (lab.py, perf.py, busy.py), the machine's identity and its
readers (machine.py, sysfs.py, cpuid.py, ldso.py), and the C core
(`_core`, sources in _core/): the only package that imports the core.

May import the model."""
