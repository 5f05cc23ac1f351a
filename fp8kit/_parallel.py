"""Split large arrays across threads; keep small ones on the calling thread.

Kernels are serial loops compiled with ``nogil=True``; running contiguous chunks of one
call on a small thread pool gives the same speed-up as a Numba ``prange`` loop without its
compile time, lets each chunk use the vectorized serial loop, and keeps disk caching simple.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

__all__ = ["get_num_threads", "set_num_threads", "num_threads"]

#: Below this many elements a call stays on one thread: measured on a 2-core machine, a
#: thread hand-off costs about as much as converting ~100K float32 values.
PARALLEL_THRESHOLD = 1 << 17
# Chunk boundaries are multiples of this many elements (whole cache lines, SIMD blocks).
_ALIGN = 1024


def _available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _default_threads() -> int:
    env = os.environ.get("FP8KIT_NUM_THREADS") or os.environ.get("NUMBA_NUM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    return _available_cpus()


_threads: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "fp8kit_num_threads", default=None
)
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def get_num_threads() -> int:
    """Number of threads fp8kit uses for large arrays.

    Defaults to ``FP8KIT_NUM_THREADS`` or ``NUMBA_NUM_THREADS`` if set, else the number of
    CPUs this process may run on.

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

    Parameters
    ----------
    n : int
        A positive thread count.

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer.

    Examples
    --------
    >>> import fp8kit
    >>> fp8kit.set_num_threads(1)
    >>> fp8kit.get_num_threads()
    1
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    _threads.set(n)


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    """Context manager: use ``n`` threads inside the block, restore the previous count after.

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


def _forget_pool_after_fork() -> None:
    # A forked child inherits the executor object but not its threads: start afresh.
    global _pool, _pool_size, _pool_lock
    _pool, _pool_size, _pool_lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _get_pool(workers: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < workers:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fp8kit")
            _pool_size = workers
        return _pool


def run(kernel, x, lut, table, out) -> None:
    """Run ``kernel(x, lut, table, out)`` on 1-D contiguous ``x``/``out``, chunked if large."""
    n = x.size
    threads = min(get_num_threads(), max(1, n // (PARALLEL_THRESHOLD // 2)))
    if n < PARALLEL_THRESHOLD or threads == 1:
        kernel(x, lut, table, out)
        return
    step = -(-n // threads)
    step = -(-step // _ALIGN) * _ALIGN
    bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    pool = _get_pool(len(bounds) - 1)
    futures = [pool.submit(kernel, x[lo:hi], lut, table, out[lo:hi]) for lo, hi in bounds[1:]]
    lo, hi = bounds[0]
    try:
        kernel(x[lo:hi], lut, table, out[lo:hi])
    finally:
        for f in futures:
            f.result()
