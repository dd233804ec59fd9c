"""The version of memfx, in one place (base layer): the installed
distribution's, or a marker when running from a source tree.  The package
re-exports it as ``memfx.__version__``."""
from importlib.metadata import PackageNotFoundError as _PNF
from importlib.metadata import version as _version

try:
    __version__ = _version("memfx")
except _PNF:  # running from a source tree
    __version__ = "0.1.0+src"
