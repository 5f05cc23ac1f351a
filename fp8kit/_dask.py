"""The Dask backend: fp8kit's public functions on Dask arrays, lazily.

Each function maps the numpy path over the blocks (``dask.array.map_blocks``); nothing is
computed until the user computes.  Stochastic rounding gives the bits of the whole-array
call: the seed is drawn once, here, and each block's elements are rounded as the elements
of the whole array they are (their flat C-order index), through
:func:`fp8kit._args.index_offset`.  A block that spans the full trailing dimensions is one
run of consecutive indices; any other block is a run per row of its leading dimensions.

Imported only when a Dask array reaches a public function (see :mod:`fp8kit._backends`);
receives the public function to run on each block and never imports a public module.

:func:`interruptible` runs Dask's local schedulers (``threads``, ``processes``) on pools
whose workers leave Ctrl-C to the caller, as ``fp8kit study --scheduler`` needs.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np

from . import _args

#: Elements of the largest sample a call computes eagerly to check its arguments (and
#: learn the result's dtype) before building the graph.
_SAMPLE_MAX = 4096


def _meta_check(x, name: str) -> None:
    meta = getattr(x, "_meta", None)
    if meta is not None and not isinstance(meta, np.ndarray):
        raise TypeError(
            f"{name}: Dask arrays of {type(meta).__module__}.{type(meta).__name__} blocks are "
            "not supported (fp8kit runs Dask arrays of numpy blocks; for GPU data call it on "
            "the device arrays themselves)"
        )


def _fixed_seed(name: str, kwargs: dict) -> tuple[bool, dict]:
    """(stochastic?, kwargs with an int seed): a seed drawn once serves every block."""
    if kwargs.get("rounding") not in _args.STOCHASTIC_NAMES:
        return False, kwargs
    return True, {**kwargs, "seed": _args.seed_int(kwargs.get("seed"), name)}


def _c_strides(shape) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= int(n)
    return strides[::-1]


def by_runs(fn, x: np.ndarray, shape, starts, others=()) -> np.ndarray:
    """``fn(part, offset, *others_parts)`` over runs of consecutive global C-order indices
    of block ``x`` (at ``starts`` in an array of ``shape``); ``others`` are broadcast to x's
    shape and cut like it.  Returns the block's result."""
    nd = x.ndim
    if nd == 0 or x.size == 0:
        return np.asarray(fn(x, 0, *others))
    g = _c_strides(shape)
    m = max((ax for ax in range(nd) if x.shape[ax] != shape[ax]), default=-1)
    if m <= 0:  # one run
        return np.asarray(fn(x, starts[0] * g[0] if m == 0 else 0, *others))
    full = [np.broadcast_to(o, x.shape) for o in others]
    res = None
    base = starts[m] * g[m]
    for i in np.ndindex(*x.shape[:m]):
        off = base + sum((starts[j] + i[j]) * g[j] for j in range(m))
        r = np.asarray(fn(x[i], off, *(o[i] for o in full)))
        if res is None:
            res = np.empty(x.shape, r.dtype)
        res[i] = r
    return res


def _with_offset(public, rest: tuple, kwargs: dict):
    def run(part, offset, *ops):
        with _args.index_offset(offset):
            return public(part, *ops, *rest, **kwargs)

    return run


def _elementwise_block(public, rest, kwargs, stochastic, x, block_info=None):
    if not stochastic:
        return np.asarray(public(x, *rest, **kwargs))
    info = block_info[None]
    starts = [loc[0] for loc in info["array-location"]]
    return by_runs(_with_offset(public, rest, kwargs), x, info["shape"], starts)


def call(name: str, public, args: tuple, kwargs: dict):
    """Run public function ``name`` on Dask arrays (see the module docstring)."""
    import dask.array as da

    if kwargs.get("out") is not None:
        raise ValueError(
            f"{name}: out= is not supported with Dask arrays (the result is a lazy Dask "
            "array); drop out= and store the result, e.g. da.store(result, target)"
        )
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    for a in args:
        if type(a).__module__.startswith("dask."):
            _meta_check(a, name)
    if name == "fake_convert":
        return _fake_convert(da, public, args, kwargs)
    if name == "pack":
        return _pack(da, public, *args)
    if name == "unpack":
        return _unpack(da, public, *args)
    x, rest = args[0], tuple(args[1:])
    if any(type(a).__module__.startswith("dask.") for a in rest):
        raise TypeError(f"{name}: only the data may be a Dask array")
    stochastic, kwargs = _fixed_seed(name, kwargs)
    # a one-element sample checks the arguments now and gives the result's dtype
    sample = public(np.zeros((1,) * x.ndim, x.dtype), *rest, **kwargs)
    dtype = np.asarray(sample).dtype
    fn = functools.partial(_elementwise_block, public, rest, kwargs, stochastic)
    return da.map_blocks(fn, x, dtype=dtype, meta=np.empty((0,) * x.ndim, dtype))


# ------------------------------------------------------------------------------- fake_convert
def _fake_block(public, dest, kwargs, stochastic, consts, *blocks, block_info=None):
    x, ops = blocks[0], list(blocks[1:])
    scale = consts[0] if consts[0] is not None or not ops else ops.pop(0)
    shift = consts[1] if (consts[1] is not None or consts[2]) else ops.pop(0)
    if not stochastic:
        return public(x, scale, shift, dest, **kwargs)
    info = block_info[None]
    starts = [loc[0] for loc in info["array-location"]]
    # (a Python number takes data's type, as in the numpy path)
    others = [np.asarray(v, None if isinstance(v, np.ndarray) else x.dtype)
              for v in (scale, shift) if v is not None]  # fmt: skip

    def run(part, offset, sc, sh=None):
        with _args.index_offset(offset):
            return public(part, sc, sh, dest, **kwargs)

    return by_runs(run, x, info["shape"], starts, others)


def _fake_convert(da, public, args, kwargs):
    data, scale, shift, dest = args
    if not type(data).__module__.startswith("dask."):
        data = da.from_array(np.asarray(data), chunks=-1)
    stochastic, kwargs = _fixed_seed("fake_convert", kwargs)
    nd = data.ndim
    operands, consts, sample_ops = [], [None, None, shift is None], []
    for i, v in enumerate((scale, shift)):
        if v is None:
            sample_ops.append(None)
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            consts[i] = v
            sample_ops.append(v)
            continue
        arr = v if type(v).__module__.startswith("dask.") else np.asarray(v)
        try:
            ok = arr.ndim <= nd and np.broadcast_shapes(arr.shape, data.shape) == data.shape
        except ValueError:
            ok = False
        if not ok:
            argname = ("scale", "shift")[i]
            raise ValueError(
                f"fake_convert: {argname} of shape {arr.shape} does not broadcast to data's "
                f"{data.shape}"
            )
        shape = (1,) * (nd - arr.ndim) + tuple(arr.shape)
        chunks = tuple(
            data.chunks[ax] if shape[ax] == data.shape[ax] and shape[ax] != 1 else (shape[ax],)
            for ax in range(nd)
        )
        if isinstance(arr, np.ndarray):
            arr = da.from_array(arr.reshape(shape), chunks=chunks)
        else:
            arr = arr.reshape(shape).rechunk(chunks)
        operands.append(arr)
        small = math.prod(shape) <= _SAMPLE_MAX
        sample_ops.append(np.ones(shape if small else (1,) * nd, arr.dtype))
    shapes = [o.shape for o in sample_ops if isinstance(o, np.ndarray)]
    sample_shape = np.broadcast_shapes((1,) * nd, *shapes)
    # checks every argument now (dtypes, destination, mode, rounding)
    public(np.ones(sample_shape, data.dtype), sample_ops[0], sample_ops[1], dest, **kwargs)
    fn = functools.partial(_fake_block, public, dest, kwargs, stochastic, tuple(consts))
    return da.map_blocks(
        fn, data, *operands, dtype=data.dtype, meta=np.empty((0,) * nd, data.dtype)
    )


# ------------------------------------------------------------------------------- packing
def _bits(public, fmt, dtype) -> int:
    """Bits per code of pack's ``fmt`` (checked by a sample call)."""
    two = public(np.zeros(4, dtype), fmt)
    return 4 if two.size == 2 else 6


def _aligned_chunks(chunks: tuple[int, ...], group: int) -> tuple[int, ...]:
    """Chunk sizes whose boundaries are multiples of ``group`` (but the end)."""
    total, bounds, pos = sum(chunks), [], 0
    for c in chunks[:-1]:
        pos += c
        b = pos - pos % group
        if b > (bounds[-1] if bounds else 0):
            bounds.append(b)
    edges = [0] + bounds + [total]
    return tuple(b - a for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a) or (0,)


def _pack(da, public, codes, fmt):
    bits = _bits(public, fmt, codes.dtype)
    group = 8 // math.gcd(8, bits)  # codes per whole number of bytes
    flat = codes.reshape(-1) if codes.ndim != 1 else codes
    flat = flat.rechunk((_aligned_chunks(flat.chunks[0], group),))
    out_chunks = tuple(math.ceil(c * bits / 8) for c in flat.chunks[0])
    return da.map_blocks(
        lambda b: public(b, fmt), flat, chunks=(out_chunks,), dtype=np.uint8,
        meta=np.empty((0,), np.uint8),
    )  # fmt: skip


def _unpack_block(public, fmt, bits, n, b, block_info=None):
    start = block_info[0]["array-location"][0][0]  # first byte of the block
    first = start * 8 // bits
    count = max(0, min(b.size * 8 // bits, n - first))
    return public(b, fmt, count)


def _unpack(da, public, packed, fmt, shape):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    n = math.prod(shape)
    if packed.dtype != np.uint8:
        public(np.zeros(1, packed.dtype), fmt, 0)  # the numpy path's TypeError
    sample = public(np.zeros(3, np.uint8), fmt, 4)
    bits = 4 if _is4(public, fmt) else 6
    need = math.ceil(n * bits / 8)
    flat = packed.reshape(-1) if packed.ndim != 1 else packed
    if flat.shape[0] < need:
        public(np.zeros(flat.shape[0], np.uint8), fmt, shape)  # the numpy path's ValueError
    flat = flat[:need]
    group = bits // math.gcd(8, bits)  # bytes per whole number of codes
    flat = flat.rechunk((_aligned_chunks(flat.chunks[0], group),))
    counts, pos = [], 0
    for c in flat.chunks[0]:
        k = max(0, min(c * 8 // bits, n - pos))
        counts.append(k)
        pos += k
    fn = functools.partial(_unpack_block, public, fmt, bits, n)
    res = da.map_blocks(
        fn, flat, chunks=(tuple(counts),), dtype=sample.dtype, meta=np.empty((0,), sample.dtype)
    )
    return res.reshape(shape)


def _is4(public, fmt) -> bool:
    """Whether unpack's ``fmt`` has 4-bit codes (two fit in a byte)."""
    try:
        public(np.zeros(1, np.uint8), fmt, 2)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------------- Ctrl-C
def ignore_sigint() -> None:
    """A worker process's initializer: Ctrl-C is for the parent to handle (a terminal sends
    it to the whole process group, and each worker would print its own traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _QuietProcessPool(ProcessPoolExecutor):
    """A process pool whose workers ignore SIGINT from birth: each is started while the
    parent ignores it, and a disposition of "ignore" survives the exec of a spawned
    interpreter (Python keeps it), so no Ctrl-C can land in a worker's start-up, before an
    initializer could run.  (``_spawn_process`` is CPython's hook, 3.9 and later; the
    initializer covers an interpreter without it.)"""

    def _spawn_process(self):
        if threading.current_thread() is not threading.main_thread():
            return super()._spawn_process()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return super()._spawn_process()
        finally:
            signal.signal(signal.SIGINT, previous)


class _ContextThreadPool(ThreadPoolExecutor):
    """Threads that run each task in a copy of the submitter's context (fp8kit's thread
    count is a context variable), as Dask's own threaded pool does."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


#: Name prefix of the threads of :func:`interruptible`'s thread pool.
THREAD_PREFIX = "fp8kit-dask"


def busy_threads() -> list[threading.Thread]:
    """The threads of :func:`interruptible`'s pools still running a task after the block
    was left by an exception (a thread cannot be stopped: a command may exit instead)."""
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]


def _stop(pool: Executor) -> None:
    """Cancel the tasks not started; terminate worker processes; let idle threads end
    (a thread running a task runs on: see :func:`busy_threads`)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    threads = list(getattr(pool, "_threads", ()))
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        with contextlib.suppress(Exception):
            p.terminate()
    for p in processes:
        with contextlib.suppress(Exception):
            p.join(5)
    for t in threads:  # (idle ones end at once; a busy one is left)
        t.join(0.05)


@contextlib.contextmanager
def interruptible(scheduler, workers: int | None = None) -> Iterator[None]:
    """Run Dask's ``threads`` or ``processes`` scheduler, inside the block, on a pool of
    ``workers`` (default: Dask's CPU count) made here: worker processes ignore Ctrl-C,
    and when the block ends by an exception (KeyboardInterrupt) the tasks not started are
    cancelled and the worker processes terminated before it propagates.  Any other
    scheduler (``sync``, a ``dask.distributed`` address or Client, None) runs unchanged.

    Examples
    --------
    >>> import dask
    >>> from fp8kit._dask import interruptible
    >>> with interruptible("threads", workers=2):
    ...     dask.compute(dask.delayed(sum)([1, 2]), scheduler="threads")
    (3,)
    """
    if scheduler not in ("threads", "processes"):
        yield
        return
    import dask
    from dask.system import CPU_COUNT

    n = workers or dask.config.get("num_workers", None) or CPU_COUNT
    if scheduler == "processes":
        from dask.multiprocessing import get_context, initialize_worker_process

        if os.environ.get("PYTHONHASHSEED") in (None, "0"):
            # (as Dask's own process pool: the same hashing in every worker)
            os.environ["PYTHONHASHSEED"] = "6640"
        init = functools.partial(initialize_worker_process, user_initializer=ignore_sigint)
        pool: Executor = _QuietProcessPool(n, mp_context=get_context(), initializer=init)
    else:
        pool = _ContextThreadPool(n, thread_name_prefix=THREAD_PREFIX)
    # (chunksize 1: Dask's process scheduler sends tasks in batches of 6 by default; a
    # study's task is a whole tensor, so a batch held back progress and load balance)
    try:
        with dask.config.set(pool=pool, num_workers=n, chunksize=1):
            yield
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)
