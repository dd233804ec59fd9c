"""The model: what every layer speaks, bottom of the stack.

Base: units and their formatters, errors, run statuses, the version, the
protocol types (Param, Point, Trial, Region, Team), statistics, curves,
output files, forking helpers and the typed machine fingerprint.
Vocabulary (answers.py, findings.py, plotspec.py): what an experiment
declares and returns: questions and answers, verdict rules and thresholds,
plot specs.

Imports no other memfx package; within it, the base never imports the
vocabulary (tests/test_layers.py)."""
