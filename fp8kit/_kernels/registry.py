"""What every compiled kernel is keyed and built under, below the modules that build them:
the hash of the kernel sources and the lock that builds happen under."""

from __future__ import annotations

import threading

#: Held while a kernel is built (compiled, or loaded from the disk cache): one build per key.
BUILD_LOCK = threading.RLock()


def source_version() -> int:
    """A hash of the kernel sources.  Numba's disk cache only notices edits to the file of
    the cached function itself, not to the helpers it inlines; every kernel closes over this
    number (and native kernels' cache keys hold it) so that an edit to any kernel source
    invalidates the cached machine code."""
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return int.from_bytes(digest.digest()[:6], "little") + 1
