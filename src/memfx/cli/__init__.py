"""The command line: the parser and subcommands (main.py, entry point
`memfx.cli.main:main`), the store-reading subcommands (show.py), what both
hold (args.py) and the survey (survey.py).

The face, with the package's `__init__`, `__main__` and `api`: may import
every layer."""
