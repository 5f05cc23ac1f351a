"""Kernel factories for encode, decode and round-to-format.

Every kernel works on 1-D contiguous arrays with the signature
``kernel(x, lut, table, out, nchunks)``: a ``prange`` over ``nchunks`` contiguous chunks, each
a vectorized serial loop.  ``nchunks=1`` keeps a call on the calling thread (small arrays);
:mod:`fp8kit._parallel` picks the count.  Kernels are compiled for exactly one signature on
first use, cached on disk, and close over plain numbers only (never over other dispatchers),
so that Numba's disk cache can key them by those numbers.

The chunk loop indexes a slice from 0 (``for j in range(chunk.size)``): indexing the whole
array from ``lo`` makes Numba emit negative-index wraparound checks, which stop LLVM from
vectorizing (measured 3x slower).
"""

from __future__ import annotations

import contextlib
import functools
import os
import types as pytypes
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from numba import from_dtype, njit, types

from ..formats import FloatFormat, get_format
from .bits import (
    LOAD_BF16,
    LOAD_DIRECT,
    LOAD_LUT,
    PARAMS_LAYOUT,
    block_end,
    block_items,
    byte_address,
    cast_like,
    chunk,
    chunk_range,
    chunks,
    encode_fast,
    encode_generic,
    encode_lean,
    encode_unsigned,
    load_bits,
    load_o,
    load_p,
    load_q,
    load_qu,
    load_sp,
    plane_lookup,
    prefer_512,
    span,
    stack_buffer,
    store_fence,
    stream_block,
)
from .flatten import FlattenError, flatten
from .native import (
    NumbaKernel,
    _NativeBase,
    function_key,
    guard_numba_cache,
    native_count,
    numba_route,
)
from .registry import BUILD_LOCK, source_version
from .rounding import _LO as _LO32
from .rounding import (
    _S32,
    CLASSIC_MODES,
    KIND_DET,
    KIND_SR,
    KIND_VAR,
    MODES,
    STOCHASTIC,
    TOWARD_POSITIVE,
    TOWARD_ZERO,
    K,
    encode_mode_kind,
    encode_stochastic_fast,
    encode_unsigned_mode,
    fill_block,
    flush_code,
    mode_kind,
    mode_masks,
    parts,
    philox4x32_10,
    word_part,
)

# Source float layouts the kernels round from: (bits, mantissa bits, exponent bits, bias).
_SOURCES = {
    "float32": (32, 23, 8, 127),
    "float64": (64, 52, 11, 1023),
    # (the words of bfloat16 data themselves: formats of at most 6 mantissa bits round
    # them as they round the float32 bits they widen to, on 16-bit lanes; see
    # fp8kit._kernels.lean)
    "bfloat16": (16, 7, 8, 127),
    # (the words of float16 data themselves, for the unsigned formula alone: its code is
    # the rebiased exponent, float16's 5-bit field plus 112, a wrapping subtraction of the
    # negative rebias; float16's subnormals are widened: see fp8kit._kernels.lean)
    "float16": (16, 10, 5, 15),
}
#: The unsigned integer and the float type of each source layout's words.
_WORDS = {
    "float32": (np.uint32, np.float32),
    "float64": (np.uint64, np.float64),
    "bfloat16": (np.uint16, ml_dtypes.bfloat16),
    "float16": (np.uint16, np.float16),
}

# How a kernel loads one input element before rounding it.

_CODE_DTYPES = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16)}
_BITS_DTYPE = {
    np.dtype(np.float64): np.dtype(np.uint64),
    np.dtype(np.float32): np.dtype(np.uint32),
    np.dtype(np.float16): np.dtype(np.uint16),
    np.dtype(ml_dtypes.bfloat16): np.dtype(np.uint16),
}
#: Output/input float dtypes the codec handles, and the unsigned dtype of their bits.
FLOAT_DTYPES = tuple(_BITS_DTYPE)


def bits_dtype(dtype: np.dtype) -> np.dtype:
    """The unsigned integer dtype with the same width as a float dtype."""
    return _BITS_DTYPE[np.dtype(dtype)]


@dataclass(frozen=True)
class Plan:
    """How to round data of one input dtype to one format."""

    source: str  # "float32" or "float64": the layout the kernel rounds from
    load: int  # LOAD_* constant
    widen_first: bool  # the API must convert the input to float64 before the kernel
    strategy: str  # "fast" or "generic"


def _src_limits(source: str) -> tuple[int, int]:
    _, _, ebits, bias = _SOURCES[source]
    return 1 - bias, (1 << ebits) - 2 - bias


def _strategy(fmt: FloatFormat, source: str) -> str | None:
    """Which rounding algorithm is exact for fmt on this source, or None if it does not fit."""
    src_emin, src_emax = _src_limits(source)
    if fmt.minexp < src_emin or fmt.maxexp - 1 > src_emax:
        return None
    # The FPU trick sees source subnormals; only use it when they all round to zero in fmt,
    # so that a flush-to-zero/denormals-are-zero mode cannot change a result.
    if fmt.minexp == src_emin or fmt.minexp - fmt.mantissa_bits - 1 >= src_emin:
        return "fast"
    return "generic"


#: The load step of each input dtype rounded from float32 bits.
_LOADS = {
    np.dtype(np.float32): LOAD_DIRECT,
    np.dtype(ml_dtypes.bfloat16): LOAD_BF16,
    np.dtype(np.float16): LOAD_LUT,
}


@functools.cache
def plan(fmt: FloatFormat, in_dtype: np.dtype) -> Plan:
    """Choose source layout, load step and algorithm for rounding ``in_dtype`` data to fmt."""
    in_dtype = np.dtype(in_dtype)
    if fmt.specials == "unsigned":
        # Powers of two only: one rule on the exponent field; float32 holds every value of
        # formats with bias <= 127 (2**-127 is a float32 subnormal, handled apart).
        if in_dtype != np.float64 and fmt.bias <= 127 and fmt.maxexp <= 128:
            return Plan("float32", _LOADS[in_dtype], False, "unsigned")
        return Plan("float64", LOAD_DIRECT, in_dtype != np.float64, "unsigned")
    if in_dtype == np.float64:
        return Plan("float64", LOAD_DIRECT, False, _strategy_f64(fmt))
    if _strategy(fmt, "float32") == "fast" and not _odd_parity(fmt, "float32"):
        return Plan("float32", _LOADS[in_dtype], False, "fast")
    return Plan("float64", LOAD_DIRECT, True, _strategy_f64(fmt))


def codes16_kind(fmt: FloatFormat) -> int:
    """1 for bfloat16, 2 for float16 (the registered formats, whose codes are their
    dtypes' bits: kernels widen them to values instead of looking them up), else 0."""
    return {get_format("bfloat16"): 1, get_format("float16"): 2}.get(fmt, 0)


def mode_plan(fmt: FloatFormat, in_dtype: np.dtype, mode: int) -> Plan:
    """:func:`plan` for the rounding ``mode``: in the modes whose result never depends on
    the parity of a tie's neighbouring codes (stochastic and its variants, whose first
    rounding's ties go by the fraction's parity; toward zero, up or down; nearest with ties
    away or toward zero), P3109's precision-1 formats, which nearest-even and to_odd
    widen to float64 for that parity (:func:`_odd_parity`), round from float32 bits by the
    fast path's formula."""
    pl = plan(fmt, in_dtype)
    if (
        mode in _TIE_FREE and pl.widen_first and fmt.specials != "unsigned"
        and _odd_parity(fmt, "float32") and _strategy(fmt, "float32") == "fast"
    ):  # fmt: skip
        return Plan("float32", _LOADS[np.dtype(in_dtype)], False, "fast")
    return pl


def _odd_parity(fmt: FloatFormat, source: str) -> bool:
    """Whether nearest-even on the source's bits would pick the wrong neighbour at a tie:
    with no mantissa bits (P3109's precision 1) the kept lowest bit is the source's exponent
    bit, and the code's parity differs from it when the two biases differ by an odd number
    (gfloat and the draft: ties go to the even *code*).  The generic path rounds by the
    code's parity; the fast path does not."""
    return fmt.mantissa_bits == 0 and (_SOURCES[source][3] - fmt.bias) % 2 == 1


def _strategy_f64(fmt: FloatFormat) -> str:
    if _odd_parity(fmt, "float64"):
        return "generic"
    return _strategy(fmt, "float64") or "generic"


#: Rounding modes whose result never depends on the parity of a tie's neighbouring codes.
_TIE_FREE = frozenset(MODES[name] for name in (
    "stochastic", "stochastic_c", "stochastic_b", "stochastic_odd", "stochastic_half",
    "toward_zero", "toward_positive", "toward_negative", "nearest_away", "nearest_zero",
))  # fmt: skip

#: Rounding modes (numbers of fp8kit._kernels.rounding) that round a negative value toward
#: zero or up: into an unsigned format they give 0 (pychop's rule for P3109), not NaN.
_INWARD_MODES = (TOWARD_ZERO, TOWARD_POSITIVE)


def _params(fmt: FloatFormat, source: str, saturate: bool, mode: int | None = None):
    """The kernels' constants for rounding ``source`` bits to ``fmt`` (tuples p and q);
    ``mode``: the rounding mode's number, which only unsigned P3109 formats look at."""
    width, src_m, src_e, src_bias = _SOURCES[source]
    u, f = _WORDS[source]
    wmask = (1 << width) - 1
    m = fmt.mantissa_bits
    sh = src_m - m
    rebias = src_bias - fmt.bias
    src_emin, _ = _src_limits(source)
    use_magic = fmt.minexp != src_emin
    magic = f(2.0 ** (fmt.minexp - m + src_m))
    max_mag = fmt.max_code
    nan_mag = fmt.nan_code
    inf_mag = fmt.inf_code if fmt.has_inf else nan_mag
    if not fmt.has_nan:
        # No Inf, no NaN: overflow and Inf saturate whatever the flag says, and NaN gives
        # zero with the opposite sign (the sign bit as "magnitude", xor-ed with the sign):
        # what ml_dtypes (and so the ONNX reference) does for float6/float4.
        nan_mag = fmt.sign_mask
        inf_mag = max_mag
        saturate = True
    if saturate:
        ovf = max_mag
        # ONNX Cast-21, saturate=True: "+/- Inf -> +/- FLT_MAX" for E4M3FN and E5M2, but
        # "NaN" for the fnuz formats.  P3109's signed finite formats ("signed_finite", the
        # codes of fnuz) follow P3109's SatFinite, as gfloat does: +-max.
        inf_res = nan_mag if fmt.specials == "fnuz" else max_mag
        if fmt.specials == "finite":
            inf_res = max_mag
        if saturate == "propagate" and fmt.has_inf:  # P3109's SatPropagate
            inf_res = inf_mag
    else:
        ovf = inf_res = inf_mag
    # What a negative value's magnitude code gets or-ed with (see bits._finish_with): the
    # sign bit; for unsigned P3109 formats the NaN code (all ones), or 0 (and the result is
    # 0) when saturating or rounding toward zero or +Inf, as pychop does (gfloat leaves
    # negative input to unsigned formats undefined); -Inf, not saturating, is NaN in every
    # mode (bits._finish_with).
    sign_or = 1 << (fmt.bits - 1)
    if fmt.specials in ("unsigned_extended", "unsigned_finite"):
        sign_or = 0 if (saturate or mode in _INWARD_MODES) else nan_mag
    p = (
        u((1 << (width - 1)) - 1),  # abs_mask
        u(1),  # one
        u(sh),
        u(((1 << (sh - 1)) - 1 - (rebias << src_m)) & wmask),  # rb: rounding bias and rebias
        u((((fmt.minexp + src_bias) << src_m) if use_magic else 0) & wmask),  # min_normal
        magic,
        u(int(np.array(magic).view(u))),  # magic_bits
        bool(use_magic),
        u(((1 << src_e) - 1) << src_m),  # src_inf
        u(max_mag),
        u(ovf),
        u(inf_res),
        u(nan_mag),
        u(sign_or << (width - fmt.bits)),  # sign_bit (see sign_or)
        u(width - fmt.bits),  # sign_shift
        bool(fmt.has_negative_zero),
        u(0),  # zero
    )
    q = (
        u(src_m),
        u((1 << src_m) - 1),
        u(1 << src_m),
        u((fmt.minexp + src_bias) & wmask),  # biased source exponent of fmt's smallest normal
        u(src_m + 2),  # larger shifts all give zero
        u(m),
        u(sh),
    )
    if fmt.specials == "unsigned":
        rebias = src_bias - fmt.bias
        q = (
            u((1 << (width - 1)) - 1),  # abs_mask
            u(1),
            u(src_m),
            u(1 << (src_m - 1)),  # half: ties round up (away from zero), as ml_dtypes does
            u(rebias & wmask),  # (float16's layout: negative, wrapped; see encode_unsigned_mode)
            u(((1 << src_e) - 1) << src_m),  # src_inf
            u(fmt.max_code),
            u(fmt.max_code if saturate else nan_mag),  # finite overflow
            u(fmt.max_code if saturate else nan_mag),  # +Inf
            u(nan_mag),
            # Below 2**(1 - bias), ml_dtypes rounds as if code 0 were a subnormal of
            # quantum 2**(1 - bias): anything above 2**-bias gives code 1.
            u(int(np.array(2.0 ** (1 - fmt.bias), f).view(u))),
            u(int(np.array(2.0**-fmt.bias, f).view(u))),
        )
    return p, q


@functools.cache
def _array(dtype, readonly=False):
    return types.Array(from_dtype(np.dtype(dtype)), 1, "C", readonly=readonly)


def _signature(in_bits, lut_dtype, table_dtype, out_dtype):
    return types.void(
        _array(in_bits, readonly=True),
        _array(lut_dtype, readonly=True),
        _array(table_dtype, readonly=True),
        _array(out_dtype),
        types.intp,
    )


# (no_cfunc_wrapper: kernels are called through their dispatchers only; the C wrapper Numba
# builds for first-class function use cost 5-10 ms of each kernel's cold compile)
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False, no_cfunc_wrapper=True)


@functools.cache
def f16_lut() -> np.ndarray:
    """float16 bits -> float32 bits, exact (float16 widens to float32 without rounding)."""
    lut = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    lut.flags.writeable = False
    return lut.view(np.uint32)


_DUMMY = {}


def dummy(dtype) -> np.ndarray:
    """A one-element read-only array standing in for an unused kernel argument."""
    dtype = np.dtype(dtype)
    if dtype not in _DUMMY:
        a = np.zeros(1, dtype)
        a.flags.writeable = False
        _DUMMY[dtype] = a
    return _DUMMY[dtype]


#: Compile kernels flattened (see :mod:`fp8kit._kernels.flatten`); tests switch it off to
#: compare with the helper-built kernels.
_FLATTEN = True
#: Kernels whose flattening failed, (qualified name, reason): compiled helper-built.
FLATTEN_FALLBACKS: list = []
_BUILT: dict = {}  # compiled functions shared by kernels of equal keys
_BUILD_LOCK = BUILD_LOCK


class _XO:
    """A compiled kernel of signature ``(x, out, nchunks)`` called as the others are, with
    ``(x, lut, table, out, nchunks)`` (see :class:`XOKernel`)."""

    __slots__ = ("func",)

    def __init__(self, func):
        self.func = func

    def __call__(self, x, lut, table, out, nchunks):
        return self.func(x, out, nchunks)

    @property
    def stats(self):
        return self.func.stats


class _Bound(functools.partial):
    """A compiled kernel with its leading parameter array bound (a C-level partial: no
    Python frame per call)."""

    @property
    def stats(self):
        return self.func.stats


@contextlib.contextmanager
def _cache_lock(disp):
    """An exclusive lock, across processes, on the Numba cache directory of ``disp``, held
    while its kernel is loaded or compiled and saved.  Numba reads a function's cache index,
    adds an entry and writes it back without a lock: two processes saving different
    specializations of one kernel function at once (the kernels of two rounding modes, say,
    as pytest-xdist's workers or Dask's do) can both take the same data file name, and the
    index then maps one key to the other's machine code; a later process loads the wrong
    kernel (found: toward_zero's codes for toward_positive, from a cache two test workers
    had filled).  Where no lock can be taken (no ``fcntl``, a read-only cache), none is."""
    fd = None
    try:
        import fcntl

        path = os.path.join(disp._cache._cache_path, "fp8kit-index.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except (ImportError, AttributeError, OSError):
        if fd is not None:
            os.close(fd)
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # (closing releases the lock)


class Kernel:
    """One kernel function, compiled (serially: see :func:`fp8kit._parallel.launch` for
    threads) for exactly one signature on first use and cached on disk.

    ``key``: kernels with equal keys share one compiled function, so the key must name
    everything ``make``'s function closes over.  ``params``: an array bound as the
    function's first argument (a format's constants, read at run time), so that one
    compiled function serves every format: callers pass the arguments after it.
    """

    #: Whether the kernel reads neither its lut nor its table, so that small calls may
    #: pass x and out alone (:func:`fp8kit._kernels.native.xo_call`).
    xo = False
    #: Pairs of argument indices (of the signature) whose lengths the entry checks equal;
    #: None: x and out for the codec signature ``(x, lut, table, out, nchunks)``.
    sizes: tuple | None = None
    # No kernel allocates (scratch space is a stack buffer): without NRT, Numba emits no
    # reference counting of array views (and its pruning pass has nothing to do).
    _options: dict = {"_nrt": False}
    #: Whether a round-to kernel's table argument is the table's byte planes
    #: (:func:`fp8kit._kernels.bits.table_planes`) instead of the table.
    planes = False
    #: Whether Numba's function passes (and its cheap pipeline) run before the full
    #: module pipeline on the native route (see
    #: :func:`fp8kit._kernels.native._compile_in_one_library`); False for kernels
    #: measured as fast without them (the stochastic, amax, lean and unsigned kernels).
    function_passes = True

    def __init__(self, make, sig, key=None, params=None):
        self._make = make
        self._sig = sig
        self._key = key
        self._params = params
        self._built = None

    def _compile(self, func=None, cache=True):
        func = self._make(False) if func is None else func
        opts = {**_JIT, **self._options, "cache": cache}
        try:
            disp = njit(**opts)(func)
        except RuntimeError as exc:  # no writable cache location (read-only install)
            if "cannot cache" not in str(exc):
                raise
            disp = njit(**{**opts, "cache": False})(func)
        else:
            disp = guard_numba_cache(disp) if cache else disp
        with _cache_lock(disp) if cache else contextlib.nullcontext():
            if _FLATTEN:
                _compile_flattened(disp, func)
            disp.compile(self._sig)
        disp.disable_compile()
        return disp

    def _native(self, ahead=False):
        """The kernel as native code from fp8kit's cache (:class:`fp8kit._kernels.native.
        NumbaKernel`), or None where that route is not available here; ``ahead``: started
        only (see :meth:`prefetch`)."""
        if not _JIT["cache"] or not numba_route():  # (tests: compiled anew, see conftest)
            return None
        if not all(
            isinstance(t, types.Integer)
            or (isinstance(t, types.Array) and t.ndim == 1 and t.layout == "C")
            for t in self._sig.args
        ):  # (the checked entry passes 1-D arrays and ints: others keep the dispatcher)
            return None
        func = self._make(False)
        key = (func.__name__, function_key(func), type(self).__name__, self._key)
        # (codec kernels (x, lut, table, out, nchunks) write out element by element of x)
        bound = self._params is not None  # (sizes: indices of the signature's arguments)
        sizes = self.sizes
        if sizes is None:
            sizes = ((0 + bound, 3 + bound),) if len(self._sig.args) == 5 + bound else ()

        def compile_kernel(suffix):
            # (the function to compile, flattened, and its options as an uncompiled
            # dispatcher; a name of its own: see fp8kit._kernels.native._compile_numba)
            flat = _flat(func) if _FLATTEN else func
            flat.__qualname__ = f"{func.__qualname__}_{suffix}"
            return flat, njit(**{**_JIT, **self._options, "cache": False})(flat)

        kernel = NumbaKernel(key, compile_kernel, self._sig, self._params, sizes,
                             self.function_passes)  # fmt: skip
        kernel.xo = self.xo  # (it reads neither lut nor table: see native.xo_call)
        if ahead:
            kernel.prefetch()
            return None
        return kernel.build()

    def prefetch(self) -> None:
        """Start compiling the kernel now, where it is not built: its typing and lowering
        here, its machine code on LLVM's worker thread, so that a call about to compile
        another kernel first (an amax pass before the quantize-and-measure pass) does so
        while this one's machine code is generated (see
        :func:`fp8kit._kernels.native._address`).  Its first :meth:`build` waits for it."""
        if self._built is None:
            with _BUILD_LOCK:
                self._native(ahead=True)

    def build(self, parallel: bool = False):
        """The compiled function (``parallel`` is ignored: one build serves both)."""
        if self._built is None:
            with _BUILD_LOCK:
                built = self._native()
                if built is not None:
                    self._built = built
                    return built
                if self._key is None:
                    disp = self._compile()
                else:
                    key = (type(self).__name__, self._key)
                    if key not in _BUILT:
                        _BUILT[key] = self._compile()
                    disp = _BUILT[key]
            self._built = disp if self._params is None else _Bound(disp, self._params)
        return self._built

    def serial(self, x, lut, table, out) -> None:
        self.build()(x, lut, table, out, 1)


class NumbaNative(Kernel, _NativeBase):
    """A Numba kernel (:class:`Kernel`) that counts as native
    (:func:`fp8kit._kernels.native.is_native`): where the checked entry exists it runs as
    object code from fp8kit's cache, without Numba's set-up, as the IR kernels it replaced
    did, so callers choose it as they chose those."""


class XOKernel(Kernel):
    """A kernel whose compiled function takes only ``(x, out, nchunks)``: no parameter,
    lut or table arrays.  Numba's entry point unboxes each array argument (~0.03 us each,
    measured on an empty function), which counts on 1,000-element calls (bfloat16 <->
    float32).  ``build()`` returns it wrapped to take the arguments of every other kernel;
    the small-call fast path calls its entry point with x and out alone and ``nchunks =
    ~limit`` (negative; ``limit``: the threading threshold): the kernel then checks sizes,
    layout, alignment and overlap itself (see :func:`refuse_small_call`) and returns 1,
    having written nothing, where the full path must run instead."""

    def build(self, parallel: bool = False):
        built = self._built
        if type(built) is not _XO:
            built = self._built = _XO(super().build(parallel))
        return built


@njit(inline="always")
def refuse_small_call(x, out, limit):
    """Whether an :class:`XOKernel` called by the small-call fast path must leave the call
    to the full path: x has ``limit`` elements or more (the threading threshold), out has
    another size, either is not contiguous or not aligned (Numba's entry point unboxes any
    1-D array as C-contiguous; its strides are still those of the array), or they overlap.
    In the kernel, these checks cost a few ns; in Python ~0.15 us of a 1,000-element call."""
    n = x.size
    xs, os = x.itemsize, out.itemsize
    # (the addresses as intp, as the sizes: a signed and unsigned mix types as float64)
    xa, oa = cast_like(byte_address(x, 0), n), cast_like(byte_address(out, 0), n)
    # (bitwise, not `or`/`and`/`%`: fewer blocks and branches to compile cold)
    bad = (n >= limit) | (out.size != n) | (((xa & (xs - 1)) | (oa & (os - 1))) != 0)
    bad = bad | ((n > 1) & ((x.strides[0] != xs) | (out.strides[0] != os)))
    return bad | ((xa < oa + n * os) & (oa < xa + n * xs))


@njit(inline="always")
def xo_chunks(x, out, nchunks):
    """``(first chunk, stop chunk, step)`` of an :class:`XOKernel`'s call; stop is -1 where
    the small-call fast path (``nchunks < 0``) must leave the call to the full path (see
    :func:`refuse_small_call`); the kernel then returns 1, having written nothing."""
    if nchunks < 0:
        if refuse_small_call(x, out, ~nchunks):
            return 0, -1, 0
        nchunks = 1
    n, c_first, c_stop = chunk_range(nchunks)
    return c_first, c_stop, (x.size + n - 1) // n


def _compile_flattened(disp, func) -> None:
    """Make ``disp`` compile :func:`fp8kit._kernels.flatten.flatten` of ``func`` instead of
    ``func`` itself, only when its disk cache misses.

    The cache still keys the machine code by ``func`` (its bytecode and closure values):
    the flattened source is a function of exactly those and of the kernel sources, whose
    hash every kernel closes over (:func:`source_version`), so the key stays correct, and
    a warm cache loads without flattening anything (~5-50 ms a kernel)."""
    compiler = getattr(disp, "_compiler", None)
    if getattr(compiler, "py_func", None) is not func or not hasattr(compiler, "compile"):
        return  # pragma: no cover - other Numba internals: the helper-built kernel
    plain = compiler.compile

    def compile_flat(args, return_type):
        compiler.py_func = _flat(func)
        try:
            return plain(args, return_type)
        finally:
            compiler.py_func = func

    compiler.compile = compile_flat


def _flat(func):
    """:func:`fp8kit._kernels.flatten.flatten` of ``func`` under its qualified name, or
    ``func`` itself where the flattener does not take it (no source file, or a construct
    it does not know: the helper-built kernel, same bits)."""
    try:
        flat = flatten(func)
    except (OSError, TypeError, ValueError, FlattenError) as exc:
        FLATTEN_FALLBACKS.append((func.__qualname__, repr(exc)))
        return func
    flat.__qualname__ = func.__qualname__
    return flat


def compiled_count() -> int:
    """How many kernel functions this process has built (or loaded from the disk cache)
    through shared keys, native ones too: the compile budget test counts them."""
    return len(_BUILT) + native_count()


def with_globals(kernel, consts, **helpers):
    """``kernel`` with per-kernel Numba helpers visible as its globals, not closure cells.

    Numba's disk cache keys a kernel by its bytecode and the pickled values of its closure
    cells; a dispatcher in a cell pickles with a random id, so such a kernel would get a new
    key, and compile again, in every process.  ``kernel`` names each helper as a global
    (so the name must not be bound in an enclosing function), and its closure must hold
    ``consts``, everything the helpers depend on, so that the key still tells kernels apart.
    """
    assert any(c.cell_contents is consts for c in kernel.__closure__ or ())
    scope = {**kernel.__globals__, **helpers}
    func = pytypes.FunctionType(
        kernel.__code__, scope, kernel.__name__, kernel.__defaults__, kernel.__closure__
    )
    func.__qualname__ = kernel.__qualname__
    func.__module__ = kernel.__module__
    return func


# Layout of a kernel's parameter array: see bits.PARAMS_LAYOUT
_P, _Q, _O, _SP, _MODE, _LP, _NPARAMS = PARAMS_LAYOUT
#: Round with :func:`fp8kit._kernels.bits.encode_lean` where it applies; tests switch it
#: off to compare with :func:`fp8kit._kernels.bits.encode_fast`.
USE_LEAN = True


def lean_params(fmt: FloatFormat, source: str, p, clear: bool = False) -> tuple | None:
    """``(nan_thr, neg_thr)`` of :func:`fp8kit._kernels.bits.encode_lean` for the constants
    ``p`` of :func:`_params` (nearest-even), or None where it would differ from
    :func:`fp8kit._kernels.bits.encode_fast`: it needs the rounded code of Inf (so of every
    NaN) at or above ``ovf``, Inf's result ``ovf`` or the NaN code (one select then takes
    NaN, and Inf with it), and without -0 the NaN code unchanged by the sign's or.
    ``neg_thr``: the source bits of the negative numbers that round to a code other than 0
    are those above it.  ``clear``: the caller gives negative numbers code 0 where the
    sign's or is 0 (the unsigned P3109 formats, saturating); without it, None there."""
    width, src_m, _, _ = _SOURCES[source]
    u = type(p[1])
    sh, rb, src_inf = int(p[2]), int(p[3]), int(p[8])
    ovf, inf_res, nan_mag = int(p[10]), int(p[11]), int(p[12])
    s = int(p[13]) >> int(p[14])
    wrap = (1 << width) - 1
    code_inf = ((src_inf + rb + ((src_inf >> sh) & 1)) & wrap) >> sh
    # (the largest NaN's sum not wrapped around: every NaN's code is then at least Inf's)
    if code_inf < ovf or ((wrap >> 1) + rb + 1) & wrap < (src_inf + rb) & wrap:
        return None
    if inf_res == ovf:
        nan_thr = src_inf
    elif inf_res == nan_mag:
        nan_thr = src_inf - 1
    else:
        return None
    if not fmt.has_negative_zero and (s == 0 and not clear or nan_mag | s != nan_mag):
        return None
    # the largest magnitude rounding to code 0: half the smallest subnormal (the tie goes
    # to the even code 0), in the FPU's rounding (bits.encode_fast's magic path) or, where
    # the source has the format's smallest normal (and bias), in the integer one
    if p[7]:
        zero_max = int(np.array(2.0 ** (fmt.minexp - fmt.mantissa_bits - 1), _WORDS[source][1])
                       .view(u))  # fmt: skip
    elif (rb + 1) & wrap == 1 << (sh - 1):  # (no rebias: always so without the magic)
        zero_max = 1 << (sh - 1)
    else:  # pragma: no cover
        return None
    return u(nan_thr), u((1 << (width - 1)) | zero_max)


def pack_params(p, q, o=None, sp=None, mode: int = 0, lean=None) -> np.ndarray:
    """The read-only parameter array of :func:`load_p` and friends."""
    u = type(p[1])
    width = np.dtype(u).itemsize * 8

    def word(v):
        if isinstance(v, (bool, np.bool_)):
            return int(v)
        if isinstance(v, np.floating):
            return int(np.array(v).view(f"u{v.itemsize}"))
        return int(v)

    # bits._finish_with relies on every overflow code being max_mag or max_mag + 1
    max_mag = int(p[9])
    assert all(int(v) in (max_mag, max_mag + 1) for v in (p[10], *(o or ()))), (p, o)
    prm = np.zeros(_NPARAMS, u)
    prm[_P : _P + len(p)] = [word(v) for v in p]
    prm[_Q : _Q + len(q)] = [word(v) for v in q]
    if o is not None:
        prm[_O : _O + 2] = [word(v) for v in o]
    if sp is not None and len(sp) == 5:
        prm[_SP : _SP + 5] = [word(v) for v in sp]
    prm[_MODE] = mode
    if lean is not None:
        prm[_LP : _LP + 2] = [word(v) for v in lean]
    assert width in (32, 64)
    prm.flags.writeable = False
    return prm


#: Elements per block of a round-to-format kernel's code buffer (stays in L1).
_LOOKUP_BLOCK = 2048
#: Elements per block of an encode kernel's buffer for non-temporal stores (16M float32 ->
#: e4m3fn, 1 thread: 512 measured 3% faster than 2048, 8192 slower than plain stores).
_STREAM_BLOCK = 512
#: Bytes read and written from which an encode kernel writes with non-temporal stores, as
#: fake_convert's STREAM_MIN_BYTES of output (the output is then not left in the caches).
STREAM_MIN_TRAFFIC = 64 << 20


def _encode_signature(width, in_bits, out_dtype, table: bool, extra=()):
    """An encode or round-to kernel's signature: (constants, x, lut, table, out, *extra,
    nchunks), the table of out's dtype where ``table`` (round-to reading ``table[code]``),
    else uint8 (a dummy, or the table's byte planes)."""
    return types.void(
        _array(f"uint{width}", readonly=True),
        _array(in_bits, readonly=True),
        _array(np.uint32, readonly=True),
        _array(out_dtype if table else np.uint8, readonly=True),
        _array(out_dtype),
        *extra,
        types.intp,
    )


def _in_bits(load: int, width: int) -> np.dtype:
    return np.dtype({LOAD_DIRECT: f"uint{width}", LOAD_BF16: "uint16", LOAD_LUT: "uint16"}[load])


@functools.cache
def encode_kernel(
    fmt: FloatFormat,
    in_dtype: np.dtype,
    saturate: bool,
    strategy=None,
    table_dtype=None,
    planes=False,
):
    """Kernel rounding ``in_dtype`` data to ``fmt`` codes.

    With ``table_dtype`` set, the kernel instead writes ``table[code]`` (a decode table of
    that dtype's bits): that is round-to-format in one pass.  With ``planes`` too, its
    ``table`` argument is the table's byte planes
    (:func:`fp8kit._kernels.decode.format_planes`; uint8 codes), looked up by
    :func:`fp8kit._kernels.bits.plane_lookup`.
    Returns ``(kernel, plan)``; ``strategy`` forces "generic" (used by tests).  The
    format's constants are a run-time argument: kernels of every format with the same
    input, output and strategy share one compiled function.
    """
    pl = plan(fmt, np.dtype(in_dtype))
    strategy = strategy or pl.strategy
    p, q = _params(fmt, pl.source, saturate)
    load = pl.load
    generic = strategy == "generic"
    unsigned = strategy == "unsigned"
    lookup = table_dtype is not None
    width = _SOURCES[pl.source][0]
    in_bits = _in_bits(load, width)
    out_dtype = np.dtype(table_dtype) if lookup else _CODE_DTYPES[8 if fmt.bits <= 8 else 16]
    sig = _encode_signature(width, in_bits, out_dtype, lookup and not planes)
    version = source_version()
    use_magic = bool(p[7])
    code_type = np.uint8 if fmt.bits <= 8 else np.uint16
    lp = lean_params(fmt, pl.source, p) if USE_LEAN and strategy == "fast" else None
    stream_min = STREAM_MIN_TRAFFIC // (in_bits.itemsize + out_dtype.itemsize)
    lean = lp is not None
    planes = bool(planes and lookup and fmt.bits <= 8)
    key = ("encode", load, strategy, width, lookup, out_dtype.str, use_magic,
           fmt.bits <= 8, planes, lean)  # fmt: skip

    def make(parallel):
        def kernel(prm, x, lut, table, out, nchunks):
            if version == 0 or parallel is None:  # never true; see source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            p = load_p(prm, use_magic, prm[15] != 0)
            # (only the constants the strategy reads: fewer to type and lower when cold)
            if unsigned:
                q = load_qu(prm)
            elif generic:
                q = load_q(prm)
            else:
                q = 0
            nan_thr, neg_thr = prm[_LP], prm[_LP + 1]
            one = p[1]
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                prefer_512()  # 512-bit vectors: float64 input 1.4-2x faster on 1 thread here
                if not lookup:
                    # Arrays far larger than the caches (lean rounding only: the others are
                    # bound by their arithmetic, float32 -> float8_e8m0fnu measured 2% slower
                    # streamed): the codes of a block go to a stack buffer, then to ``out``
                    # with non-temporal stores, whole cache lines, which saves the read of
                    # every line a plain store makes (a fifth of the traffic of float32 -> 8
                    # bits).  The blocks start on line boundaries of ``out``; the chunk's
                    # partial blocks at both ends are written in place (and the whole chunk,
                    # for smaller arrays), so that no copy loop has to handle partial lines
                    # (stream_copy cost 0.25 s of CPU on a cold first call); blocks are
                    # sliced from x and out directly (each slice costs compile time)
                    # (and ``out`` aligned to its elements, as numpy allocates it: a line
                    # boundary must fall on one, non-temporal stores fault off it)
                    stream = lean and x.size >= stream_min
                    stream = stream and byte_address(out, 0) % out.itemsize == 0
                    sbuf = stack_buffer(_STREAM_BLOCK, code_type)
                    b0 = c * step
                    hi = b0 + step
                    hi = hi if hi < x.size else x.size
                    while b0 < hi:
                        b1 = block_end(out, b0, hi, stream, _STREAM_BLOCK)
                        full = stream and b1 - b0 == _STREAM_BLOCK
                        xs = span(x, b0, b1)
                        os = sbuf if full else span(out, b0, b1)
                        for j in range(xs.size):
                            # (a direct load without the helper: one inlined call less)
                            v = xs[j] if load == LOAD_DIRECT else load_bits(xs, j, lut, load, one)
                            if unsigned:
                                os[j] = encode_unsigned(v, q)
                            elif generic:
                                os[j] = encode_generic(v, p, q)
                            elif lean:
                                os[j] = encode_lean(v, p, nan_thr, neg_thr)
                            else:
                                os[j] = encode_fast(v, p)
                        if full:
                            stream_block(out, b0, sbuf, _STREAM_BLOCK)
                        b0 = b1
                    if stream:
                        store_fence()
                    continue
                xc, oc = chunks(x, out, c, step)
                # round-to-format: codes of a block into a buffer (a vectorized loop), then
                # their values from the table.  In one loop the table read is a gather,
                # which LLVM's cost model declines here, and the whole loop stayed scalar:
                # 4M float32 -> e4m3fn values, 1 thread, measured 26 ms in one loop.  The
                # table read, one element at a time, still took half of the time (16M,
                # one thread: 7.9 ms where encode took 2.8): with ``planes``, byte permutes
                buf = stack_buffer(_LOOKUP_BLOCK, code_type)  # (no np.empty to compile)
                for b0 in range(0, xc.size, _LOOKUP_BLOCK):
                    xs, os = span(xc, b0, b0 + _LOOKUP_BLOCK), span(oc, b0, b0 + _LOOKUP_BLOCK)
                    for j in range(xs.size):
                        v = xs[j] if load == LOAD_DIRECT else load_bits(xs, j, lut, load, one)
                        if unsigned:
                            buf[j] = encode_unsigned(v, q)
                        elif generic:
                            buf[j] = encode_generic(v, p, q)
                        elif lean:
                            buf[j] = encode_lean(v, p, nan_thr, neg_thr)
                        else:
                            buf[j] = encode_fast(v, p)
                    if planes:
                        plane_lookup(table, buf, os, xs.size)
                    else:
                        for j in range(xs.size):
                            os[j] = table[buf[j]]

        return kernel

    # (built without NRT, as every Kernel: ``os`` (a stack buffer or a slice of out) costs
    # no NRT_incref/decref calls per block, around which the loop's vector constants were
    # spilled and reloaded)
    kernel = Kernel(make, sig, key, pack_params(p, q, lean=lp))
    kernel.planes = planes
    return kernel, pl


@functools.cache
def lookup_kernel(code_dtype: np.dtype, table_dtype: np.dtype, bf16_shift: bool = False) -> Kernel:
    """Kernel writing ``table[x[i]]``: decoding is a table lookup (256 or 65,536 entries).

    With ``bf16_shift``, bfloat16 -> float32 is computed instead (bits << 16, NaN made
    canonical): a 65,536-entry table does not stay in L1 and the gather is 1.4x slower.
    That kernel takes only x and out (see :class:`XOKernel`).
    """
    sig = _signature(code_dtype, np.uint32, table_dtype, table_dtype)
    version = source_version()
    if bf16_shift:
        xo = types.intp(_array(code_dtype, readonly=True), _array(table_dtype), types.intp)
        return XOKernel(_make_bf16_to_f32, xo)

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            if version == 0 or parallel is None:  # see source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                xc, oc = chunks(x, out, c, step)
                for j in range(xc.size):
                    oc[j] = table[xc[j]]

        return kernel

    return Kernel(make, sig)


def _make_bf16_to_f32(parallel):
    version = source_version()
    one = np.uint32(1)
    abs_mask = np.uint32(0x7FFF)
    inf = np.uint32(0x7F80)
    qnan = np.uint32(0x7FC00000)
    sign = np.uint32(0x8000)

    def kernel(x, out, nchunks):
        if version == 0 or parallel is None:  # see source_version
            return 1
        c_first, c_stop, step = xo_chunks(x, out, nchunks)
        if c_stop < 0:
            return 1
        for c in range(c_first, c_stop):
            xc, oc = chunks(x, out, c, step)
            for j in range(xc.size):
                v = cast_like(xc[j], one)
                nan = cast_like(cast_like(v & sign, one) << 16, one) | qnan
                oc[j] = nan if cast_like(v & abs_mask, one) > inf else cast_like(v << 16, one)
        return 0

    return kernel


def check_unsigned_mode(fmt: FloatFormat, mode: int) -> None:
    """The unsigned, power-of-two formats (float8_e8m0fnu) take the modes of issue 8 only:
    a ValueError naming ``rounding`` for the others."""
    if fmt.specials == "unsigned" and mode not in CLASSIC_MODES:
        name = next(k for k, v in MODES.items() if v == mode)
        allowed = ", ".join(k for k, v in MODES.items() if v in CLASSIC_MODES)
        raise ValueError(
            f"rounding={name!r} is not supported for the unsigned format {fmt.name}; "
            f"use one of {allowed}"
        )


def mode_overflow(p, mode: int):
    """(overflow code of positive values, of negative values) in a rounding mode: directed
    modes stop at +-max on the side they round toward zero."""
    from .rounding import TOWARD_NEGATIVE, TOWARD_POSITIVE, TOWARD_ZERO

    u = type(p[1])
    ovf, max_mag = p[10], p[9]
    o = {
        TOWARD_ZERO: (max_mag, max_mag),
        TOWARD_POSITIVE: (ovf, max_mag),
        TOWARD_NEGATIVE: (max_mag, ovf),
    }.get(mode, (ovf, ovf))
    return (u(o[0]), u(o[1]))


def stochastic_params(fmt: FloatFormat, source: str, random_bits: int, excess: bool = False):
    """Constants of :func:`fp8kit._kernels.rounding.encode_stochastic_fast` for ``fmt`` on
    ``source`` bits, or None where it would not be exact: it needs ``random_bits`` at most
    the ``sh`` bits dropped in the normal range, the format's subnormal spacing over
    ``2**sh`` a normal source number, and every source subnormal below ``2**-random_bits`` of
    that spacing, where no rule rounds it up: so a flush-to-zero or denormals-are-zero mode
    set by another library cannot change a result.  ``excess``: for a kernel that also
    takes more random bits than ``sh`` (:mod:`fp8kit._kernels.stochastic`): in the normal
    range the fraction has ``sh`` bits, so the carry is the one of the random part's top
    ``sh`` bits; below the smallest normal it has more, and ``scale`` then gives the
    fixed-point number ``random_bits`` fraction bits (the mantissa and those within 30)."""
    width, src_m, _, src_bias = _SOURCES[source]
    u = np.uint32 if width == 32 else np.uint64
    f = np.float32 if width == 32 else np.float64
    src_emin, _ = _src_limits(source)
    m = fmt.mantissa_bits
    sh = src_m - m
    if fmt.specials == "unsigned" or _strategy(fmt, source) is None:
        return None
    if random_bits > sh and not excess or sh <= 0:
        return None
    use_magic = fmt.minexp != src_emin
    if use_magic and (fmt.minexp - src_m < src_emin or fmt.minexp - m - random_bits < src_emin):
        return None
    more = max(random_bits - sh, 0)  # (excess: the fraction bits beyond sh, subnormals)
    if use_magic and more and m + random_bits > 30:
        return None
    rebias = src_bias - fmt.bias
    return (
        bool(use_magic),
        # |x| < 2**minexp -> fixed point
        f(2.0 ** (src_m - fmt.minexp + more) if use_magic else 1.0),
        u(int(np.array(f(2.0**fmt.minexp)).view(u))),  # bits of the smallest normal
        u((-(rebias << src_m)) & ((1 << width) - 1)),
        u(sh),
    )


@njit(inline="always")
def store_code(os, j, table, code, lookup):
    """Store a code, or with ``lookup`` the value ``table[code]``, at ``os[j]``."""
    if lookup:
        os[j] = table[code]
    else:
        os[j] = code


@functools.cache
def encode_mode_kernel(
    fmt: FloatFormat,
    in_dtype: np.dtype,
    saturate: bool,
    mode: int,
    random_bits: int = 32,
    table_dtype=None,
    flush: bool = False,
    planes: bool = False,
    vector: bool = True,
):
    """:func:`encode_kernel` for the rounding modes of :mod:`fp8kit._kernels.rounding`
    (nearest-even too: with ``flush``, subnormal results become zeros of their sign, see
    :func:`fp8kit._kernels.rounding.flush_code`).  ``planes``: as in
    :func:`encode_kernel`, where the kernel takes them (``kernel.planes``: the
    stochastic variants with more than 8 words per call read the table).

    Signature ``(x, lut, table, out, key, offset, nchunks)``: ``key`` is the uint32[2]
    Philox key of stochastic rounding (unused otherwise); element ``i`` of chunk ``c`` has
    index ``offset + c * step + i`` in the flat (C-order) array (``offset``: where ``x``
    starts in a larger array, such as a Dask block; 0 otherwise).  Returns
    ``(kernel, plan)``.  The format's constants are a run-time argument; the random
    bits, ``flush`` and the format's two path flags are compiled in, and the mode's kind
    (:func:`fp8kit._kernels.rounding.mode_kind`); the mode within its kind is read at run
    time, so one compiled function serves them all (the native kernels compile it in).
    ``vector``: stochastic rounding takes :mod:`fp8kit._kernels.stochastic`'s kernel (the
    random words of a block in one pass, then its runs; False: this one, as the tests'
    reference).
    """
    kind = mode_kind(mode)
    pl = mode_plan(fmt, np.dtype(in_dtype), mode)
    planes_arg = planes
    p, q = _params(fmt, pl.source, saturate, mode)
    o = mode_overflow(p, mode)
    load = pl.load
    unsigned = pl.strategy == "unsigned"
    check_unsigned_mode(fmt, mode)
    stochastic = kind != KIND_DET
    sp = stochastic_params(fmt, pl.source, random_bits) if kind == KIND_SR else None
    fast = sp is not None
    lookup = table_dtype is not None
    width = _SOURCES[pl.source][0]
    in_bits = _in_bits(load, width)
    out_dtype = np.dtype(table_dtype) if lookup else _CODE_DTYPES[8 if fmt.bits <= 8 else 16]
    version = source_version()
    rbits = int(random_bits) if stochastic else 32
    split = parts(rbits)
    # closure constants, not locals of the kernel: the stream loop below must unroll
    streams = 4 * split
    block = streams * K
    # LLVM unrolls the stream loop of the fused path up to 8 streams (16 did not unroll,
    # and the loop then did not vectorize: 10x slower); 8-bit words use the buffered path
    # The variants' longer code does not unroll there either: buffered (measured 16x faster)
    fused = streams <= 8 and kind == KIND_SR
    # stochastic rounding to formats of up to 16 bits: fp8kit._kernels.stochastic's kernel
    # (each block's random words in one vectorized pass, then its runs of K elements, to
    # values through the table's byte planes per run): the same bits as this function's
    # kernel below (the tests' reference), which took 1.2-1.5x its time with 16 random bits
    # and 10x to values with 8 or fewer (the table read per element), 256K-16M elements
    unsigned_sr = unsigned and kind == KIND_SR and rbits <= 23
    vector_sr = vector and (
        kind in (KIND_SR, KIND_VAR) and (not unsigned or unsigned_sr) and fmt.bits <= 16
    )  # fmt: skip
    prm = pack_params(p, q, o, sp, mode)
    planes = bool(planes and lookup and fmt.bits <= 8 and (fused or not stochastic))
    sig = _encode_signature(
        width, in_bits, out_dtype, lookup and not planes, (_array(np.uint32, True), types.int64)
    )
    use_magic = bool(p[7])
    sp_magic = bool(sp[0]) if fast else False
    code_type = np.uint8 if fmt.bits <= 8 else np.uint16
    flush = bool(flush) and not unsigned  # (no subnormals in the unsigned formats)
    # The mode is read at run time, so that one compiled function serves every mode of a
    # kind (a deterministic mode compiled in ran toward_zero 2x faster, but every public
    # function takes native kernels in the deterministic modes now: this one is their
    # fallback, and the tests' reference, which compiled one kernel per mode, ~0.6 s each).
    key = ("mode", load, unsigned, kind, fast, rbits, flush, width, lookup, out_dtype.str,
           use_magic, sp_magic, fmt.bits <= 8, planes)  # fmt: skip
    det_buf = _LOOKUP_BLOCK if lookup else 1
    sr_buf = 4 * K
    # (with planes the fused loop stores codes, looked up per block: see the deterministic
    # path; a table read per element kept that loop scalar, 2.7x encode's time)
    x_type, o_type = in_bits.type, (np.uint8 if planes else out_dtype.type)
    lookup_each = lookup and not planes

    def make(parallel):
        # The kernel calls module-level functions only: a kernel closing over a dispatcher
        # (such as a per-kernel inline helper) gets a new disk-cache key in every process,
        # because a dispatcher pickles with a random id, so it would compile every time.
        # The format-dependent choice (unsigned, fast) is a branch on a closure constant,
        # pruned before typing; it appears once per loop below.
        def kernel(prm, x, lut, table, out, key, offset, nchunks):
            if version == 0 or parallel is None:  # see source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            p = load_p(prm, use_magic, prm[15] != 0)
            if unsigned:
                q = load_qu(prm)
            else:
                q = load_q(prm)
            o = load_o(prm)
            sp = load_sp(prm, sp_magic)
            one = p[1]
            rmode = prm[_MODE]  # the mode within the kernel's kind
            mm = mode_masks(rmode, one)
            k0, k1 = key[0], key[1]
            n = x.size
            if not stochastic:
                step = (n + nchunks - 1) // nchunks
                # (stack buffers, comparisons: np.empty, min and max compile overloads on
                # a cold first call, ~85 ms and ~20 ms each)
                buf = stack_buffer(det_buf, code_type)
                for c in range(c_first, c_stop):
                    prefer_512()  # see bits.prefer_512
                    xc, oc = chunk(x, c, step), chunk(out, c, step)
                    # (with lookup: codes through a buffer, as in encode_kernel)
                    blk = _LOOKUP_BLOCK if lookup else (xc.size if xc.size > 1 else 1)
                    for b0 in range(0, xc.size, blk):
                        xs, os = span(xc, b0, b0 + blk), span(oc, b0, b0 + blk)
                        for j in range(xs.size):
                            v = load_bits(xs, j, lut, load, one)
                            if unsigned:
                                code = encode_unsigned_mode(v, q, rmode, k0, rbits)
                            else:
                                code = encode_mode_kind(v, p, q, o, rmode, kind, mm, k0, rbits)
                                if flush:
                                    code = flush_code(code, p, q[5])
                            if lookup:
                                buf[j] = code
                            else:
                                os[j] = code
                        if planes:
                            plane_lookup(table, buf, os, xs.size)
                        elif lookup:
                            for j in range(xs.size):
                                os[j] = table[buf[j]]
                return
            # stochastic: chunks of whole blocks of 4 * K * split elements (see rounding.K
            # for which element uses which bits of which Philox call), the blocks counted
            # from the start of the whole array: x starts at its element ``offset``
            zero = k0 - k0
            step = ((n + nchunks - 1) // nchunks + block - 1) // block * block
            end = offset + n
            for c in range(c_first, c_stop):
                prefer_512()  # see bits.prefer_512 (Philox's 64-bit products gain most)
                if fused:
                    xin = stack_buffer(block, x_type)
                    oin = stack_buffer(block, o_type)
                else:
                    buf = stack_buffer(sr_buf, np.uint32)  # buf[t * K + g]: see fill_block
                # the chunk's global range, its inner bounds on block boundaries
                glo, ghi = block_items(c, nchunks, step, offset, end, block)
                gb = glo // block * block
                while gb < ghi:
                    lo = gb if gb > glo else glo
                    hi = gb + block if gb + block < ghi else ghi
                    if fused:
                        # call g's four words serve element g of each of the block's
                        # 4 * split runs, in one vectorized loop; generating and using the
                        # words together overlaps Philox's arithmetic with the memory
                        # traffic (measured 10% faster than a pass through a buffer).  The
                        # loop reads and writes block-sized copies on the stack, which LLVM
                        # knows alias nothing: 16M float32, 1 thread, 130 -> 38 ms against
                        # the loop on slices of x and out; and a partial block (the ends of
                        # a chunk) runs the same loop, so it is compiled once (0.5 s less
                        # of a cold first call than with the buffered path below for those)
                        part = lo != gb or hi != gb + block
                        if part:
                            for j in range(block):
                                xin[j] = 0
                        xsrc, xdst = span(x, lo - offset, hi - offset), span(xin, lo - gb, hi - gb)
                        for j in range(xsrc.size):
                            xdst[j] = xsrc[j]
                        xs, os = xin, oin
                        first = np.uint64(gb // block) * np.uint64(K)
                        for g in range(K):
                            ctr = first + np.uint64(g)
                            ws = philox4x32_10(
                                cast_like(ctr & _LO32, k0), cast_like(ctr >> _S32, k0), zero,
                                zero, k0, k1,
                            )  # fmt: skip
                            for s in range(streams):
                                j = s * K + g
                                v = load_bits(xs, j, lut, load, one)
                                rnd = word_part(ws[s // split], cast_like(s % split, k0), split)
                                if unsigned:
                                    code = encode_unsigned_mode(v, q, STOCHASTIC, rnd, rbits)
                                elif fast:
                                    code = encode_stochastic_fast(v, p, sp, o, rnd, rbits)
                                else:
                                    code = encode_mode_kind(v, p, q, o, rmode, kind, mm, rnd, rbits)
                                if flush and not unsigned:
                                    code = flush_code(code, p, q[5])
                                store_code(os, j, table, code, lookup_each)
                        osrc, odst = (
                            span(oin, lo - gb, hi - gb),
                            span(out, lo - offset, hi - offset),
                        )
                        if planes:
                            plane_lookup(table, osrc, odst, osrc.size)
                        else:
                            for j in range(osrc.size):
                                odst[j] = osrc[j]
                    else:
                        # blocks where the fused loop would not unroll: their words through
                        # a buffer, one pass per run
                        fill_block(buf, gb // block, k0, k1)
                        for t in range(4):
                            for h in range(split):
                                s0 = gb + (t * split + h) * K
                                r0 = s0 if s0 > lo else lo
                                r1 = s0 + K if s0 + K < hi else hi
                                if r0 < r1:
                                    xs = span(x, r0 - offset, r1 - offset)
                                    os = span(out, r0 - offset, r1 - offset)
                                    words = span(buf, t * K + r0 - s0, t * K + r1 - s0)
                                    for j in range(xs.size):
                                        v = load_bits(xs, j, lut, load, one)
                                        rnd = word_part(words[j], cast_like(h, k0), split)
                                        if unsigned:
                                            code = encode_unsigned_mode(
                                                v, q, STOCHASTIC, rnd, rbits
                                            )
                                        elif fast:
                                            code = encode_stochastic_fast(v, p, sp, o, rnd, rbits)
                                        else:
                                            code = encode_mode_kind(
                                                v, p, q, o, rmode, kind, mm, rnd, rbits
                                            )
                                        if flush and not unsigned:
                                            code = flush_code(code, p, q[5])
                                        store_code(os, j, table, code, lookup)
                    gb += block

        return kernel

    if vector_sr:  # (see above)
        from .stochastic import sr_make

        sr_planes = bool(planes_arg and lookup and fmt.bits <= 8)
        sr_sig = _encode_signature(width, in_bits, out_dtype, lookup and not sr_planes,
                                   (_array(np.uint32, True), types.int64))  # fmt: skip
        sr_key = ("sr", load, unsigned, kind, mode if kind == KIND_VAR else 0, fast, rbits,
                  flush, width, lookup, out_dtype.str, use_magic, sp_magic, code_type.__name__,
                  sr_planes)  # fmt: skip
        kernel = NumbaNative(
            sr_make(load, unsigned, kind, mode if kind == KIND_VAR else STOCHASTIC, fast, rbits,
                    flush, use_magic, sp_magic, sr_planes, lookup, code_type, version),
            sr_sig, sr_key, prm,
        )  # fmt: skip
        kernel.planes = sr_planes
        # (without Numba's function passes: 0.02-0.03 s less on a first call; 4M float32,
        # stochastic round_to and FakeConvert, study.quantize: as fast or faster)
        kernel.function_passes = False
        return kernel, pl
    kernel = Kernel(make, sig, key, prm)
    kernel.planes = planes
    return kernel, pl
