"""The presentation: terminal tables and screens (render.py, screen.py),
plots drawn from the documents' plot specs (plots.py), the offline HTML
report (report.py, with html.py, sections.py, advice.py) and the fleet
report (fleet.py).

Reads documents only: may import the model and the analysis; never the lab,
the store, the experiments or the runner."""
