"""``python -m fp8kit``: the ``fp8kit`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
