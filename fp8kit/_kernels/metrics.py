"""Kernels of the quantization-error studies: error metrics and grouped amax.

Each is one pass over the data split into contiguous chunks (one per thread); a chunk writes
its own partial results and Python combines them (sums add, maxima take the max), so no two
threads touch the same accumulator.  Metrics accumulate in float64.

Minima and maxima are conditional expressions, not ``min``/``max``: each of those builtins
compiles an overload per signature on its first use in a process (20-30 ms each, cold).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from llvmlite import ir
from numba import from_dtype, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..formats import get_format
from .bits import (
    array_args,
    as_bits,
    as_float,
    cast_like,
    chunk_range,
    encode_fast,
    first_lanes,
    fma,
    masked_access,
    prefer_512,
    round_in_place,
    run_amax,
    splat,
    stack_buffer,
    widen32,
)
from .codec import Kernel, _params, source_version
from .fake import _KIND, BF16, F32, _from16, round_params

#: The longest run of elements summed on its own before its sum joins the chunk's.
SUM_BLOCK = 1024

# Stack buffers of SUM_BLOCK float32 padded by a cache line: buffers 4 KiB apart slowed the
# fused loop by 2-3% (a store and a load 4 KiB apart look alike to the CPU's store forwarding).
_PADDED = SUM_BLOCK + 16

#: Columns of the metrics kernel's partial-result rows.
SUM_SQ_ERR, SUM_SQ_SIG, MAX_ABS, MAX_REL = 0, 1, 2, 3
NAN_IN, INF_IN, LOST, FLUSHED, SATURATED, SUBNORMAL = 4, 5, 6, 7, 8, 9
N_METRICS = 10
_MAX_COLUMNS = (MAX_ABS, MAX_REL)


def _arr(dt, ndim=1, readonly=True):
    return types.Array(from_dtype(np.dtype(dt)), ndim, "C", readonly=readonly)


class SumKernel(Kernel):
    """A :class:`Kernel` compiled with ``fastmath={"reassoc"}`` only: float64 sums may be
    reassociated (split into vector lanes), which makes the fused quantize-and-metrics pass
    about 3x faster (the metrics kernel writes its lanes out: :func:`segment_metrics`).
    It is not a codec kernel: no value is rounded, and the flags that would change NaN,
    Inf or signed-zero handling (``nnan``, ``ninf``, ``nsz``) stay off.  Sums then differ
    from a sequential sum by rounding (relative 1e-16 per term), as they do between thread
    counts anyway."""

    _options = {**Kernel._options, "fastmath": {"reassoc"}}


#: float64 lanes of :func:`segment_metrics`' vectors (512 bits)
_LANES = 8


@intrinsic
def segment_metrics(typingctx, x, q, scale, i, s_at, m, ovf, tie, tiny, row, inner_runs):
    """Add the metrics of ``x[i:i + m]`` and ``q[i:i + m]`` to ``row`` (float64, N_METRICS
    columns: the sums added, the maxima kept, the counts added): the scale of element
    ``i + j`` is ``scale[s_at + j]`` where the literal ``inner_runs`` is 1, else
    ``scale[s_at]``; ``ovf``, ``tie`` (nonzero: a tie at ``ovf`` rounds up) and ``tiny``:
    :func:`metrics_kernel`'s limits.

    LLVM vector code written out, 8 float64 lanes (float32 data widened exactly), the last
    partial block masked (its zeros change no sum, maximum or count); the segment's sums
    are reduced once, then added to the row's, so that rounding errors do not grow with the
    chunk.  The maxima of non-negative numbers are unsigned maxima of their bits.  (Numba's
    loop of the same formula went through LLVM's loop vectorizer: the metrics kernel then
    took 0.36 s to compile.)"""
    if not (isinstance(x, types.Array) and isinstance(inner_runs, types.IntegerLiteral)):
        return None
    runs = inner_runs.literal_value

    def codegen(context, builder, signature, args):
        xa, qa, sa = array_args(context, builder, signature, args, 3)
        ra = context.make_array(signature.args[9])(context, builder, args[9])
        intp = context.get_value_type(types.intp)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        f64 = ir.DoubleType()
        data = context.get_value_type(signature.args[0].dtype)
        vd, vf, vi = (ir.VectorType(t, _LANES) for t in (f64, data, i64))
        module = builder.module

        def nbytes(ty):  # of a float vector's element
            return 4 if isinstance(ty.element, ir.FloatType) else 8

        def fn(name, ret, params):
            return cgutils.get_or_insert_function(module, ir.FunctionType(ret, params), name)

        fabs = fn("llvm.fabs.v8f64", vd, [vd])
        umax = fn("llvm.umax.v8i64", vi, [vi, vi])
        i, s_at, m = args[3], args[4], args[5]
        ovf, tie, tiny = (splat(builder, args[k], vd) for k in (6, 7, 8))
        tie_up = builder.fcmp_unordered("!=", tie, ir.Constant(vd, [0.0] * _LANES))
        zero_d, zero_i = ir.Constant(vd, [0.0] * _LANES), ir.Constant(vi, [0] * _LANES)
        inf = ir.Constant(vd, [float("inf")] * _LANES)
        x0, q0 = builder.gep(xa.data, [i]), builder.gep(qa.data, [i])
        s0 = builder.gep(sa.data, [s_at])
        s_one = None if runs else splat(builder, builder.load(s0), vd)
        names = ("se", "ss", "mabs", "mrel", "nan", "inf", "lost", "flushed", "sat", "sub")
        accs = {
            k: cgutils.alloca_once_value(builder, zero_d if k in ("se", "ss") else zero_i)
            for k in names
        }

        def add(name, value):
            acc = accs[name]
            if name in ("se", "ss"):
                total = builder.fadd(builder.load(acc), value)
            elif name in ("mabs", "mrel"):
                total = builder.call(umax, [builder.load(acc), value])
            else:
                total = builder.add(builder.load(acc), builder.zext(value, vi))
            builder.store(total, acc)

        def block(load):
            xv, qv = load(x0, vf), load(q0, vf)
            if data != f64:
                xv, qv = builder.fpext(xv, vd), builder.fpext(qv, vd)
            s = s_one if not runs else load(s0, vd)
            ax, aq = builder.call(fabs, [xv]), builder.call(fabs, [qv])
            finite_x = builder.fcmp_ordered("<", ax, inf)
            q_finite = builder.fcmp_ordered("<", aq, inf)
            ok = builder.and_(finite_x, q_finite)
            e = builder.select(ok, builder.fsub(qv, xv), zero_d)
            xs = builder.select(ok, xv, zero_d)
            add("se", builder.fmul(e, e))
            add("ss", builder.fmul(xs, xs))
            ae = builder.call(fabs, [e])
            add("mabs", builder.bitcast(ae, vi))
            nz = builder.and_(ok, builder.fcmp_unordered("!=", ax, zero_d))
            rel = builder.select(nz, builder.fdiv(ae, ax), zero_d)
            add("mrel", builder.bitcast(rel, vi))
            add("flushed", builder.and_(nz, builder.fcmp_ordered("==", qv, zero_d)))
            y = builder.fmul(ax, s)
            at_tie = builder.and_(builder.fcmp_ordered("==", y, ovf), tie_up)
            add("sat", builder.and_(ok, builder.or_(builder.fcmp_ordered(">", y, ovf), at_tie)))
            small = builder.fcmp_ordered("<", builder.fmul(aq, s), tiny)
            nonzero_q = builder.fcmp_unordered("!=", qv, zero_d)
            add("sub", builder.and_(ok, builder.and_(nonzero_q, small)))
            add("nan", builder.fcmp_unordered("!=", xv, xv))
            add("inf", builder.fcmp_ordered("==", ax, inf))
            add("lost", builder.and_(finite_x, builder.not_(q_finite)))

        # every block with masked loads (the mask all ones but in the last): one copy of
        # the formula, not a second for the tail (~0.03 s less to compile; masked loads
        # cost AVX-512 nothing more)
        step = ir.Constant(intp, _LANES)
        with cgutils.for_range_slice(builder, ir.Constant(intp, 0), m, step, intp) as (j, _):
            left = builder.sub(m, j)
            left = builder.select(builder.icmp_signed("<", left, step), left, step)
            mask = first_lanes(builder, builder.trunc(left, i32), _LANES)

            def masked(ptr, ty):
                p = builder.bitcast(builder.gep(ptr, [j]), ty.as_pointer())
                align = ir.Constant(i32, nbytes(ty))
                # (as integers: masked_access names the intrinsic by an integer vector type)
                as_int = ir.VectorType(ir.IntType(8 * nbytes(ty)), _LANES)
                p = builder.bitcast(p, as_int.as_pointer())
                zero = ir.Constant(as_int, [0] * _LANES)
                return builder.bitcast(
                    masked_access(builder, "load", as_int, [p, align, mask, zero]), ty
                )

            block(masked)
        # the segment's totals into the row
        out = ra.data
        red_add = fn("llvm.vector.reduce.add.v8i64", i64, [vi])
        red_max = fn("llvm.vector.reduce.umax.v8i64", i64, [vi])
        for col, name in enumerate(names):
            slot = builder.gep(out, [ir.Constant(intp, col)])
            v = builder.load(accs[name])
            if name in ("se", "ss"):
                total = ir.Constant(f64, 0.0)
                for lane in range(_LANES):
                    total = builder.fadd(total, builder.extract_element(v, ir.Constant(i32, lane)))
                builder.store(builder.fadd(builder.load(slot), total), slot)
            elif name in ("mabs", "mrel"):  # (bits of non-negative float64 order as values)
                islot = builder.bitcast(slot, i64.as_pointer())
                best = builder.call(red_max, [v])
                old = builder.load(islot)
                builder.store(
                    builder.select(builder.icmp_unsigned(">", best, old), best, old), islot
                )
            else:  # (counts below 2**53: exact in float64)
                count = builder.uitofp(builder.call(red_add, [v]), f64)
                builder.store(builder.fadd(builder.load(slot), count), slot)
        return context.get_dummy_value()

    sig = types.void(x, q, scale, i, s_at, m, ovf, tie, tiny, row, inner_runs)
    return sig, codegen


@functools.cache
def metrics_kernel(data_dtype: np.dtype, inner_runs: bool) -> Kernel:
    """Kernel ``(x, q, scale, shape, sstr, limits, out, nchunks)``.

    x, q: float32 or float64 data and its quantized values, C-contiguous 1-D; scale: float64,
    the multiplier applied before rounding (FakeConvert's), read through int64[4] merged
    ``shape`` and scale strides ``sstr`` as in :mod:`fp8kit._kernels.fake`; limits: float64
    ``[overflow threshold, 1 if a tie at it rounds up, smallest normal]`` of the format (see
    :func:`overflow_threshold`); out: float64 ``(nchunks, N_METRICS)``.

    Per element, in float64 (exact for float32 data: products and differences of two
    float32 numbers fit in 53 bits): a NaN or Inf x is only counted; a finite x whose q is
    not finite is counted as lost; all other elements enter the sums, maxima and counts
    (:func:`segment_metrics`, on each row segment of at most SUM_BLOCK elements).
    """
    version = source_version()
    sig = types.void(
        _arr(data_dtype), _arr(data_dtype), _arr(np.float64), _arr(np.int64), _arr(np.int64),
        _arr(np.float64), _arr(np.float64, 2, readonly=False), types.intp,
    )  # fmt: skip
    zero = np.float64(0.0)

    def make(parallel):
        def kernel(x, q, scale, shape, sstr, limits, out, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            ovf, tie, tiny = limits[0], limits[1], limits[2]
            n1, n2, n3 = shape[1], shape[2], shape[3]
            total = shape[0] * n1 * n2 * n3
            step = (total + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                row = out[c]
                for k in range(N_METRICS):
                    row[k] = zero
                i = c * step
                hi = i + step if i + step < total else total
                # row indices (a, b, d) of the chunk's first element; then counted on, since
                # divisions per row cost as much as the rows of an MX block (32 elements)
                r, j0 = i // n3, i % n3
                a, b, d = r // (n1 * n2), (r // n2) % n1, r % n2
                while i < hi:  # the chunk, one row segment at a time
                    # segments of at most SUM_BLOCK elements, each summed on its own and then
                    # added to the chunk's sums: rounding errors do not grow with the chunk's
                    # length, so any chunking (threads, Dask blocks, budgets) agrees to ~1e-14
                    j1 = j0 + hi - i if j0 + hi - i < n3 else n3
                    j1 = j1 if j1 < j0 + SUM_BLOCK else j0 + SUM_BLOCK
                    base = a * sstr[0] + b * sstr[1] + d * sstr[2]
                    if inner_runs:
                        segment_metrics(x, q, scale, i, base + j0, j1 - j0, ovf, tie, tiny, row, 1)
                    else:
                        segment_metrics(x, q, scale, i, base, j1 - j0, ovf, tie, tiny, row, 0)
                    i += j1 - j0
                    if j1 < n3:  # (the row goes on in the next segment)
                        j0 = j1
                        continue
                    j0 = 0
                    d += 1
                    if d == n2:
                        d = 0
                        b += 1
                        if b == n1:
                            b = 0
                            a += 1

        return kernel

    return Kernel(make, sig)


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


@functools.cache
def amax_runs_kernel(data_dtype: np.dtype) -> Kernel:
    """Kernel ``(bits, dims, amax, bad, nchunks)``: the largest finite ``|x|`` (as bits) of
    each run and whether the run holds a NaN or an Inf (1 or 0).

    bits: the data's bits, C-contiguous 1-D, seen as rows of ``dims[0]`` elements, each row
    cut into runs of ``dims[1]`` elements (the last run of a row shorter when the row length
    is not a multiple); run ``t`` is run ``t % runs_per_row`` of row ``t // runs_per_row``.
    amax, bad: bits dtype, one entry per run.
    """
    bits_dt, mask, inf_bits, _, _ = _amax_constants(data_dtype)
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
                t = c * step
                stop = t + step if t + step < total else total
                if t >= stop:
                    continue
                row, b = t // per_row, t % per_row  # then counted on: no division per run
                while t < stop:
                    lo = row * length + b * run
                    # (every |x|, NaN and Inf the largest; where one is met, the run again
                    # without them: LLVM vector code, see bits.run_amax)
                    n = run if run < length - b * run else length - b * run
                    run_amax(bits, lo, n, mask, inf_bits, amax, bad, t)
                    t += 1
                    b += 1
                    if b == per_row:
                        b = 0
                        row += 1

        return kernel

    return Kernel(make, sig)


@functools.cache
def amax_cols_kernel(data_dtype: np.dtype) -> Kernel:
    """Kernel ``(bits, dims, amax, bad, nchunks)``: column-wise largest finite ``|x|`` (as
    bits) over groups of rows, and NaN/Inf flags.

    bits: the data's bits seen as a C-contiguous ``(rows, cols)`` matrix, with
    ``dims = [rows, cols, length, block]``: row ``r`` belongs to group row
    ``(r // length) * blocks + (r % length) // block`` with ``blocks = ceil(length /
    block)``.  amax, bad: bits dtype ``(nchunks, group_rows * cols)``, zeroed; chunk ``c``
    writes row ``c`` (combine with a maximum over axis 0).  The inner loop runs along a row
    and vectorizes.
    """
    bits_dt, mask, inf_bits, zero, one = _amax_constants(data_dtype)
    version = source_version()
    sig = types.void(
        _arr(bits_dt), _arr(np.int64), _arr(bits_dt, 2, readonly=False),
        _arr(bits_dt, 2, readonly=False), types.intp,
    )  # fmt: skip

    def make(parallel):
        def kernel(bits, dims, amax, bad, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            rows, cols, length, block = dims[0], dims[1], dims[2], dims[3]
            blocks = (length + block - 1) // block
            step = (rows + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                am = amax[c]
                bd = bad[c]
                for r in range(c * step, (c + 1) * step if (c + 1) * step < rows else rows):
                    g = ((r // length) * blocks + (r % length) // block) * cols
                    row = bits[r * cols : (r + 1) * cols]
                    out = am[g : g + cols]
                    flags = bd[g : g + cols]
                    for k in range(cols):
                        a = cast_like(row[k] & mask, zero)
                        finite = a < inf_bits
                        a = a if finite else zero
                        out[k] = a if a > out[k] else out[k]
                        flags[k] = flags[k] if finite else one

        return kernel

    return Kernel(make, sig)


@functools.cache  # (a format's max is an exact Fraction computed anew on each access)
def overflow_threshold(fmt) -> tuple[float, bool]:
    """``(threshold, tie_up)``: the magnitude from which rounding to nearest-even with an
    unbounded exponent goes above the format's max (max plus half its last step), and
    whether a value exactly there rounds up (when max's mantissa is odd).  Saturation only
    changes values beyond it; those between max and it round to max anyway."""
    step = 2.0 ** (fmt.maxexp - 1 - fmt.mantissa_bits)
    return fmt.max + step / 2, bool(fmt.max_code & 1)


@functools.cache
def quantize_metrics_kernel(fmt, narrow: str) -> Kernel:
    """Kernel ``(x, scale, shape, sstr, limits, lut, out, nchunks)``: FakeConvert's
    quantization (nearest-even, saturating) of float32 data and the metrics of the result
    in one pass, the quantized values never stored.

    Per element: ``q = round(x * s) / s`` in float32 exactly as :mod:`fp8kit._kernels.fake`
    computes it for float32 data, then (``narrow`` ``"float16"`` or ``"bfloat16"``) rounded
    once to the data's dtype and back, as the study stores 16-bit results; then the figures
    of :func:`metrics_kernel`.  x: C-contiguous 1-D, float32, or for ``narrow`` ``"bfloat16"``
    the data's bits (uint16: widened in registers, no float32 copy); scale: float32 read through
    ``shape``/``sstr`` as there (any innermost stride); limits: float64 ``[overflow
    threshold, 1 if a tie at it rounds up, smallest normal]`` (see :func:`metrics_kernel`),
    the threshold and the smallest normal float32 values; lut: the float16 -> float32 table
    (float16 data).

    The data is worked on in segments of at most :data:`SUM_BLOCK` elements, each summed on
    its own: the rest of a row, or whole rows when the scale is constant along rows shorter
    than that (MX blocks: 32 rows of 32).

    The format's rounding constants are a run-time argument (bound first, see
    :class:`~fp8kit._kernels.codec.Kernel`), so that formats share one compiled function
    (1.1-1.3 s each on a cold cache).  The flags that choose instructions stay compiled in
    (read at run time, the subnormal trick's and the -0 rule's cost 10% here): every format
    the kernel serves uses the subnormal trick, and all are rounded as if they had -0, as
    no figure tells -0 from +0 (the error, its square and magnitude, and the counts of
    zeros are the same), so the fnuz formats need no build of their own.
    """
    r = round_params(fmt)
    return _quantize_metrics(narrow, r[6], True, _round_words(fmt))


def _round_words(fmt) -> np.ndarray:
    """The format-dependent words of :func:`round_params` (uint32): half, the kept bits'
    mask, the shift, the smallest normal's bits, the subnormal trick's magic number's bits
    and max's bits."""
    r = round_params(fmt)
    words = np.array([r[2], r[3][0], r[3][1], r[4], np.float32(r[5]).view(np.uint32), r[8]],
                     np.uint32)  # fmt: skip
    words.flags.writeable = False
    return words


def _quantize_metrics(narrow: str, use_magic: bool, neg_zero: bool, words) -> Kernel:
    kind = _KIND[narrow]
    r0 = round_params(get_format("float8_e4m3fn"))  # (its format-independent words)
    abs_mask, one32, src_inf, nan_bits, sign_bit, zero32 = (r0[i] for i in (0, 1, 7, 9, 10, 12))
    q = _params(get_format(narrow), "float32", False)[0] if kind != F32 else r0
    version = source_version()
    sig = types.void(
        _arr(np.uint32), _arr(np.uint16 if kind == BF16 else np.float32), _arr(np.float32),
        _arr(np.int64), _arr(np.int64), _arr(np.float64), _arr(np.uint32),
        _arr(np.float64, 2, readonly=False), types.intp,
    )  # fmt: skip
    inf = np.float64(np.inf)
    zero = np.float64(0.0)
    bits0 = np.uint64(0)
    # (counters start as int64, not the literal 0: a literal's type widens on the loop's
    # back edge, and Numba retypes every statement once per widening, two extra rounds)
    count0 = np.int64(0)
    one64 = np.uint64(1)
    no_hit = np.bool_(False)
    near_half = np.float64(0.5 * (1.0 - 2.0**-40))
    bf_half, bf_keep = np.uint32(0x7FFF), np.uint32(0xFFFF0000)
    sh16, one32 = np.uint32(16), np.uint32(1)
    f0, f1 = np.float32(0.0), np.float32(1.0)

    def make(parallel):
        def kernel(prm, x, scale, shape, sstr, limits, lut, out, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            r8 = (
                abs_mask, one32, prm[0], (prm[1], prm[2]), prm[3], as_float(prm[4]), use_magic,
                src_inf, prm[5], nan_bits, sign_bit, neg_zero, zero32,
            )  # fmt: skip
            nchunks, c_first, c_stop = chunk_range(nchunks)
            ovf, tie_up, tiny = limits[0], limits[1] != zero, limits[2]
            # (float32 values: checked by the caller)
            neg_ovf32, neg_tiny32 = -np.float32(ovf), -np.float32(tiny)
            n1, n2, n3 = shape[1], shape[2], shape[3]
            st2, st3 = sstr[2], sstr[3]
            total = shape[0] * n1 * n2 * n3
            step = (total + nchunks - 1) // nchunks
            buf = stack_buffer(SUM_BLOCK, np.float64)  # (no np.empty to compile)
            qbuf = stack_buffer(_PADDED, np.float32)
            sbuf = stack_buffer(_PADDED, np.float32)
            for c in range(c_first, c_stop):
                prefer_512()  # measured 7% faster than LLVM's 256-bit default here
                se = zero
                ss = zero
                mabs = bits0
                mr = zero
                nan_in = inf_in = lost = flushed = sat = sub = count0
                i = c * step
                hi = i + step if i + step < total else total
                r, j0 = i // n3, i % n3
                a, b, d = r // (n1 * n2), (r // n2) % n1, r % n2
                while i < hi:
                    # a segment of at most SUM_BLOCK elements, summed on its own and then
                    # added to the chunk's sums: rounding errors do not grow with the chunk's
                    # length, so any chunking (threads, Dask blocks, budgets) agrees to ~1e-14;
                    # its scales first, into sbuf: k whole rows of one scale each, or one row
                    # (segment)
                    base = a * sstr[0] + b * sstr[1] + d * st2
                    k = 0
                    if st3 == 0 and j0 == 0 and n3 < SUM_BLOCK:
                        k = SUM_BLOCK // n3 if SUM_BLOCK // n3 < n2 - d else n2 - d
                        k = k if k < (hi - i) // n3 else (hi - i) // n3
                    if k >= 1:
                        m = k * n3
                        if n3 % 16 == 0:  # (a fixed-length inner loop: vector stores)
                            for rr in range(k):
                                sv = scale[base + rr * st2]
                                for t0 in range(rr * n3, rr * n3 + n3, 16):
                                    for t in range(16):
                                        sbuf[t0 + t] = sv
                        else:
                            for rr in range(k):
                                sv = scale[base + rr * st2]
                                for t in range(rr * n3, rr * n3 + n3):
                                    sbuf[t] = sv
                    else:
                        m = n3 - j0 if n3 - j0 < hi - i else hi - i
                        m = m if m < SUM_BLOCK else SUM_BLOCK
                        if st3 == 0:
                            sv = scale[base]
                            for t in range(m):
                                sbuf[t] = sv
                        else:
                            for t in range(m):
                                sbuf[t] = scale[base + (j0 + t) * st3]
                    xr = x[i : i + m]
                    # the fast path: the block's values all finite (checked after the loop
                    # on the sums), so no masks; max_rel without a division per element:
                    # fl(ae / ax) > mr needs ae / ax >= mr + h (the midpoint to the next
                    # float64; h = ulp(mr) / 2), so d = ae - mr * ax >= h * ax exactly; the
                    # loop tests fl(d) (one FMA: relative error 2**-53) > fl(hh * ax) with
                    # hh = h * (1 - 2**-40): no false negatives, and ratios that only
                    # round to mr (recurring ones such as 1/9) are no candidates; the few
                    # blocks holding candidates divide for them afterwards
                    neg_mr = -mr
                    hh = (as_float(as_bits(mr) + one64) - mr) * near_half
                    bse = zero
                    bss = zero
                    bmabs = bits0
                    hit = no_hit
                    # quantized first, in float32 (16 lanes: twice those of the float64 loop
                    # below), into a buffer that stays in L1, with the counts: saturated
                    # |x| * s > ovf (or == with tie_up) and subnormal |q| * s < tiny from the
                    # sign of one float32 FMA each, |x| * s - ovf and |q| * s - tiny rounded
                    # once: the sign of the exact difference (no underflow near ovf or tiny);
                    # counts of at most SUM_BLOCK are exact in float32
                    bfl = f0
                    bsat = f0
                    bsub = f0
                    for jj in range(m):
                        s32 = sbuf[jj]
                        v = widen32(xr[jj])
                        fq = as_float(round_in_place(as_bits(v * s32), r8))
                        res = fq / s32
                        if kind == BF16:
                            # nearest-even to bfloat16 by the integer formula, exact for
                            # finite values (subnormals included: bfloat16 has float32's
                            # exponents); an overflow gives Inf, and a NaN (only the quiet
                            # ones that rounding and division give) stays a NaN: both then
                            # send the block to the path below, as encode_fast would
                            u = as_bits(res)
                            u = cast_like((u + bf_half + ((u >> sh16) & one32)) & bf_keep, one32)
                            res = as_float(u)
                        elif kind != F32:
                            res = _from16(encode_fast(as_bits(res), q), kind, lut)
                        qbuf[jj] = res
                        over = fma(abs(v), s32, neg_ovf32)
                        bsat += f1 if (over > f0) | ((over == f0) & tie_up) else f0
                        under = fma(abs(res), s32, neg_tiny32) < f0
                        bsub += f1 if (res != f0) & under else f0
                        bfl += f1 if (v != f0) & (res == f0) else f0
                    for jj in range(m):
                        xv = np.float64(widen32(xr[jj]))
                        qv = np.float64(qbuf[jj])
                        ax = abs(xv)
                        e = qv - xv
                        bse += e * e
                        bss += xv * xv
                        ae = abs(e)
                        buf[jj] = ae
                        be = as_bits(ae)
                        bmabs = be if be > bmabs else bmabs
                        hit |= fma(neg_mr, ax, ae) > hh * ax
                    if bse + bss < inf:  # (sums of at most 1024 finite squares stay finite)
                        mabs = bmabs if bmabs > mabs else mabs
                        flushed += np.int64(bfl)
                        sat += np.int64(bsat)
                        sub += np.int64(bsub)
                        if hit:
                            for jj in range(m):
                                ax = abs(np.float64(widen32(xr[jj])))
                                if fma(neg_mr, ax, buf[jj]) > hh * ax and ax != zero:
                                    rel = buf[jj] / ax
                                    mr = rel if rel > mr else mr
                    else:  # NaN or Inf in the block: every element checked
                        bse = zero
                        bss = zero
                        # (qbuf holds the block's quantized values, NaN and Inf included: the
                        # bfloat16 formula above keeps the NaNs that rounding and division
                        # give, so rounding them again here would only cost compile time)
                        for jj in range(m):
                            s = np.float64(sbuf[jj])
                            xv = np.float64(widen32(xr[jj]))
                            qv = np.float64(qbuf[jj])
                            ax = abs(xv)
                            aq = abs(qv)
                            finite_x = ax < inf
                            ok = finite_x & (aq < inf)
                            e = qv - xv if ok else zero
                            xs = xv if ok else zero
                            bse += e * e
                            bss += xs * xs
                            ae = abs(e)
                            be = as_bits(ae)
                            mabs = be if be > mabs else mabs
                            nz = ok & (ax != zero)
                            rel = ae / ax if nz else zero
                            mr = rel if rel > mr else mr
                            flushed += nz & (qv == zero)
                            y = ax * s
                            sat += ok & ((y > ovf) | ((y == ovf) & tie_up))
                            sub += ok & (qv != zero) & (aq * s < tiny)
                            nan_in += xv != xv
                            inf_in += ax == inf
                            lost += finite_x & (not aq < inf)
                    se += bse
                    ss += bss
                    i += m
                    if k >= 1:
                        d += k
                    elif j0 + m < n3:  # (the row goes on in the next segment)
                        j0 += m
                        continue
                    else:
                        j0 = 0
                        d += 1
                    if d == n2:
                        d = 0
                        b += 1
                        if b == n1:
                            b = 0
                            a += 1
                row = out[c]
                row[0] = se
                row[1] = ss
                row[2] = as_float(mabs)
                row[3] = mr
                row[4] = nan_in
                row[5] = inf_in
                row[6] = lost
                row[7] = flushed
                row[8] = sat
                row[9] = sub

        return kernel

    return SumKernel(make, sig, key=("quantize_metrics", narrow, use_magic, neg_zero),
                     params=words)  # fmt: skip
