"""The version of memfx, in one place (base layer): pyproject.toml reads it
from here (tool.setuptools.dynamic), and the package re-exports it as
``memfx.__version__``.  A constant, not importlib.metadata: that import
cost ~50 ms of every worker process's start (a quick survey starts ~45)."""

__version__ = "0.1.0"
