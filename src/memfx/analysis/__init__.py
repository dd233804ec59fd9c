"""The analysis: samples -> points -> answers -> documents (results.py,
documents.py), the survey answer cache, comparisons of runs, surveys and
curves (compare.py, compare_curves.py) and the fleet views (fleet.py).

A function of the documents and samples it is handed: may import the model,
the lab and the experiments, never the store."""
