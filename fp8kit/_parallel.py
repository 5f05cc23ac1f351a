"""Thread count and the size at which a call starts using threads.

Kernels run a Numba ``prange`` over contiguous chunks (see :mod:`fp8kit._kernels.codec`);
this module only decides how many chunks a call gets.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator

__all__ = ["get_num_threads", "set_num_threads", "num_threads"]

#: Below this many elements a call stays on one thread.  Measured on the 2-core development
#: machine (float32 -> float8, Numba's OpenMP layer): 2 threads take 7.8 us against 13.1 us
#: for 65,536 elements, and break even near 16K.  64K keeps a safety margin for slower
#: threading layers (workqueue wakes threads in ~50 us).
PARALLEL_THRESHOLD = 1 << 16


def _default_threads() -> int:
    env = os.environ.get("FP8KIT_NUM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    from numba import config  # numba's own default honours NUMBA_NUM_THREADS and affinity

    return max(1, int(config.NUMBA_NUM_THREADS))


_threads: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "fp8kit_num_threads", default=None
)


def get_num_threads() -> int:
    """Number of threads fp8kit uses for large arrays.

    Defaults to ``FP8KIT_NUM_THREADS`` if set, else Numba's thread count (which honours
    ``NUMBA_NUM_THREADS`` and the CPUs available to the process).

    Returns
    -------
    int
        The count set by :func:`set_num_threads` or :func:`num_threads`, else the default.

    Examples
    --------
    >>> import fp8kit
    >>> fp8kit.get_num_threads() >= 1
    True
    """
    n = _threads.get()
    return _default_threads() if n is None else n


def set_num_threads(n: int) -> None:
    """Set the number of threads for large arrays (in the current context).

    More threads than Numba's pool has (``NUMBA_NUM_THREADS``) split the work into more
    chunks without adding threads.

    Parameters
    ----------
    n : int
        A positive thread count.

    Returns
    -------
    None

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer.

    Examples
    --------
    >>> import fp8kit
    >>> with fp8kit.num_threads(2):
    ...     fp8kit.set_num_threads(1)
    ...     fp8kit.get_num_threads()
    1
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    _threads.set(n)


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    """Context manager: use ``n`` threads inside the block, restore the previous count after.

    Parameters
    ----------
    n : int
        A positive thread count.

    Returns
    -------
    contextlib.AbstractContextManager
        Entering it sets the count (for the current thread or task, a ``contextvars``
        variable); leaving it restores the previous one, on errors too.

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer.

    Examples
    --------
    >>> import fp8kit
    >>> with fp8kit.num_threads(1):
    ...     fp8kit.get_num_threads()
    1
    """
    previous = _threads.get()
    set_num_threads(n)
    try:
        yield
    finally:
        _threads.set(previous)


def chunks_for(n: int) -> int:
    """How many chunks (threads) a call on ``n`` elements gets."""
    if n < PARALLEL_THRESHOLD:
        return 1
    return max(1, min(get_num_threads(), n // (PARALLEL_THRESHOLD // 2)))


# Only one threaded launch at a time: Numba's workqueue layer (used where OpenMP and TBB are
# missing) aborts the process on concurrent launches.  A call that finds the lock taken runs
# on its own thread instead, which on a small machine is as fast.
_launch_lock = threading.Lock()
_threads_started = False
_threads_unusable = False


def _after_fork_in_child() -> None:
    # GNU OpenMP's thread pool does not survive fork(): a parallel launch in the child of a
    # process that already used it hangs.  Such children run every call serially.
    global _threads_unusable, _launch_lock
    _launch_lock = threading.Lock()
    if _threads_started:
        _threads_unusable = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def launch(kernel, size: int, *args) -> None:
    """Call a :class:`fp8kit._kernels.codec.Kernel` on ``size`` elements: its threaded build
    with one chunk per thread if large, else its serial build; ``args`` precede nchunks."""
    global _threads_started
    nchunks = chunks_for(size)
    if nchunks > 1 and not _threads_unusable and _launch_lock.acquire(blocking=False):
        try:
            _threads_started = True
            kernel.build(True)(*args, nchunks)
        finally:
            _launch_lock.release()
    else:
        kernel.build(False)(*args, 1)


def run(kernel, x, lut, table, out) -> None:
    """Run an elementwise kernel on 1-D contiguous x/out, threaded if large."""
    launch(kernel, x.size, x, lut, table, out)
