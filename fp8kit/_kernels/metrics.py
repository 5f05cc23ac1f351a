"""Kernels of the quantization-error studies: error metrics and grouped amax.

Each is one pass over the data split into contiguous chunks (one per thread); a chunk writes
its own partial results and Python combines them (sums add, maxima take the max), so no two
threads touch the same accumulator.  Metrics accumulate in float64.

Minima and maxima are conditional expressions, not ``min``/``max``: each of those builtins
compiles an overload per signature on its first use in a process (20-30 ms each, cold).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import ml_dtypes
import numpy as np
from llvmlite import ir
from numba import from_dtype, types
from numba.core import cgutils
from numba.extending import intrinsic

from .bits import (
    array_args,
    block_mask,
    cast_like,
    chunk_items,
    chunk_range,
    emit_runs_amax,
    first_lanes,
    masked_access,
    next_row,
    nonzero,
    prefer_512,
    runs_amax,
    splat,
    stack_buffer,
    vector_blocks,
    walk_rows,
)
from .codec import Kernel, source_version
from .encode16 import _FK_N, _fake_body, _fake_constants, fake_scalars
from .fake import _KIND, BF16, F16, F32, round_params
from .native import GenericNativeKernel, body_function, chunk_bounds, spec_fields
from .native import available as native_available

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


#: float64 lanes of :func:`segment_metrics`' vectors (512 bits)
_LANES = 8


@intrinsic
def segment_metrics(typingctx, x, q, scale, i, s_at, m, ovf, tie, tiny, row, inner_runs):
    """Add the metrics of ``x[i:i + m]`` and ``q[i:i + m]`` to ``row`` (float64, N_METRICS
    columns: the sums added, the maxima kept, the counts added): the scale of element
    ``i + j`` is ``scale[s_at + j]`` (float64 or float32) where the literal ``inner_runs``
    is 1, else ``scale[s_at]``; ``ovf``, ``tie`` (nonzero: a tie at ``ovf`` rounds up) and ``tiny``:
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
        _metrics_ir(context, builder, signature.args, xa, qa, sa, ra, args[3:9], runs, None)
        return context.get_dummy_value()

    sig = types.void(x, q, scale, i, s_at, m, ovf, tie, tiny, row, inner_runs)
    return sig, codegen


def _segments(builder, start, hi, n1, n2, n3):
    """A loop over the elements ``start .. hi - 1`` of rows of ``n3`` (dimensions ``(n0, n1,
    n2)`` of rows, C order), a segment of a row at a time: yields once inside the loop's
    body ``(var, n3s)`` (:func:`fp8kit._kernels.bits.walk_rows`' allocas with ``"i"``, the
    segment's first element, and ``"j0"``, its first in its row, for the body to move on;
    ``n3s``: ``n3`` as a divisor), then, resumed at the body's end, closes the loop."""
    n3s = nonzero(builder, n3)
    r = builder.sdiv(start, n3s)
    var = walk_rows(builder, r, n1, n2, (("i", start), ("j0", builder.srem(start, n3s))))
    fn = builder.function
    cond, body, done = (fn.append_basic_block(k) for k in ("walk", "segment", "walked"))
    builder.branch(cond)
    builder.position_at_end(cond)
    builder.cbranch(builder.icmp_signed("<", builder.load(var["i"]), hi), body, done)
    builder.position_at_end(body)
    yield var, n3s
    builder.branch(cond)
    builder.position_at_end(done)


@intrinsic
def chunk_metrics(typingctx, x, q, scale, shape, sstr, limits, row, i, hi, inner_runs):
    """:func:`segment_metrics` of elements ``i .. hi - 1``, one row segment of at most
    :data:`SUM_BLOCK` elements at a time (see :func:`metrics_kernel` for the arguments): the
    row walk written out in LLVM code as well (Numba's lowering of it cost ~0.09 s of the
    kernel's cold compile).  The row indices of element ``i`` are computed once (divisions
    per row cost as much as the rows of an MX block), then counted on."""
    if not (isinstance(x, types.Array) and isinstance(inner_runs, types.IntegerLiteral)):
        return None
    runs = inner_runs.literal_value

    def codegen(context, builder, signature, args):
        arrays = array_args(context, builder, signature, args, 7)
        _emit_chunk_metrics(context, builder, runs, signature.args, arrays, args[7], args[8])
        return context.get_dummy_value()

    sig = types.void(x, q, scale, shape, sstr, limits, row, i, hi, inner_runs)
    return sig, codegen


def _emit_chunk_metrics(context, builder, runs, arg_types, arrays, start, hi):
    """The LLVM IR of :func:`chunk_metrics` (``arg_types``: Numba's types of x, q and
    scale; ``arrays``: its seven array arguments, anything with the ``.data`` pointer)."""
    xa, qa, sa, sha, sta, la, ra = arrays
    intp = context.get_value_type(types.intp)
    i64 = ir.IntType(64)

    def at(arr, k):
        return builder.load(builder.gep(arr.data, [ir.Constant(intp, k)]))

    n1, n2, n3 = (at(sha, k) for k in (1, 2, 3))
    st0, st1, st2 = (at(sta, k) for k in (0, 1, 2))
    ovf, tie, tiny = (at(la, k) for k in (0, 1, 2))

    def smaller(u, v):
        return builder.select(builder.icmp_signed("<", u, v), u, v)

    walk = _segments(builder, start, hi, n1, n2, n3)
    var, _ = next(walk)
    i, j0 = builder.load(var["i"]), builder.load(var["j0"])
    j1 = smaller(builder.add(j0, builder.sub(hi, i)), n3)
    j1 = smaller(j1, builder.add(j0, ir.Constant(i64, SUM_BLOCK)))
    a, b, d = (builder.load(var[k]) for k in ("a", "b", "d"))
    base = builder.add(builder.add(builder.mul(a, st0), builder.mul(b, st1)), builder.mul(d, st2))
    s_at = builder.add(base, j0) if runs else base
    m = builder.sub(j1, j0)
    _metrics_ir(context, builder, arg_types, xa, qa, sa, ra, (i, s_at, m, ovf, tie, tiny),
                runs, None)  # fmt: skip
    builder.store(builder.add(i, m), var["i"])
    # the next segment: the row goes on, or the next row (its indices counted on)
    row_on = builder.icmp_signed("<", j1, n3)
    builder.store(builder.select(row_on, j1, ir.Constant(i64, 0)), var["j0"])
    d1 = builder.select(row_on, d, builder.add(d, ir.Constant(i64, 1)))
    next_row(builder, var, a, b, d1, n1, n2)
    next(walk, None)  # (the loop's end)


@intrinsic
def quantize_segment_metrics(typingctx, consts, x, q, scale, m, ovf, tie, tiny, row, narrow):
    """:func:`segment_metrics` of ``x[:m]`` (float32, or bfloat16 bits as uint16) against
    its FakeConvert quantization with the per-element scales ``scale[:m]`` (float32), the
    float32 steps 16 lanes at a time: ``round(x * s) / s`` as
    :func:`fp8kit._kernels.encode16._fake_body` computes it (``consts``:
    :func:`fp8kit._kernels.encode16.fake_scalars`), then for the literal ``narrow``
    (:data:`fp8kit._kernels.fake.F16` or ``BF16``) rounded once to that dtype and back;
    the quantized values are written to ``q[:m]``.

    First as if every element were finite: no NaN/Inf masks or counts, and no division
    per element (max_rel's candidates only, then the candidates divided); where the
    segment's sums come out finite, every element was, and the figures are those of the
    full formula (the sums in the same order; the saturated and subnormal counts from the
    sign of one float32 FMA each, ``|x| * s - ovf`` and ``|q| * s - tiny`` rounded once,
    which keeps the sign of the exact difference); otherwise the segment again with the
    full formula.  (The fused study kernel built on it compiles in ~0.25 s, against 1.0 s
    for the loops in Numba it replaced, and runs MX blocks 20% faster.)"""
    if not (isinstance(x, types.Array) and isinstance(narrow, types.IntegerLiteral)):
        return None
    kind = narrow.literal_value

    def codegen(context, builder, signature, args):
        ca, xa, qa, sa = array_args(context, builder, signature, args, 4)
        ra = context.make_array(signature.args[8])(context, builder, args[8])
        intp = context.get_value_type(types.intp)
        zero = ir.Constant(intp, 0)
        limits = (zero, zero, args[4], args[5], args[6], args[7])
        types_ = (signature.args[1], signature.args[2], signature.args[3])
        quant = (ca, kind)
        _metrics_ir(context, builder, types_, xa, qa, sa, ra, limits, 1, quant)
        return context.get_dummy_value()

    sig = types.void(consts, x, q, scale, m, ovf, tie, tiny, row, narrow)
    return sig, codegen


@intrinsic
def quantize_chunk_metrics(
    typingctx, consts, x, scale, shape, sstr, limits, row, qbuf, sbuf, i, hi, narrow
):
    """:func:`quantize_segment_metrics` of elements ``i .. hi - 1`` (see
    :func:`quantize_metrics_kernel` for the arguments), one segment at a time: the rest of a
    row, at most :data:`SUM_BLOCK` elements, or where the scale is constant along rows
    shorter than that, whole rows of one scale each (MX blocks: 32 rows of 32); each
    segment's scales first copied into ``sbuf`` (:func:`_fill_scales_ir`), its quantized values
    into ``qbuf`` (both float32, :data:`_PADDED` long).  The walk written out in LLVM code
    as :func:`chunk_metrics`' (in Numba it was about half of the fused kernel's compile
    time: its typing and lowering); one copy of the segment code serves both kinds of
    segment (their bounds selected)."""
    if not (isinstance(x, types.Array) and isinstance(narrow, types.IntegerLiteral)):
        return None
    kind = narrow.literal_value

    def codegen(context, builder, signature, args):
        arrays = array_args(context, builder, signature, args, 9)
        x_type, scale_type = signature.args[1], signature.args[2]
        _emit_quantize_chunk(context, builder, kind, x_type, scale_type, arrays, args[9], args[10])
        return context.get_dummy_value()

    sig = types.void(consts, x, scale, shape, sstr, limits, row, qbuf, sbuf, i, hi, narrow)
    return sig, codegen


def _emit_quantize_chunk(context, builder, kind, x_type, scale_type, arrays, start, hi):
    """The LLVM IR of :func:`quantize_chunk_metrics` (``arrays``: its nine array
    arguments, anything with the ``.data`` pointer; ``x_type``, ``scale_type``: Numba's
    types of x and scale).  ``kind``: a Python int (compiled in), or an LLVM integer read
    at run time (x then float32 or bfloat16 bits, and ``arrays[9]`` a float32 buffer of
    :data:`_PADDED` for the widened bfloat16 segment)."""
    ca, xa, sa, sha, sta, la, ra, qa, ba = arrays[:9]
    intp = context.get_value_type(types.intp)
    i64 = ir.IntType(64)
    one, zero = ir.Constant(i64, 1), ir.Constant(i64, 0)
    runtime = isinstance(kind, ir.Value)  # (the data's kind an argument: arrays[9] a buffer)

    def at(arr, k):
        return builder.load(builder.gep(arr.data, [ir.Constant(intp, k)]))

    def smaller(u, v):
        return builder.select(builder.icmp_signed("<", u, v), u, v)

    n1, n2, n3 = (at(sha, k) for k in (1, 2, 3))
    st0, st1, st2, st3 = (at(sta, k) for k in (0, 1, 2, 3))
    ovf, tie, tiny = (at(la, k) for k in (0, 1, 2))
    block = ir.Constant(i64, SUM_BLOCK)
    rows_fit = builder.sdiv(block, nonzero(builder, n3))  # (rows of n3 in a segment)
    flat_scale = builder.icmp_signed("==", st3, zero)
    walk = _segments(builder, start, hi, n1, n2, n3)
    var, n3s = next(walk)
    i, j0 = builder.load(var["i"]), builder.load(var["j0"])
    a, b, d = (builder.load(var[k]) for k in ("a", "b", "d"))
    base = builder.add(builder.add(builder.mul(a, st0), builder.mul(b, st1)), builder.mul(d, st2))
    # whole rows of one scale each (k of them), or the rest of a row (m elements)
    whole = builder.and_(
        builder.and_(flat_scale, builder.icmp_signed("==", j0, zero)),
        builder.icmp_signed("<", n3, block),
    )
    k = smaller(smaller(rows_fit, builder.sub(n2, d)), builder.sdiv(builder.sub(hi, i), n3s))
    rows = builder.and_(whole, builder.icmp_signed(">=", k, one))
    m_rows = builder.mul(k, n3)
    m_part = smaller(smaller(builder.sub(n3, j0), builder.sub(hi, i)), block)
    m = builder.select(rows, m_rows, m_part)
    first = builder.select(rows, base, builder.add(base, builder.mul(j0, st3)))
    _fill_scales_ir(
        context, builder, ir.FloatType(), sa.data, ba.data, first,
        builder.select(rows, st2, zero), builder.select(rows, k, one),
        builder.select(rows, n3, m), builder.select(rows, zero, st3),
    )  # fmt: skip
    if runtime:  # (bfloat16 bits widened into the buffer, float32 read where it is)
        f32, i16 = ir.FloatType(), ir.IntType(16)
        wa = arrays[9]
        is_bf16 = builder.icmp_unsigned("==", kind, ir.Constant(kind.type, BF16))
        with builder.if_then(is_bf16):
            v16, v32 = ir.VectorType(i16, 16), ir.VectorType(ir.IntType(32), 16)
            src = builder.gep(builder.bitcast(xa.data, i16.as_pointer()), [i])
            dst = builder.bitcast(wa.data, ir.IntType(32).as_pointer())
            vector_blocks(builder, intp, m, src, dst, v16, v32,
                          lambda v: builder.shl(builder.zext(v, v32), splat(builder, ir.Constant(
                              ir.IntType(32), 16), v32)))  # fmt: skip
        x32 = builder.gep(builder.bitcast(xa.data, f32.as_pointer()), [i])
        x_at = SimpleNamespace(data=builder.select(is_bf16, wa.data, x32))
        x_type = types.Array(types.float32, 1, "C")
    else:
        x_at = SimpleNamespace(data=builder.gep(xa.data, [i]))
    types_ = (x_type, scale_type, scale_type)
    _metrics_ir(context, builder, types_, x_at, qa, ba, ra, (zero, zero, m, ovf, tie, tiny),
                1, (ca, kind))  # fmt: skip
    builder.store(builder.add(i, m), var["i"])
    # the next segment: k rows on, the row goes on, or the next row (counted on)
    row_on = builder.and_(builder.not_(rows), builder.icmp_signed("<", builder.add(j0, m), n3))
    builder.store(builder.select(row_on, builder.add(j0, m), zero), var["j0"])
    d1 = builder.select(rows, builder.add(d, k), builder.select(row_on, d, builder.add(d, one)))
    next_row(builder, var, a, b, d1, n1, n2)
    next(walk, None)  # (the loop's end)


def _fill_scales_ir(context, builder, elem, scale, buf, first, row_step, rows, length, inner):
    """``buf[r * length + t] = scale[first + r * row_step + t * inner]`` for ``rows`` rows
    of ``length``, ``inner`` 0 (each row one value) or 1 (a row copied), 16 at a time
    (masked at a row's end); ``scale`` and ``buf``: pointers to ``elem``.  (The same loops
    in Numba took 0.2 s of the fused study kernel's compile time, a scalar loop 0.04 s.)"""
    intp = context.get_value_type(types.intp)
    lanes = 16
    vt = ir.VectorType(elem, lanes)
    i32 = ir.IntType(32)
    as_int = ir.VectorType(ir.IntType(8 * context.get_abi_sizeof(elem)), lanes)
    zero, one = ir.Constant(intp, 0), ir.Constant(intp, 1)
    step = ir.Constant(intp, lanes)
    align = ir.Constant(i32, context.get_abi_sizeof(elem))
    zeros = ir.Constant(as_int, [0] * lanes)

    def row_mask(t):  # (the lanes of [t, t + 16) inside the row)
        return block_mask(builder, length, t, lanes)[0]

    with cgutils.for_range_slice(builder, zero, rows, one, intp) as (r, _):
        src = builder.add(first, builder.mul(r, row_step))
        dst = builder.gep(buf, [builder.mul(r, length)])
        splat_row = builder.icmp_signed("==", inner, zero)
        with builder.if_else(splat_row) as (then, otherwise):
            with then:
                v = splat(builder, builder.load(builder.gep(scale, [src])), vt)
                bits = builder.bitcast(v, as_int)
                with cgutils.for_range_slice(builder, zero, length, step, intp) as (t, _):
                    mask = row_mask(t)
                    p = builder.bitcast(builder.gep(dst, [t]), as_int.as_pointer())
                    masked_access(builder, "store", as_int, [bits, p, align, mask])
            with otherwise:  # (inner is 1: a copy, 16 at a time)
                with cgutils.for_range_slice(builder, zero, length, step, intp) as (t, _):
                    mask = row_mask(t)
                    at = builder.gep(scale, [builder.add(src, t)])
                    p = builder.bitcast(at, as_int.as_pointer())
                    value = masked_access(builder, "load", as_int, [p, align, mask, zeros])
                    q = builder.bitcast(builder.gep(dst, [t]), as_int.as_pointer())
                    masked_access(builder, "store", as_int, [value, q, align, mask])


def _narrow_bits(builder, q, kind):
    """float32 bits ``q`` (``<N x i32>``) rounded to nearest even in float16 or bfloat16
    (``kind``) and back, as float32 bits: an overflow gives Inf, a NaN stays a NaN."""
    vt = q.type

    def k(value):
        return ir.Constant(vt, [value] * vt.count)

    a = builder.and_(q, k(0x7FFFFFFF))
    nan = builder.icmp_unsigned(">", a, k(0x7F800000))
    if kind == BF16:  # (bfloat16 has float32's exponents: subnormals too by the formula)
        odd = builder.and_(builder.lshr(q, k(16)), k(1))
        r = builder.and_(builder.add(q, builder.add(k(0x7FFF), odd)), k(0xFFFF0000))
        return builder.select(nan, builder.or_(q, k(0x00400000)), r)  # (a NaN stays one)
    # float16: normal results at 13 dropped bits; below 2**-14 to multiples of 2**-24 by
    # adding and subtracting 0.5 in float32 (exact: the sum's step is 2**-24)
    vf = ir.VectorType(ir.FloatType(), vt.count)
    odd = builder.and_(builder.lshr(a, k(13)), k(1))
    normal = builder.and_(builder.add(a, builder.add(k(0xFFF), odd)), k(0xFFFFE000))
    half = ir.Constant(vf, [0.5] * vt.count)
    small = builder.fsub(builder.fadd(builder.bitcast(a, vf), half), half)
    r = builder.select(builder.icmp_unsigned("<", a, k(0x38800000)), builder.bitcast(small, vt),
                       normal)  # fmt: skip
    r = builder.select(builder.icmp_unsigned(">", r, k(0x477FE000)), k(0x7F800000), r)
    r = builder.select(nan, a, r)
    return builder.or_(r, builder.and_(q, k(0x80000000)))


def _metrics_ir(context, builder, arg_types, xa, qa, sa, ra, limits, runs, quant):
    """The code of :func:`segment_metrics` (``quant`` None) and
    :func:`quantize_segment_metrics` (``quant``: the constants' array and the kind)."""

    intp = context.get_value_type(types.intp)
    i32, i64 = ir.IntType(32), ir.IntType(64)
    f64 = ir.DoubleType()
    # (bfloat16 data comes as its bits: uint16, widened to float32 on load)
    bits16 = arg_types[0].dtype == types.uint16
    data = ir.FloatType() if bits16 else context.get_value_type(arg_types[0].dtype)
    vd, vf, vi = (ir.VectorType(t, _LANES) for t in (f64, data, i64))
    vs = ir.VectorType(context.get_value_type(arg_types[2].dtype), _LANES)

    def wide(value):  # a float32 scale (or vector of them) widened, exactly
        if value.type == vs and vs != vd:
            return builder.fpext(value, vd)
        return builder.fpext(value, f64) if value.type == ir.FloatType() else value

    module = builder.module

    def nbytes(ty):  # of a vector's element
        e = ty.element
        return e.width // 8 if isinstance(e, ir.IntType) else (4 if e == ir.FloatType() else 8)

    def xload(load, vt):
        """x's elements as floats (vt: a float vector type)"""
        if not bits16:
            return load(x0, vt)
        i16, i32 = ir.IntType(16), ir.IntType(32)
        v = builder.zext(load(x0, ir.VectorType(i16, vt.count)), ir.VectorType(i32, vt.count))
        return builder.bitcast(builder.shl(v, ir.Constant(v.type, [16] * vt.count)), vt)

    def fn(name, ret, params):
        return cgutils.get_or_insert_function(module, ir.FunctionType(ret, params), name)

    fabs = fn("llvm.fabs.v8f64", vd, [vd])
    umax = fn("llvm.umax.v8i64", vi, [vi, vi])
    i, s_at, m = limits[:3]
    ovf, tie, tiny = (splat(builder, v, vd) for v in limits[3:])
    tie_up = builder.fcmp_unordered("!=", tie, ir.Constant(vd, [0.0] * _LANES))
    zero_d, zero_i = ir.Constant(vd, [0.0] * _LANES), ir.Constant(vi, [0] * _LANES)
    inf = ir.Constant(vd, [float("inf")] * _LANES)
    x0, q0 = builder.gep(xa.data, [i]), builder.gep(qa.data, [i])
    s0 = builder.gep(sa.data, [s_at])
    s_one = None if runs else splat(builder, wide(builder.load(s0)), vd)
    names = ("se", "ss", "mabs", "mrel", "nan", "inf", "lost", "flushed", "sat", "sub")
    out = ra.data
    red_add = fn("llvm.vector.reduce.add.v8i64", i64, [vi])
    red_max = fn("llvm.vector.reduce.umax.v8i64", i64, [vi])

    def accumulators(keys):
        return {
            k: cgutils.alloca_once_value(builder, zero_d if k[:2] in ("se", "ss") else zero_i)
            for k in keys
        }

    def add(accs, name, value):
        acc = accs[name]
        if name[:2] in ("se", "ss"):
            total = builder.fadd(builder.load(acc), value)
        elif name in ("mabs", "mrel"):
            total = builder.call(umax, [builder.load(acc), value])
        else:
            total = builder.add(builder.load(acc), builder.zext(value, vi))
        builder.store(total, acc)

    def loads(load):
        xv, qv = xload(load, vf), load(q0, vf)
        if data != f64:
            xv, qv = builder.fpext(xv, vd), builder.fpext(qv, vd)
        s = s_one if not runs else wide(load(s0, vs))
        return xv, qv, s

    def counts(accs, qv, ax, aq, s, ok):
        """flushed, saturated and subnormal, where ``ok`` (None: every lane); returns
        where ``x`` is not zero (and ok)"""
        nz = builder.fcmp_unordered("!=", ax, zero_d)
        nz = nz if ok is None else builder.and_(ok, nz)
        add(accs, "flushed", builder.and_(nz, builder.fcmp_ordered("==", qv, zero_d)))
        y = builder.fmul(ax, s)
        at_tie = builder.and_(builder.fcmp_ordered("==", y, ovf), tie_up)
        sat = builder.or_(builder.fcmp_ordered(">", y, ovf), at_tie)
        add(accs, "sat", sat if ok is None else builder.and_(ok, sat))
        small = builder.fcmp_ordered("<", builder.fmul(aq, s), tiny)
        sub = builder.and_(builder.fcmp_unordered("!=", qv, zero_d), small)
        add(accs, "sub", sub if ok is None else builder.and_(ok, sub))
        return nz

    def full(accs, load):  # every figure, every element (NaN and Inf too)
        xv, qv, s = loads(load)
        ax, aq = builder.call(fabs, [xv]), builder.call(fabs, [qv])
        finite_x = builder.fcmp_ordered("<", ax, inf)
        q_finite = builder.fcmp_ordered("<", aq, inf)
        ok = builder.and_(finite_x, q_finite)
        e = builder.select(ok, builder.fsub(qv, xv), zero_d)
        xs = builder.select(ok, xv, zero_d)
        add(accs, "se", builder.fmul(e, e))
        add(accs, "ss", builder.fmul(xs, xs))
        ae = builder.call(fabs, [e])
        add(accs, "mabs", builder.bitcast(ae, vi))
        nz = counts(accs, qv, ax, aq, s, ok)
        rel = builder.select(nz, builder.fdiv(ae, ax), zero_d)
        add(accs, "mrel", builder.bitcast(rel, vi))
        add(accs, "nan", builder.fcmp_unordered("!=", xv, xv))
        add(accs, "inf", builder.fcmp_ordered("==", ax, inf))
        add(accs, "lost", builder.and_(finite_x, builder.not_(q_finite)))

    def masked_block(body, j, count, lanes):
        mask = first_lanes(builder, builder.trunc(count, i32), lanes)

        def as_ints(ptr, ty):  # (masked_access names the intrinsic by an integer type)
            as_int = ir.VectorType(ir.IntType(8 * nbytes(ty)), lanes)
            p = builder.bitcast(builder.gep(ptr, [j]), as_int.as_pointer())
            return p, as_int, ir.Constant(i32, nbytes(ty))

        def masked(ptr, ty):
            p, as_int, align = as_ints(ptr, ty)
            zero = ir.Constant(as_int, [0] * lanes)
            value = masked_access(builder, "load", as_int, [p, align, mask, zero])
            return builder.bitcast(value, ty)

        def masked_store(ptr, value):
            p, as_int, align = as_ints(ptr, value.type)
            bits = builder.bitcast(value, as_int)
            masked_access(builder, "store", as_int, [bits, p, align, mask])

        body(masked, masked_store)

    def loop(body, split=False, lanes=_LANES):
        # every block with masked loads (the mask all ones but in the last): one copy of
        # the formula, not a second for the tail (~0.03 s less to compile; masked loads
        # cost AVX-512 nothing more); ``split``: the whole blocks with plain loads (measured
        # 15% faster on the study's fused pass), then the tail masked
        step = ir.Constant(intp, lanes)
        zero = ir.Constant(intp, 0)
        if not split:
            with cgutils.for_range_slice(builder, zero, m, step, intp) as (j, _):
                left = builder.sub(m, j)
                left = builder.select(builder.icmp_signed("<", left, step), left, step)
                masked_block(body, j, left, lanes)
            return
        whole = builder.and_(m, ir.Constant(intp, -lanes))
        with cgutils.for_range_slice(builder, zero, whole, step, intp) as (j, _):

            def plain(ptr, ty):
                p = builder.bitcast(builder.gep(ptr, [j]), ty.as_pointer())
                return builder.load(p, align=nbytes(ty))

            def plain_store(ptr, value):
                p = builder.bitcast(builder.gep(ptr, [j]), value.type.as_pointer())
                builder.store(value, p, align=nbytes(value.type))

            body(plain, plain_store)
        left = builder.sub(m, whole)
        with builder.if_then(builder.icmp_signed(">", left, zero)):
            masked_block(body, whole, left, lanes)

    def lane_sum(v):  # (lane by lane, in one order: the fast and full paths agree)
        total = ir.Constant(f64, 0.0)
        for lane in range(_LANES):
            total = builder.fadd(total, builder.extract_element(v, ir.Constant(i32, lane)))
        return total

    def commit(accs):  # the segment's totals into the row
        for col, name in enumerate(names):
            if name not in accs:
                continue
            slot = builder.gep(out, [ir.Constant(intp, col)])
            v = builder.load(accs[name])
            if name in ("se", "ss"):
                builder.store(builder.fadd(builder.load(slot), lane_sum(v)), slot)
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

    if quant is None:
        accs = accumulators(names)
        loop(lambda load, _: full(accs, load))
        commit(accs)
        return

    # quantize_segment_metrics' fast path (see there), then what it needs
    fma = fn("llvm.fma.v8f64", vd, [vd, vd, vd])
    mr_slot = builder.gep(out, [ir.Constant(intp, MAX_REL)])
    mr = builder.load(mr_slot)
    # fl(ae / ax) > mr needs ae / ax >= mr + h (h: half mr's step to the next float64),
    # so ae - mr * ax >= h * ax exactly; tested as fl(fma(-mr, ax, ae)) > fl(hh * ax)
    # with hh = h * (1 - 2**-40): no false negatives (one rounding each, 2**-53)
    above = builder.bitcast(builder.add(builder.bitcast(mr, i64), ir.Constant(i64, 1)), f64)
    hh = builder.fmul(builder.fsub(above, mr), ir.Constant(f64, 0.5 * (1.0 - 2.0**-40)))
    neg_mr, hh = splat(builder, builder.fneg(mr), vd), splat(builder, hh, vd)
    quick = accumulators(("se", "ss", "mabs"))
    no_hit = ir.Constant(ir.VectorType(ir.IntType(1), _LANES), [0] * _LANES)
    hit = cgutils.alloca_once_value(builder, no_hit)  # (max_rel's candidates: any lane)
    ca, kind = quant
    if isinstance(kind, ir.Value):
        narrow_bf16 = builder.icmp_unsigned("==", kind, ir.Constant(kind.type, BF16))
        narrow_f16 = builder.icmp_unsigned("==", kind, ir.Constant(kind.type, F16))
    wide_lanes = 2 * _LANES  # (the float32 steps on 16 lanes, the float64 ones on 8)
    vb, vw = ir.VectorType(i32, wide_lanes), ir.VectorType(ir.FloatType(), wide_lanes)
    w, _ = _fake_constants(builder, ca.data, intp, vb)
    no_shift = ir.Constant(vw, [0.0] * wide_lanes)
    f32_zero = ir.Constant(vw, [0.0] * wide_lanes)
    fabs32 = fn("llvm.fabs.v16f32", vw, [vw])
    fma32 = fn("llvm.fma.v16f32", vw, [vw, vw, vw])
    # (the limits are float32 values: the caller checks)
    neg_ovf, neg_tiny = (splat(builder, builder.fneg(builder.fptrunc(v, ir.FloatType())), vw)
                         for v in limits[3::2])  # fmt: skip
    tie32 = splat(builder, builder.fcmp_unordered("!=", limits[4], ir.Constant(f64, 0.0)),
                  ir.VectorType(ir.IntType(1), wide_lanes))  # fmt: skip
    # per-segment counts in int32 lanes
    vc = ir.VectorType(i32, wide_lanes)
    tallies = {k: cgutils.alloca_once_value(builder, ir.Constant(vc, [0] * wide_lanes))
               for k in ("flushed", "sat", "sub")}  # fmt: skip

    def tally(name, flags):
        acc = tallies[name]
        builder.store(builder.add(builder.load(acc), builder.zext(flags, vc)), acc)

    def quantize(load, store):
        xf, s32 = xload(load, vw), load(s0, vw)
        xb = builder.bitcast(xf, vb)
        qb = _fake_body(builder, xb, w, s32, no_shift, ir.Constant(ir.IntType(1), 0))
        if isinstance(kind, ir.Value):  # (the kind an argument: a branch on it)
            entry = builder.basic_block
            with builder.if_then(builder.or_(narrow_bf16, narrow_f16), likely=False):
                hf, bf = _narrow_bits(builder, qb, F16), _narrow_bits(builder, qb, BF16)
                narrowed = builder.select(narrow_bf16, bf, hf)
                inner = builder.basic_block
            phi = builder.phi(qb.type)
            phi.add_incoming(qb, entry)
            phi.add_incoming(narrowed, inner)
            qb = phi
        elif kind != F32:
            qb = _narrow_bits(builder, qb, kind)
        qf = builder.bitcast(qb, vw)
        store(q0, qf)
        # the counts from the sign of one float32 FMA each: |x| * s - ovf and
        # |q| * s - tiny rounded once keep the sign of the exact difference
        ax32, aq32 = builder.call(fabs32, [xf]), builder.call(fabs32, [qf])
        over = builder.call(fma32, [ax32, s32, neg_ovf])
        at_tie = builder.and_(builder.fcmp_ordered("==", over, f32_zero), tie32)
        tally("sat", builder.or_(builder.fcmp_ordered(">", over, f32_zero), at_tie))
        under = builder.fcmp_ordered("<", builder.call(fma32, [aq32, s32, neg_tiny]), f32_zero)
        tally("sub", builder.and_(builder.fcmp_unordered("!=", qf, f32_zero), under))
        tally("flushed", builder.and_(builder.fcmp_unordered("!=", xf, f32_zero),
                                      builder.fcmp_ordered("==", qf, f32_zero)))  # fmt: skip

    def candidates(load, _):  # (x and q from L1: a second loop, as LLVM had split them)
        xv = builder.fpext(xload(load, vf), vd)
        qv = builder.fpext(load(q0, vf), vd)
        e = builder.fsub(qv, xv)
        add(quick, "se", builder.fmul(e, e))
        add(quick, "ss", builder.fmul(xv, xv))
        ae = builder.call(fabs, [e])
        add(quick, "mabs", builder.bitcast(ae, vi))
        ax = builder.call(fabs, [xv])
        d = builder.call(fma, [neg_mr, ax, ae])
        found = builder.fcmp_ordered(">", d, builder.fmul(hh, ax))
        builder.store(builder.or_(builder.load(hit), found), hit)

    loop(quantize, split=True, lanes=wide_lanes)
    loop(candidates, split=True)
    se, ss = (lane_sum(builder.load(quick[k])) for k in ("se", "ss"))
    sums = builder.fadd(se, ss)
    finite = builder.fcmp_ordered("<", sums, ir.Constant(f64, float("inf")))
    with builder.if_else(finite) as (then, otherwise):
        with then:
            commit(quick)
            red32 = fn("llvm.vector.reduce.add.v16i32", i32, [vc])
            for name, acc in tallies.items():
                slot = builder.gep(out, [ir.Constant(intp, names.index(name))])
                count = builder.uitofp(builder.call(red32, [builder.load(acc)]), f64)
                builder.store(builder.fadd(builder.load(slot), count), slot)
            any_hit = builder.bitcast(builder.load(hit), ir.IntType(_LANES))
            with builder.if_then(
                builder.icmp_unsigned("!=", any_hit, ir.Constant(any_hit.type, 0))
            ):
                rel_max = accumulators(("mrel",))

                def divide(load, _):
                    xv, qv = xload(load, vf), load(q0, vf)
                    if data != f64:
                        xv, qv = builder.fpext(xv, vd), builder.fpext(qv, vd)
                    ax = builder.call(fabs, [xv])
                    ae = builder.call(fabs, [builder.fsub(qv, xv)])
                    nz = builder.fcmp_unordered("!=", ax, zero_d)
                    rel = builder.select(nz, builder.fdiv(ae, ax), zero_d)
                    add(rel_max, "mrel", builder.bitcast(rel, vi))

                loop(divide)
                commit(rel_max)
        with otherwise:
            accs = accumulators(names)
            loop(lambda load, _: full(accs, load))
            commit(accs)


@functools.cache
def metrics_kernel(data_dtype: np.dtype, inner_runs: bool) -> Kernel | GenericNativeKernel:
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
    if native_available():  # (no Numba compile: see fp8kit._kernels.native)
        runs = 1 if inner_runs else 0
        key = ("metrics", np.dtype(data_dtype).str, runs)
        emit = _metrics_native(data_dtype, runs)
        return GenericNativeKernel(key, emit, _NO_PARAMS)
    version = source_version()
    sig = types.void(
        _arr(data_dtype), _arr(data_dtype), _arr(np.float64), _arr(np.int64), _arr(np.int64),
        _arr(np.float64), _arr(np.float64, 2, readonly=False), types.intp,
    )  # fmt: skip
    zero = np.float64(0.0)
    runs = 1 if inner_runs else 0

    def make(parallel):
        def kernel(x, q, scale, shape, sstr, limits, out, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            total = shape[0] * shape[1] * shape[2] * shape[3]
            step = (total + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                row = out[c]
                for k in range(N_METRICS):
                    row[k] = zero
                i = c * step
                hi = i + step if i + step < total else total
                chunk_metrics(x, q, scale, shape, sstr, limits, row, i, hi, runs)

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
    if native_available():  # (no Numba compile: see fp8kit._kernels.native)
        # (one function for the three widths, the width a parameter: a study of float64
        # or bfloat16 data after float32 compiles no further amax)
        params = np.array([bits_dt.itemsize * 8], np.uint32)
        params.flags.writeable = False
        return GenericNativeKernel(("amax_runs",), _amax_runs_native(), params)
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
            total = amax.size
            step = (total + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                t0, t1 = chunk_items(c, step, total)
                if t0 < t1:
                    runs_amax(bits, dims, mask, inf_bits, amax, bad, t0, t1)

        return kernel

    return Kernel(make, sig)


_NO_PARAMS = np.zeros(0, np.uint8)


def _amax_runs_native():
    """The emitter of :func:`amax_runs_kernel`'s native kernel, called as ``(prm, bits,
    dims, amax, bad, nchunks)``: the chunks split the runs (:func:`fp8kit._kernels.bits.
    emit_runs_amax` on their union, in a function of its own per width); ``prm[0]``: the
    bits' width (16, 32 or 64), which selects the function.  (The three compile in
    0.048-0.049 s, one alone in 0.022-0.023 s: the first study pays 0.027 s more, and a
    study of float64 or bfloat16 data after it compiles no amax of its own.)"""
    i64 = ir.IntType(64)
    i32 = ir.IntType(32)

    def emit(context, builder, args):
        ptrs, ints, _ = args
        prm = builder.bitcast(builder.load(ptrs), i32.as_pointer())
        width_now = builder.load(prm)
        loaded = [builder.load(builder.gep(ptrs, [ir.Constant(i64, k)])) for k in range(1, 5)]
        total = builder.load(builder.gep(ints, [ir.Constant(i64, 3)]))  # (amax's length)
        spec = builder.load(builder.gep(ints, [ir.Constant(i64, 5)]))
        t0, t1 = chunk_bounds(builder, spec, total)
        for width, dtype in ((16, ml_dtypes.bfloat16), (32, np.float32), (64, np.float64)):
            _, mask, inf_bits, _, _ = _amax_constants(dtype)
            iw = ir.IntType(width)
            arg_types = [iw.as_pointer(), i64.as_pointer(), iw.as_pointer(), iw.as_pointer(),
                         i64, i64]  # fmt: skip

            def body(inner, a, width=width, iw=iw, mask=int(mask), inf_bits=int(inf_bits)):
                emit_runs_amax(inner, i64, width, a[0], a[1], ir.Constant(iw, mask),
                               ir.Constant(iw, inf_bits), a[2], a[3], a[4], a[5])  # fmt: skip

            walk = body_function(builder, f"runs{width}", arg_types, body)
            this = builder.icmp_unsigned("==", width_now, ir.Constant(i32, width))
            with builder.if_then(builder.and_(this, builder.icmp_signed("<", t0, t1))):
                arrays = [builder.bitcast(p, t) for p, t in zip(loaded, arg_types[:4], strict=True)]
                builder.call(walk, [*arrays, t0, t1])
        return ir.Constant(i32, 0)

    return emit


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
    """Kernel ``(x, scale, shape, sstr, limits, out, nchunks)``: FakeConvert's quantization
    (nearest-even, saturating) of float32 data and the metrics of the result in one pass,
    the quantized values never stored.

    Per element: ``q = round(x * s) / s`` in float32 exactly as FakeConvert's kernels
    compute it for float32 data, then (``narrow`` ``"float16"`` or ``"bfloat16"``) rounded
    once to the data's dtype and back, as the study stores 16-bit results; then the figures
    of :func:`metrics_kernel` (:func:`quantize_segment_metrics`).  x: C-contiguous 1-D,
    float32, or for ``narrow`` ``"bfloat16"`` the data's bits (uint16: widened per segment
    into a buffer on the stack, no float32 copy); scale: float32 read through
    ``shape``/``sstr`` as there (any innermost stride); limits: float64 ``[overflow
    threshold, 1 if a tie at it rounds up, smallest normal]`` (see :func:`metrics_kernel`),
    the threshold and the smallest normal float32 values.

    The data is worked on in segments of at most :data:`SUM_BLOCK` elements, each summed on
    its own: the rest of a row, or whole rows when the scale is constant along rows shorter
    than that (MX blocks: 32 rows of 32).

    The format's constants are a run-time argument (bound first, see
    :class:`~fp8kit._kernels.codec.Kernel`), so that every format shares one compiled
    function per data type; all are rounded as if they had -0, as no figure tells -0 from
    +0 (the error, its square and magnitude, and the counts of zeros are the same).
    """
    r = list(round_params(fmt))
    r[11] = True  # (neg_zero: see above)
    return _quantize_metrics(narrow, fake_scalars(tuple(r), np.float32(1.0), None))


def _chunk_rows(builder, spec, total, out, call):
    """For each chunk of a call (``spec``: its packed chunk argument) of ``total`` items:
    row ``c`` of ``out`` (float64, N_METRICS a row) zeroed, then ``call(row, i, hi)`` for
    its items ``i .. hi - 1`` where it has any (as the Numba kernels' chunk loop)."""
    i64, f64 = ir.IntType(64), ir.DoubleType()

    def c(v):
        return ir.Constant(i64, v)

    nchunks, first, stop = spec_fields(builder, spec)
    step = builder.sdiv(builder.sub(builder.add(total, nchunks), c(1)), nchunks)
    with cgutils.for_range_slice(builder, first, stop, c(1), i64) as (ch, _):
        row = builder.gep(out, [builder.mul(ch, c(N_METRICS))])
        for t in range(N_METRICS):
            builder.store(ir.Constant(f64, 0.0), builder.gep(row, [c(t)]))
        i = builder.mul(ch, step)
        hi = builder.add(i, step)
        hi = builder.select(builder.icmp_signed("<", hi, total), hi, total)
        with builder.if_then(builder.icmp_signed("<", i, hi)):
            call(row, i, hi)


def _items_of(builder, shape):
    """The product of the 4 dimensions at ``shape`` (i64 pointer)."""
    total = builder.load(shape)
    for k in (1, 2, 3):
        total = builder.mul(total, builder.load(builder.gep(shape, [ir.Constant(total.type, k)])))
    return total


def _metrics_native(data_dtype: np.dtype, runs: int):
    """The emitter of :func:`metrics_kernel`'s native kernel, called as ``(x, q, scale,
    shape, sstr, limits, out, nchunks)`` (:func:`_emit_chunk_metrics` in a function of its
    own, per chunk)."""
    i32, i64, f64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
    data = ir.FloatType() if np.dtype(data_dtype) == np.float32 else f64
    arg_types = [data.as_pointer(), data.as_pointer(), f64.as_pointer(), i64.as_pointer(),
                 i64.as_pointer(), f64.as_pointer(), f64.as_pointer(), i64, i64]  # fmt: skip
    array = types.Array(from_dtype(np.dtype(data_dtype)), 1, "C")
    nb_types = (array, array, types.Array(types.float64, 1, "C"))

    def segment(context, inner, a):
        arrays = [SimpleNamespace(data=p) for p in a[:7]]
        _emit_chunk_metrics(context, inner, runs, nb_types, arrays, a[7], a[8])

    def emit(context, builder, args):
        ptrs, ints, _ = args
        loaded = [builder.load(builder.gep(ptrs, [ir.Constant(i64, k)])) for k in range(1, 8)]
        x, q, scale, shape, sstr, limits, out = (
            builder.bitcast(p, t) for p, t in zip(loaded, arg_types[:7], strict=True)
        )
        body = body_function(
            builder, "chunk", arg_types, lambda inner, a: segment(context, inner, a)
        )
        spec = builder.load(builder.gep(ints, [ir.Constant(i64, 8)]))

        def call(row, i, hi):
            builder.call(body, [x, q, scale, shape, sstr, limits, row, i, hi])

        _chunk_rows(builder, spec, _items_of(builder, shape), out, call)
        return ir.Constant(i32, 0)

    return emit


def _quantize_metrics_native():
    """The emitter of :func:`quantize_metrics_kernel`'s native kernel, called as ``(prm, x,
    scale, shape, sstr, limits, out, nchunks)``: as the Numba kernel, each chunk zeroes and
    fills its own row of ``out`` (:func:`_emit_quantize_chunk` in a function of its own,
    512-bit vectors preferred: measured 7% faster there, and stack buffers of its own).
    One function for every data type: the kind (the word after :func:`fake_scalars`') is read
    at run time, bfloat16 bits widened per segment into a third buffer, the narrowing
    behind a branch on it (a second dtype in a process then compiles nothing: a study
    sweep of bfloat16 data after float32 0.146-0.150 -> 0.032-0.035 s; the first sweep
    0.204-0.207 -> 0.207-0.219 s; 2048 x 2048 float32 sweeps 2-3% slower, where both
    narrowings computed and one selected cost 4-6%)."""
    i32, i64, f32, f64 = ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.DoubleType()
    x_type = types.Array(types.float32, 1, "C")
    scale_type = types.Array(types.float32, 1, "C")
    arg_types = [i32.as_pointer(), f32.as_pointer(), f32.as_pointer(), i64.as_pointer(),
                 i64.as_pointer(), f64.as_pointer(), f64.as_pointer(), i64, i64]  # fmt: skip

    def chunk(context, inner, a):
        buffers = []
        for _ in range(3):  # (the quantized values, the scales, widened bfloat16 data)
            buf = cgutils.alloca_once(inner, f32, size=_PADDED)
            buf.align = 64
            buffers.append(buf)
        arrays = [SimpleNamespace(data=p) for p in (*a[:7], *buffers)]
        kind = inner.load(inner.gep(a[0], [ir.Constant(i64, _FK_N)]))
        _emit_quantize_chunk(context, inner, kind, x_type, scale_type, arrays, a[7], a[8])

    def emit(context, builder, args):
        ptrs, ints, _ = args

        def c(v):
            return ir.Constant(i64, v)

        loaded = [builder.load(builder.gep(ptrs, [c(k)])) for k in range(7)]
        consts, x, scale, shape, sstr, limits, out = (
            builder.bitcast(p, t) for p, t in zip(loaded, arg_types[:7], strict=True)
        )
        body = body_function(
            builder, "chunk", arg_types, lambda inner, a: chunk(context, inner, a),
            prefer_512=True,
        )  # fmt: skip

        def call(row, i, hi):
            builder.call(body, [consts, x, scale, shape, sstr, limits, row, i, hi])

        spec = builder.load(builder.gep(ints, [c(7)]))
        _chunk_rows(builder, spec, _items_of(builder, shape), out, call)
        return ir.Constant(i32, 0)

    return emit


def _quantize_metrics(narrow: str, consts: np.ndarray) -> Kernel | GenericNativeKernel:
    kind = _KIND[narrow]
    if native_available():  # (no Numba compile: see fp8kit._kernels.native)
        # (the data's kind, fake.F32, F16 or BF16, after fake_scalars' words)
        params = np.append(consts, np.uint32(kind))
        params.flags.writeable = False
        return GenericNativeKernel(("quantize_metrics",), _quantize_metrics_native(), params)
    version = source_version()
    sig = types.void(
        _arr(np.uint32), _arr(np.uint16 if kind == BF16 else np.float32), _arr(np.float32),
        _arr(np.int64), _arr(np.int64), _arr(np.float64), _arr(np.float64, 2, readonly=False),
        types.intp,
    )  # fmt: skip
    zero = np.float64(0.0)

    def make(parallel):
        def kernel(prm, x, scale, shape, sstr, limits, out, nchunks):
            if version == 0 or parallel is None:  # see codec.source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            total = shape[0] * shape[1] * shape[2] * shape[3]
            step = (total + nchunks - 1) // nchunks
            qbuf = stack_buffer(_PADDED, np.float32)  # (no np.empty to compile)
            sbuf = stack_buffer(_PADDED, np.float32)
            for c in range(c_first, c_stop):
                prefer_512()  # measured 7% faster than LLVM's 256-bit default here
                row = out[c]
                for t in range(N_METRICS):
                    row[t] = zero
                i = c * step
                hi = i + step if i + step < total else total
                # (segments of at most SUM_BLOCK elements, each summed on its own and then
                # added to the chunk's sums: rounding errors do not grow with the chunk's
                # length, so any chunking (threads, Dask blocks, budgets) agrees to ~1e-14)
                quantize_chunk_metrics(
                    prm, x, scale, shape, sstr, limits, row, qbuf, sbuf, i, hi, kind
                )  # fmt: skip

        return kernel

    return Kernel(make, sig, key=("quantize_metrics", narrow), params=consts)
