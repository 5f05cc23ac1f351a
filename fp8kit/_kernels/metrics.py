"""Kernels of the quantization-error studies: error metrics and grouped amax.

Each is one pass over the data split into contiguous chunks (one per thread); a chunk writes
its own partial results and Python combines them (sums add, maxima take the max), so no two
threads touch the same accumulator.  Metrics accumulate in float64.

Written in Numba: plain loops that LLVM vectorizes.  Minima and maxima are conditional
expressions, not ``min``/``max``: each of those builtins compiles an overload per signature
on its first use in a process (20-30 ms each, cold).  The maxima of non-negative numbers
are unsigned maxima of their bits (an integer maximum vectorizes; a float maximum LLVM may
not reorder), and the counts are integer sums.  The float64 sums are the one place where
an order is given up: :func:`fsum_add` lets LLVM keep partial sums in vector lanes (see
there); each segment of at most :data:`SUM_BLOCK` elements is summed on its own, then added
to its chunk's row, so that rounding errors do not grow with the chunk.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from numba import from_dtype, njit, types

from .bits import (
    as_bits,
    as_float,
    cast_like,
    chunk_items,
    chunk_range,
    fma,
    larger,
    prefer_512,
    round_in_place,
    span,
    stack_buffer,
)
from .codec import Kernel, source_version
from .encode16 import (
    _FK_HALF,
    _FK_KEEP,
    _FK_KEEP_SH,
    _FK_MAGIC,
    _FK_MAX,
    _FK_MIN_NORMAL,
    _FK_N,
    _FK_ZSIGN,
    fake_scalars,
)
from .fake import _KIND, BF16, F16, round_params

#: The longest run of elements summed on its own before its sum joins the chunk's.
SUM_BLOCK = 1024

# Stack buffers of SUM_BLOCK float32 padded by a cache line: buffers 4 KiB apart slowed the
# fused loop by 2-3% (a store and a load 4 KiB apart look alike to the CPU's store forwarding).
_PADDED = SUM_BLOCK + 16

#: Columns of the metrics kernel's partial-result rows.
SUM_SQ_ERR, SUM_SQ_SIG, MAX_ABS, MAX_REL = 0, 1, 2, 3
NAN_IN, INF_IN, LOST, FLUSHED, SATURATED, SUBNORMAL = 4, 5, 6, 7, 8, 9
N_METRICS = 10
#: What the fused kernel (:func:`quantize_metrics_kernel`) writes into a chunk's NAN_IN
#: column where a NaN or Inf met it (in the data or the results): measure that data with
#: :func:`metrics_kernel` instead.
NOT_FINITE = -1.0
_MAX_COLUMNS = (MAX_ABS, MAX_REL)


def _arr(dt, readonly=True):
    return types.Array(from_dtype(np.dtype(dt)), 1, "C", readonly=readonly)


def _flattened(fn, at, nargs):
    """``fn`` (``nargs`` arguments before the chunk argument) called with the arguments at
    ``at`` (-2: the one before the chunk argument; -3, -2: the two before it) flattened:
    callers pass those outputs as 2-D arrays (a row per chunk), the compiled function (the
    checked entry's arrays are 1-D) gets views."""
    # (fixed arities: a call with *args slicing cost 0.4 us, a tenth of a 1,000-element
    # fused study pass)
    if at == (-2,) and nargs == 6:

        def call(a, b, c, d, e, out, n):
            return fn(a, b, c, d, e, out.reshape(-1), n)
    elif at == (-2,) and nargs == 7:

        def call(a, b, c, d, e, f, out, n):
            return fn(a, b, c, d, e, f, out.reshape(-1), n)
    else:
        assert at == (-3, -2) and nargs == 4

        def call(a, b, amax, bad, n):
            return fn(a, b, amax.reshape(-1), bad.reshape(-1), n)

    for name in ("address", "stats", "func"):  # (the compiled function's)
        try:
            setattr(call, name, getattr(fn, name))
        except Exception:  # (absent, or a dispatcher's stats that only a compile sets)
            pass
    return call


class FlatKernel(Kernel):
    """A :class:`~fp8kit._kernels.codec.Kernel` whose arguments at the positions ``at``
    (counted from the end: see :func:`_flattened`) are C-contiguous arrays of any
    dimensions, passed to the kernel flattened (its signature has them 1-D).  Its
    five-argument signatures are not the codec one (``x, lut, table, out, nchunks``): the
    entry checks no pair of sizes."""

    sizes = ()

    def __init__(self, make, sig, at=(), key=None, params=None):
        super().__init__(make, sig, key, params)
        self._at = tuple(at)
        self._wrapped = None

    def build(self, parallel: bool = False):
        if self._wrapped is None:
            built = super().build(parallel)
            nargs = len(self._sig.args) - 1 - (self._params is not None)
            self._wrapped = _flattened(built, self._at, nargs) if self._at else built
        return self._wrapped


@njit(inline="always")
def fsum_add(total, value):
    """``total + value``, in order: the sums of every metrics kernel (the fused one of
    sweep and quantize, and error_metrics') add in the same order, so that their figures
    are identical (the README's example asserts it).  A reassociated sum vectorized
    (metrics_of 0.44x the time at 16M) but gave sums 1e-13 apart between the kernels.
    """
    return total + value


@njit(inline="always")
def bits_max(slot, best):
    """The float64 ``slot`` (non-negative) or the value with the bits ``best``, the larger
    (the bits of non-negative float64 numbers order as their values)."""
    old = as_bits(slot)
    return as_float(best if best > old else old)


@njit(inline="always")
def count(flag):
    return np.int64(1) if flag else np.int64(0)


@njit(inline="always")
def full_metrics(x, xo, q, qo, scale, so, runs, m, ovf, tie_up, tiny, row):
    """Add the metrics of ``x[xo:xo + m]`` against ``q[qo:qo + m]`` to ``row`` (float64,
    N_METRICS columns: the sums added, the maxima kept, the counts added), every element
    and every figure (NaN and Inf too): the scale of element ``j`` is ``scale[so + j]``
    where ``runs`` (a compile-time constant) is nonzero, else ``scale[so]``; ``ovf``,
    ``tie_up`` and ``tiny``: :func:`metrics_kernel`'s limits.  In float64 (float32 data
    widened exactly)."""
    se = np.float64(0.0)
    ss = np.float64(0.0)
    mabs = np.uint64(0)
    mrel = np.uint64(0)
    n_nan = np.int64(0)
    n_inf = np.int64(0)
    n_lost = np.int64(0)
    n_flushed = np.int64(0)
    n_sat = np.int64(0)
    n_sub = np.int64(0)
    zero = np.float64(0.0)
    inf = np.float64(np.inf)
    xs_ = span(x, xo, xo + m)  # (views indexed from 0: no wraparound checks)
    qs_ = span(q, qo, qo + m)
    sc_ = span(scale, so, so + (m if runs else 1))
    s_one = np.float64(sc_[0])
    for j in range(m):
        xv = np.float64(xs_[j])
        qv = np.float64(qs_[j])
        s = np.float64(sc_[j]) if runs else s_one
        ax, aq = abs(xv), abs(qv)
        finite_x = ax < inf
        q_finite = aq < inf
        ok = finite_x & q_finite
        e = qv - xv if ok else zero
        xs = xv if ok else zero
        se = fsum_add(se, e * e)
        ss = fsum_add(ss, xs * xs)
        ae = abs(e)
        mabs = larger(as_bits(ae), mabs)
        nz = ok & (ax != zero)
        n_flushed += nz & (qv == zero)
        y = ax * s
        n_sat += ok & ((y > ovf) | ((y == ovf) & tie_up))
        n_sub += ok & (qv != zero) & (aq * s < tiny)
        rel = ae / ax if nz else zero
        mrel = larger(as_bits(rel), mrel)
        n_nan += xv != xv
        n_inf += ax == inf
        n_lost += finite_x & (not q_finite)
    row[SUM_SQ_ERR] += se
    row[SUM_SQ_SIG] += ss
    row[MAX_ABS] = bits_max(row[MAX_ABS], mabs)
    row[MAX_REL] = bits_max(row[MAX_REL], mrel)
    # (counts below 2**53: exact in float64)
    row[NAN_IN] += np.float64(n_nan)
    row[INF_IN] += np.float64(n_inf)
    row[LOST] += np.float64(n_lost)
    row[FLUSHED] += np.float64(n_flushed)
    row[SATURATED] += np.float64(n_sat)
    row[SUBNORMAL] += np.float64(n_sub)


@njit(inline="always")
def first_row(i, n1, n2, n3):
    """``(a, b, d, j0)``: the indices of the row of ``n3`` elements (rows in C order over
    dimensions ``(n0, n1, n2)``) that holds element ``i``, and ``i``'s place in it; the
    walk then counts them on (:func:`next_row`): divisions once per walk, not per row."""
    n1s = n1 if n1 > 0 else 1
    n2s = n2 if n2 > 0 else 1
    n3s = n3 if n3 > 0 else 1
    r = i // n3s
    return r // (n1s * n2s), (r // n2s) % n1s, r % n2s, i % n3s


@njit(inline="always")
def next_row(a, b, d1, n1, n2):
    """``(a, b, d)`` of the row after ``(a, b, d1 - 1)`` (``d1`` the next ``d``), ``d``
    wrapping at ``n2`` into ``b`` and ``b`` at ``n1`` into ``a``."""
    wrap_d = d1 == n2
    b1 = b + 1 if wrap_d else b
    wrap_b = b1 == n1
    return (a + 1 if wrap_b else a), (0 if wrap_b else b1), (0 if wrap_d else d1)


@functools.cache
def metrics_kernel(data_dtype: np.dtype, inner_runs: bool) -> Kernel:
    """Kernel ``(x, q, scale, shape, sstr, limits, out, nchunks)``.

    x, q: float32 or float64 data and its quantized values, C-contiguous 1-D; scale: float64,
    the multiplier applied before rounding (FakeConvert's), read through int64[4] merged
    ``shape`` and scale strides ``sstr`` as in :mod:`fp8kit._kernels.fake`; limits: float64
    ``[overflow threshold, 1 if a tie at it rounds up, smallest normal]`` of the format (see
    :func:`overflow_threshold`); out: float64 ``(nchunks, N_METRICS)``, C-contiguous (chunk
    ``c`` zeroes and fills row ``c``).

    Per element, in float64 (exact for float32 data: products and differences of two
    float32 numbers fit in 53 bits): a NaN or Inf x is only counted; a finite x whose q is
    not finite is counted as lost; all other elements enter the sums, maxima and counts
    (:func:`full_metrics`, on each row segment of at most SUM_BLOCK elements; the row
    indices of a chunk's first element computed once, then counted on).
    """
    version = source_version()
    sig = types.void(
        _arr(data_dtype), _arr(data_dtype), _arr(np.float64), _arr(np.int64), _arr(np.int64),
        _arr(np.float64), _arr(np.float64, readonly=False), types.intp,
    )  # fmt: skip
    zero = np.float64(0.0)
    runs = 1 if inner_runs else 0

    def make(parallel):
        def kernel(x, q, scale, shape, sstr, limits, out, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            n1, n2, n3 = shape[1], shape[2], shape[3]
            st0, st1, st2 = sstr[0], sstr[1], sstr[2]
            ovf, tie_up, tiny = limits[0], limits[1] != zero, limits[2]
            total = shape[0] * n1 * n2 * n3
            step = (total + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                row = out[c * N_METRICS : (c + 1) * N_METRICS]
                for k in range(N_METRICS):
                    row[k] = zero
                i, hi = chunk_items(c, step, total)
                a, b, d, j0 = first_row(i, n1, n2, n3)
                while i < hi:
                    j1 = j0 + (hi - i)
                    j1 = j1 if j1 < n3 else n3
                    j1 = j1 if j1 < j0 + SUM_BLOCK else j0 + SUM_BLOCK
                    base = a * st0 + b * st1 + d * st2
                    m = j1 - j0
                    full_metrics(x, i, q, i, scale, base + j0 if runs else base, runs, m,
                                 ovf, tie_up, tiny, row)  # fmt: skip
                    i += m
                    # the next segment: the row goes on, or the next row
                    row_on = j1 < n3
                    j0 = j1 if row_on else 0
                    a, b, d = next_row(a, b, d if row_on else d + 1, n1, n2)

        return kernel

    return FlatKernel(make, sig, (-2,), key=("metrics", np.dtype(data_dtype).str, runs))


def combine(partials: np.ndarray) -> np.ndarray:
    """Combine per-chunk rows: maxima for the max columns, sums for the rest."""
    total = partials.sum(axis=0)
    for col in _MAX_COLUMNS:
        total[col] = partials[:, col].max()
    return total


def _amax_constants(data_dtype):
    """Bit constants for amax on the bits of bfloat16 (uint16), float32 (uint32) or float64
    (uint64) data:
    the absolute value's bits order like its value, so the largest magnitude is an integer
    maximum, which LLVM vectorizes (a float maximum it may not reorder)."""
    if np.dtype(data_dtype) == np.float32:
        u = np.uint32
        return np.dtype(u), u(0x7FFFFFFF), u(0x7F800000), u(0), u(1)
    if np.dtype(data_dtype) == np.dtype(ml_dtypes.bfloat16):
        u = np.uint16
        return np.dtype(u), u(0x7FFF), u(0x7F80), u(0), u(1)
    u = np.uint64
    return np.dtype(u), u(0x7FFFFFFFFFFFFFFF), u(0x7FF0000000000000), u(0), u(1)


@njit(inline="always")
def run_amax(bits, lo, n, mask, inf_bits, zero):
    """``(top, finite)``: the largest ``bits[j] & mask`` of ``bits[lo:lo + n]`` (a NaN or an
    Inf where it is at least ``inf_bits``) and the largest of those below ``inf_bits`` (the
    largest finite magnitude, as bits: they order like the values); ``zero``: 0 of the
    bits' type.  A second pass only where the first met a NaN or an Inf."""
    v = span(bits, lo, lo + n)  # (a view indexed from 0: no wraparound checks)
    top = zero
    for j in range(n):
        top = larger(cast_like(v[j] & mask, zero), top)
    fin = top
    if top >= inf_bits:
        fin = zero
        for j in range(n):
            a = cast_like(v[j] & mask, zero)
            fin = larger(a if a < inf_bits else zero, fin)
    return top, fin


@functools.cache
def amax_runs_kernel(data_dtype: np.dtype) -> Kernel:
    """Kernel ``(bits, dims, amax, bad, nchunks)``: the largest finite ``|x|`` (as bits) of
    each run and whether the run holds a NaN or an Inf (1 or 0).

    bits: the data's bits, C-contiguous 1-D, seen as rows of ``dims[0]`` elements, each row
    cut into runs of ``dims[1]`` elements (the last run of a row shorter when the row length
    is not a multiple); run ``t`` is run ``t % runs_per_row`` of row ``t // runs_per_row``.
    amax, bad: bits dtype, one entry per run.  The chunks split the runs; a chunk's first
    run's row is computed once, then counted on (a division per run costs as much as a
    32-element run).
    """
    bits_dt, mask, inf_bits, zero, one = _amax_constants(data_dtype)
    version = source_version()
    sig = types.void(
        _arr(bits_dt), _arr(np.int64), _arr(bits_dt, readonly=False),
        _arr(bits_dt, readonly=False), types.intp,
    )  # fmt: skip

    def make(parallel):
        def kernel(bits, dims, amax, bad, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            length, run = dims[0], dims[1]
            per_row = (length + run - 1) // run
            total = amax.size
            step = (total + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                prefer_512()
                t0, t1 = chunk_items(c, step, total)
                r = t0 // per_row
                b = t0 % per_row
                for t in range(t0, t1):
                    rest = length - b * run
                    top, fin = run_amax(bits, r * length + b * run, run if run < rest else rest,
                                        mask, inf_bits, zero)  # fmt: skip
                    amax[t] = fin
                    bad[t] = one if top >= inf_bits else zero
                    b += 1
                    wrap = b == per_row
                    r = r + 1 if wrap else r
                    b = 0 if wrap else b

        return kernel

    kernel = FlatKernel(make, sig, key=("amax_runs", bits_dt.str))
    kernel.function_passes = False  # (as fast: see Kernel.function_passes)
    return kernel


@functools.cache
def amax_cols_kernel(data_dtype: np.dtype) -> Kernel:
    """Kernel ``(bits, dims, amax, bad, nchunks)``: column-wise largest finite ``|x|`` (as
    bits) over groups of rows, and NaN/Inf flags.

    bits: the data's bits seen as a C-contiguous ``(rows, cols)`` matrix, with
    ``dims = [rows, cols, length, block]``: row ``r`` belongs to group row
    ``(r // length) * blocks + (r % length) // block`` with ``blocks = ceil(length /
    block)``.  amax, bad: bits dtype ``(nchunks, group_rows * cols)``, C-contiguous,
    zeroed; chunk ``c`` writes row ``c`` (combine with a maximum over axis 0).  The inner
    loop runs along a row and vectorizes.
    """
    bits_dt, mask, inf_bits, zero, one = _amax_constants(data_dtype)
    version = source_version()
    sig = types.void(
        _arr(bits_dt), _arr(np.int64), _arr(bits_dt, readonly=False),
        _arr(bits_dt, readonly=False), types.intp,
    )  # fmt: skip

    def make(parallel):
        def kernel(bits, dims, amax, bad, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            rows, cols, length, block = dims[0], dims[1], dims[2], dims[3]
            blocks = (length + block - 1) // block
            width = amax.size // nchunks  # (a chunk's row of amax and bad)
            step = (rows + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                r0, r1 = chunk_items(c, step, rows)
                for r in range(r0, r1):
                    g = c * width + ((r // length) * blocks + (r % length) // block) * cols
                    row = span(bits, r * cols, (r + 1) * cols)
                    out = span(amax, g, g + cols)
                    flags = span(bad, g, g + cols)
                    for k in range(cols):
                        a = cast_like(row[k] & mask, zero)
                        finite = a < inf_bits
                        a = a if finite else zero
                        out[k] = larger(a, out[k])
                        flags[k] = flags[k] if finite else one

        return kernel

    kernel = FlatKernel(make, sig, (-3, -2), key=("amax_cols", bits_dt.str))
    kernel.function_passes = False  # (as fast: see Kernel.function_passes)
    return kernel


@functools.cache  # (a format's max is an exact Fraction computed anew on each access)
def overflow_threshold(fmt) -> tuple[float, bool]:
    """``(threshold, tie_up)``: the magnitude from which rounding to nearest-even with an
    unbounded exponent goes above the format's max (max plus half its last step), and
    whether a value exactly there rounds up (when max's mantissa is odd).  Saturation only
    changes values beyond it; those between max and it round to max anyway."""
    step = 2.0 ** (fmt.maxexp - 1 - fmt.mantissa_bits)
    return fmt.max + step / 2, bool(fmt.max_code & 1)


@njit(inline="always")
def fake_rounding(consts):
    """:func:`fp8kit._kernels.bits.round_in_place`'s parameters from the words of
    :func:`fp8kit._kernels.encode16.fake_scalars` (float32 bits; the smallest normal 0
    where the FPU step is not used, so that it never is; -0 kept where the zero sign word
    is set)."""
    u = np.uint32
    return (
        u(0x7FFFFFFF), u(1), consts[_FK_HALF], (consts[_FK_KEEP], consts[_FK_KEEP_SH]),
        consts[_FK_MIN_NORMAL], as_float(consts[_FK_MAGIC]), True, u(0x7F800000),
        consts[_FK_MAX], u(0x7FC00000), u(0x80000000), consts[_FK_ZSIGN] != u(0), u(0),
    )  # fmt: skip


@njit(inline="always")
def fake_round(xf, s, r8):
    """FakeConvert's ``round(x * s) / s`` of the float32 ``xf`` with the float32 scale
    ``s`` (no shift), nearest-even to the format of ``r8`` (:func:`fake_rounding`), in
    float32 exactly as FakeConvert's kernels compute it."""
    return as_float(round_in_place(as_bits(xf * s), r8)) / s


@njit(inline="always")
def narrow_bits(q, kind):
    """float32 bits ``q`` rounded to nearest even in float16 (``kind`` F16) or bfloat16
    (BF16) and back, as float32 bits: an overflow gives Inf, a NaN stays a NaN."""
    one = np.uint32(1)
    a = cast_like(q & np.uint32(0x7FFFFFFF), one)
    nan = a > np.uint32(0x7F800000)
    if kind == BF16:  # (bfloat16 has float32's exponents: subnormals too by the formula)
        odd = cast_like((q >> np.uint32(16)) & one, one)
        r = cast_like(cast_like(q + cast_like(np.uint32(0x7FFF) + odd, one), one)
                      & np.uint32(0xFFFF0000), one)  # fmt: skip
        return cast_like(q | np.uint32(0x00400000), one) if nan else r  # (a NaN stays one)
    # float16: normal results at 13 dropped bits; below 2**-14 to multiples of 2**-24 by
    # adding and subtracting 0.5 in float32 (exact: the sum's step is 2**-24)
    odd = cast_like((a >> np.uint32(13)) & one, one)
    normal = cast_like(cast_like(a + cast_like(np.uint32(0xFFF) + odd, one), one)
                       & np.uint32(0xFFFFE000), one)  # fmt: skip
    half = np.float32(0.5)
    small = as_bits((as_float(a) + half) - half)
    r = small if a < np.uint32(0x38800000) else normal
    r = np.uint32(0x7F800000) if r > np.uint32(0x477FE000) else r
    r = a if nan else r
    return cast_like(r | cast_like(q & np.uint32(0x80000000), one), one)


@njit(inline="always")
def fused_segment(xv, xo, qbuf, sbuf, m, r8, kind, narrow, ovf, tie_up, tiny, row):
    """Add to ``row`` the metrics of ``xv[xo:xo + m]`` (float32) against its FakeConvert
    quantization with the per-element float32 scales ``sbuf[:m]`` (:func:`fake_round`,
    then where ``narrow`` (a run-time flag) rounded once to ``kind``, F16 or BF16,
    :func:`narrow_bits`), the quantized values written to ``qbuf[:m]``.

    As if every element were finite: no NaN/Inf masks or counts, and no division per
    element (only the elements whose error ratio may beat the largest so far are
    divided, in the loop of the sums: a loop of its own over the segment, where one
    had, cost 0.04-0.05 s of a first sweep's compile); where the segment's
    sums come out finite, every element was, and the figures are those of
    :func:`full_metrics` (the saturated and subnormal counts from the sign of one float32
    FMA each, ``|x| * s - ovf`` and ``|q| * s - tiny`` rounded once, which keeps the sign
    of the exact difference: the limits are float32 values).  Otherwise nothing is added
    and ``row[NAN_IN]`` is set to :data:`NOT_FINITE` (a count is never negative): the
    caller measures such data with :func:`metrics_kernel`, whose formula is not compiled
    into this kernel (0.13 s of its 0.58 s cold compile, for data that rarely needs it)."""
    zero32 = np.float32(0.0)
    neg_ovf = -np.float32(ovf)
    neg_tiny = -np.float32(tiny)
    # (counts in int32: the float32 steps then fill 16 lanes; a segment counts < 2**31)
    n_sat = np.int32(0)
    n_sub = np.int32(0)
    n_flushed = np.int32(0)
    xv = span(xv, xo, xo + m)  # (a view indexed from 0: no wraparound checks)
    for t in range(m):  # (float32 steps: 16 lanes)
        xf = xv[t]
        s = sbuf[t]
        qf = fake_round(xf, s, r8)
        if narrow:
            qf = as_float(narrow_bits(as_bits(qf), kind))
        qbuf[t] = qf
        over = fma(abs(xf), s, neg_ovf)
        n_sat = np.int32(n_sat + ((over > zero32) | ((over == zero32) & tie_up)))
        under = fma(abs(qf), s, neg_tiny) < zero32
        n_sub = np.int32(n_sub + ((qf != zero32) & under))
        n_flushed = np.int32(n_flushed + ((xf != zero32) & (qf == zero32)))
    # fl(ae / ax) > mr needs ae / ax >= mr + h (h: half mr's step to the next float64),
    # so ae - mr * ax >= h * ax exactly; tested as fl(fma(-mr, ax, ae)) > fl(hh * ax)
    # with hh = h * (1 - 2**-40): no false negatives (one rounding each, 2**-53); only
    # those elements are divided (after a chunk's first segments, hardly any)
    mr = row[MAX_REL]
    above = as_float(as_bits(mr) + np.uint64(1))
    hh = (above - mr) * np.float64(0.5 * (1.0 - 2.0**-40))
    neg_mr = -mr
    se = np.float64(0.0)
    ss = np.float64(0.0)
    mabs = np.uint64(0)
    mrel = np.uint64(0)
    zero = np.float64(0.0)
    for t in range(m):  # (x and q from L1, float64 steps)
        xd = np.float64(xv[t])
        e = np.float64(qbuf[t]) - xd
        se = fsum_add(se, e * e)
        ss = fsum_add(ss, xd * xd)
        ae = abs(e)
        mabs = larger(as_bits(ae), mabs)
        ax = abs(xd)
        if fma(neg_mr, ax, ae) > hh * ax:
            mrel = larger(as_bits(ae / ax if ax != zero else zero), mrel)
    if se + ss < np.float64(np.inf):
        row[SUM_SQ_ERR] += se
        row[SUM_SQ_SIG] += ss
        row[MAX_ABS] = bits_max(row[MAX_ABS], mabs)
        row[MAX_REL] = bits_max(row[MAX_REL], mrel)
        row[FLUSHED] += np.float64(n_flushed)
        row[SATURATED] += np.float64(n_sat)
        row[SUBNORMAL] += np.float64(n_sub)
    else:
        row[NAN_IN] = NOT_FINITE


@functools.cache
def quantize_metrics_kernel(fmt, narrow: str) -> Kernel:
    """Kernel ``(x, scale, shape, sstr, limits, out, nchunks)``: FakeConvert's quantization
    (nearest-even, saturating) of float32 data and the metrics of the result in one pass,
    the quantized values never stored.

    Per element: ``q = round(x * s) / s`` in float32 exactly as FakeConvert's kernels
    compute it for float32 data, then (``narrow`` ``"float16"`` or ``"bfloat16"``) rounded
    once to the data's dtype and back, as the study stores 16-bit results; then the figures
    of :func:`metrics_kernel` (:func:`fused_segment`), for finite data and results: a chunk
    that meets a NaN or an Inf stops there with :data:`NOT_FINITE` in its NAN_IN column.  x:
    C-contiguous 1-D, float32, or for ``narrow`` ``"bfloat16"`` the data's bits (uint16:
    widened per segment into a buffer on the stack, no float32 copy); scale: float32 read
    through ``shape``/``sstr`` as there (any innermost stride); limits: float64 ``[overflow
    threshold, 1 if a tie at it rounds up, smallest normal]`` (see :func:`metrics_kernel`),
    the threshold and the smallest normal float32 values; out: float64 ``(nchunks,
    N_METRICS)``.

    The data is worked on in segments of at most :data:`SUM_BLOCK` elements, each summed on
    its own: the rest of a row, or whole rows when the scale is constant along rows shorter
    than that (MX blocks: 32 rows of 32); each segment's scales first copied into a stack
    buffer.

    The format's constants are a run-time argument (bound first, see
    :class:`~fp8kit._kernels.codec.Kernel`), so that every format shares one compiled
    function per data type; all are rounded as if they had -0, as no figure tells -0 from
    +0 (the error, its square and magnitude, and the counts of zeros are the same).
    """
    r = list(round_params(fmt))
    r[11] = True  # (neg_zero: see above)
    return _quantize_metrics(narrow, fake_scalars(tuple(r), np.float32(1.0), None))


def _quantize_metrics(narrow: str, consts: np.ndarray) -> Kernel:
    bf16 = _KIND[narrow] == BF16
    # one function for float32 data and float16 data (float32 values of it): the narrowing
    # to float16 or none read at run time (the word after fake_scalars'), so that a sweep
    # of one after the other compiles nothing; bfloat16 data comes as its bits (uint16)
    params = np.append(consts, np.uint32(_KIND[narrow]))
    params.flags.writeable = False
    kind = BF16 if bf16 else F16
    version = source_version()
    sig = types.void(
        _arr(np.uint32), _arr(np.uint16 if bf16 else np.float32), _arr(np.float32),
        _arr(np.int64), _arr(np.int64), _arr(np.float64), _arr(np.float64, readonly=False),
        types.intp,
    )  # fmt: skip
    zero = np.float64(0.0)
    wide = _PADDED if bf16 else 1  # (bfloat16 bits widened to float32 per segment)

    def make(parallel):
        def kernel(prm, x, scale, shape, sstr, limits, out, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            r8 = fake_rounding(prm)
            narrow16 = bf16 | (prm[_FK_N] == np.uint32(F16))
            n1, n2, n3 = shape[1], shape[2], shape[3]
            st0, st1, st2, st3 = sstr[0], sstr[1], sstr[2], sstr[3]
            ovf, tie_up, tiny = limits[0], limits[1] != zero, limits[2]
            total = shape[0] * n1 * n2 * n3
            step = (total + nchunks - 1) // nchunks
            sh16 = np.uint32(16)
            n3s = n3 if n3 > 0 else 1
            rows_fit = SUM_BLOCK // n3s  # (rows of n3 in a segment)
            # whole rows of one scale each where the scale is constant along short rows
            flat = (st3 == 0) & (n3 < SUM_BLOCK)
            qbuf = stack_buffer(_PADDED, np.float32)  # (no np.empty to compile)
            sbuf = stack_buffer(_PADDED, np.float32)
            wbuf = stack_buffer(wide, np.float32)
            for c in range(c_first, c_stop):
                prefer_512()  # measured 7% faster than LLVM's 256-bit default here
                row = out[c * N_METRICS : (c + 1) * N_METRICS]
                for k in range(N_METRICS):
                    row[k] = zero
                i, hi = chunk_items(c, step, total)
                a, b, d, j0 = first_row(i, n1, n2, n3)
                while i < hi and row[NAN_IN] == zero:  # (NOT_FINITE: see fused_segment)
                    base = a * st0 + b * st1 + d * st2
                    # whole rows of one scale each (k of them), or the rest of a row
                    k = rows_fit if rows_fit < n2 - d else n2 - d
                    k = k if k < (hi - i) // n3s else (hi - i) // n3s
                    rows = flat & (j0 == 0) & (k >= 1)
                    m = n3 - j0
                    m = m if m < hi - i else hi - i
                    m = m if m < SUM_BLOCK else SUM_BLOCK
                    m = k * n3 if rows else m
                    if rows | (st3 == 0):  # (k rows of one scale each, or one scale)
                        reps = k if rows else 1
                        width = n3 if rows else m
                        for rr in range(reps):
                            v = scale[base + rr * st2]
                            dst = span(sbuf, rr * width, (rr + 1) * width)
                            for t in range(width):
                                dst[t] = v
                    else:  # (a scale per element: st3 is 1, the caller checks)
                        src = span(scale, base + j0, base + j0 + m)
                        for t in range(m):
                            sbuf[t] = src[t]
                    if bf16:
                        src16 = span(x, i, i + m)
                        for t in range(m):
                            wbuf[t] = as_float(cast_like(np.uint32(src16[t]) << sh16, sh16))
                        fused_segment(wbuf, 0, qbuf, sbuf, m, r8, kind, True, ovf, tie_up, tiny,
                                      row)  # fmt: skip
                    else:
                        fused_segment(x, i, qbuf, sbuf, m, r8, kind, narrow16, ovf, tie_up, tiny,
                                      row)  # fmt: skip
                    i += m
                    # the next segment: k rows on, the row goes on, or the next row
                    row_on = (not rows) & (j0 + m < n3)
                    d1 = d + k if rows else (d if row_on else d + 1)
                    j0 = j0 + m if row_on else 0
                    a, b, d = next_row(a, b, d1, n1, n2)

        return kernel

    key = ("quantize_metrics", "bfloat16" if bf16 else "float32")
    return FlatKernel(make, sig, (-2,), key=key, params=params)
