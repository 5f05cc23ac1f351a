"""Thread count and the size at which a call starts using threads.

Kernels loop over contiguous chunks (see :mod:`fp8kit._kernels.codec`);
this module only decides how many chunks a call gets.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np

__all__ = ["get_num_threads", "set_num_threads", "num_threads"]

#: Below this many elements a call stays on one thread.  Handing a chunk to a pool thread
#: and waiting for it costs ~15 us (measured on the 2-core development machine, Python
#: threads running the kernels' nogil builds), what one thread needs for ~50K elements of
#: float32 -> float8; 128K elements keep a margin.
PARALLEL_THRESHOLD = 1 << 17


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


#: Bits of each field of a kernel's packed chunk argument (see :func:`chunk_spec`).
_FIELD = 20


def chunk_spec(first: int, stop: int, nchunks: int) -> int:
    """The last argument of a kernel: run chunks ``first .. stop - 1`` of ``nchunks``.

    A plain ``n`` (``first = stop = 0``) means all ``n`` chunks, so ``kernel(..., 1)`` runs
    the whole array on the calling thread.  Kernels unpack it with
    :func:`fp8kit._kernels.bits.chunk_range`.
    """
    return nchunks | (first << _FIELD) | (stop << (2 * _FIELD))


# Threads are Python threads running the kernels' serial builds on disjoint chunk ranges
# (every kernel is compiled with nogil=True).  Numba's own threading (parallel=True) would
# need a second build of every kernel, which doubled the compile time of a first call, and
# its OpenMP pool hangs in a forked child; a plain thread pool starts again after a fork.
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def max_threads() -> int:
    """The most threads a call runs on: Numba's thread count (``NUMBA_NUM_THREADS``, which
    honours the CPUs available to the process).  A larger :func:`get_num_threads` splits
    the work into more chunks, run by these threads."""
    from numba import config

    return max(1, int(config.NUMBA_NUM_THREADS))


def _get_pool() -> ThreadPoolExecutor:
    # One pool for the process, sized once (its threads start on demand) and never shut
    # down: replacing a smaller pool while another thread was submitting to it raised
    # "cannot schedule new futures after shutdown" (25 of 24,902 calls in 20 s, threads
    # using different thread counts).
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None:
            _pool_size = max(1, max_threads() - 1)  # (the calling thread is one of them)
            _pool = ThreadPoolExecutor(_pool_size, thread_name_prefix="fp8kit")
        return _pool


def _after_fork_in_child() -> None:
    # A forked child has none of the parent's threads: start a new pool on demand.
    global _pool, _pool_size, _pool_lock
    _pool, _pool_size, _pool_lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def launch(kernel, size: int, *args, flags: int = 0) -> None:
    """Call a :class:`fp8kit._kernels.codec.Kernel` on ``size`` elements, split into
    :func:`chunks_for` chunks, on up to :func:`get_num_threads` threads (the calling one and
    pool threads, each running a contiguous range of chunks); ``args`` precede the chunk
    argument.  Returns the kernel's result, or-ed over the threads' (None for a kernel that
    returns nothing)."""
    return launch_compiled(kernel.build(False), size, *args, flags=flags)


#: A flag of the chunk argument (bit 62, above its three fields): the output is an array
#: just allocated, so a native kernel must not write it with non-temporal stores (the
#: first store to each page faults it in, zeroed through the caches, and streamed lines
#: then evict those: round_to of 16M float32 took 19.5 ms streamed into a new array
#: against 7.4 ms into an existing one, one thread, on an Intel Xeon).  Numba kernels and
#: the generic native kernels ignore it.
NO_STREAM = 1 << 62


#: numpy's array flags (``ndarray.flags.num``): C-contiguous, aligned, writeable.
C_CONTIGUOUS, ALIGNED, WRITEABLE = 0x1, 0x100, 0x400
#: What every kernel needs of an array it reads (the native entries check the same bits).
BEHAVED = C_CONTIGUOUS | ALIGNED


def _unaligned(a) -> bool:
    # (or not C-contiguous: a read-only broadcast view of a scale, say; one flags object,
    # not two: small calls check every argument)
    return isinstance(a, np.ndarray) and a.flags.num & BEHAVED != BEHAVED


def _behaved(args) -> tuple:
    """``args`` with an aligned, C-contiguous copy of each array that is not."""
    return tuple(b.copy() if _unaligned(b) else b for b in args)


def launch_compiled(fn, size: int, *args, flags: int = 0):
    """:func:`launch` of a kernel's compiled function ``fn`` (what ``Kernel.build`` returns,
    or an entry point of it taking the same arguments); ``flags``: :data:`NO_STREAM` or 0,
    or-ed into the chunk argument.  An input array not aligned to its elements (numpy
    allows them: a memory-mapped file's tensor at an odd offset) or not C-contiguous is
    read from an aligned, contiguous copy: the kernels' vector loads assume alignment, and
    their entry refuses such arrays (an unaligned output is the caller's to handle:
    codec._apply writes a temporary)."""
    # (outputs are never copied here: fp8kit allocates them aligned and contiguous, and
    # codec._apply gives the kernels a temporary for a caller's unaligned out=)
    nchunks = chunks_for(size)
    if nchunks <= 1:  # (small arrays: no thread count lookup, ~1 us)
        try:
            return fn(*args, nchunks | flags)
        except TypeError:
            # (the kernel's entry, or its dispatcher, refuses an unaligned or strided
            # array before it writes anything: the arguments are checked only then,
            # where checking every call cost 0.3 us of a 5 us 1,000-element encode)
            if not any(_unaligned(a) for a in args):
                raise
            return fn(*_behaved(args), nchunks | flags)
    for a in args:  # (a new tuple only where an argument is copied)
        if _unaligned(a):
            args = _behaved(args)
            break
    threads = min(nchunks, get_num_threads(), max_threads())
    if threads <= 1:
        return fn(*args, nchunks | flags)
    bounds = [nchunks * t // threads for t in range(threads + 1)]
    pool = _get_pool()
    futures: list[Future] = []
    try:
        for t in range(1, threads):
            futures.append(
                pool.submit(fn, *args, chunk_spec(bounds[t], bounds[t + 1], nchunks) | flags)
            )
        got = fn(*args, chunk_spec(bounds[0], bounds[1], nchunks) | flags)
        for f in futures:
            r = f.result()
            if r is not None:
                got = r if got is None else got | r
    except BaseException:
        # An interrupt (Ctrl-C arrives in the main thread, often while it waits here for
        # the pool's chunks) or a failed chunk: the chunks not started are cancelled and
        # the running ones waited for, so that nothing writes the caller's ``out=`` once
        # the exception reaches it.
        _cancel_and_wait(futures)
        raise
    return got


def _cancel_and_wait(futures: list[Future]) -> None:
    """Cancel the futures not started and wait for the running ones; a second interrupt
    during the wait does not cut it short (the first exception is the one re-raised)."""
    for f in futures:
        f.cancel()
    pending = [f for f in futures if not f.done()]
    while pending:
        try:
            wait(pending)
        except BaseException:  # (e.g. Ctrl-C pressed again: keep waiting, chunks are short)
            pass
        pending = [f for f in pending if not f.done()]


def run(kernel, x, lut, table, out) -> None:
    """Run an elementwise kernel on 1-D contiguous x/out, threaded if large."""
    launch(kernel, x.size, x, lut, table, out)
