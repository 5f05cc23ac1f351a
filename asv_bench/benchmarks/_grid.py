"""The parameter grids of the suite: small by default, full with ``FP8KIT_ASV_FULL=1``.

The default grids keep ``asv run --quick`` of the whole suite within minutes on two cores
(one size of 1M elements, the main formats, a few cases of each family); the full grids
are every size (1e3, 1e6, 1.6e7), format, pair and first call that the suite knows, for
a measurement session.  asv passes the environment to every process it starts, so the
switch holds for discovery and runs alike::

    FP8KIT_ASV_FULL=1 asv run --python=same --set-commit-hash $(git rev-parse HEAD)
"""

import os

#: True when ``FP8KIT_ASV_FULL`` is set to anything but "" or "0".
FULL = os.environ.get("FP8KIT_ASV_FULL", "") not in ("", "0")


def pick(small, full):
    """``full`` (a list) under ``FP8KIT_ASV_FULL=1``, else ``small``."""
    return list(full) if FULL else list(small)


#: Array sizes of the element-wise benchmarks.
SIZES = pick([1_000_000], [1_000, 1_000_000, 16_000_000])
#: The size of the benchmarks that track throughput or threads (one size).
BIG = 16_000_000 if FULL else 4_000_000
