"""Advice checked by measurement: GCC strategies (gcc.py), glibc tunables
(glibc.py), prefetch advice (prefetch.py), what they share (common.py),
the gathering and terminal view (advise.py), and `memfx tune` (tune.py)
with its LD_PRELOAD interposer (`_interpose`, sources in _interpose/).

May import every layer below it: the model, the lab, the store, the
experiments, the analysis, running and the presentation."""
