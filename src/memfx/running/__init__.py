"""Running an experiment: the runner (validation, the worker host,
streaming samples into the store, the final status) and the worker, the
measuring child (`python -m memfx.running.worker`).

May import the model, the lab, the store, the experiments and the analysis
(the worker's refinement rounds analyse the points taken so far)."""
