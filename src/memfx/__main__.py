"""`python -m memfx`: the command line."""
import sys

from memfx.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
