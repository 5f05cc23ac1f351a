"""Float -> integer kernels: saturating (clamp, NaN -> 0), and the x86 bit patterns that the
ONNX reference (through numpy's ``x.astype(int_type)``) and ONNX Runtime produce for
out-of-range values."""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import from_dtype, types
from numba.core import cgutils

from .bits import as_bits, as_float, chunk, chunk_range, vector_blocks
from .codec import Kernel, dummy, source_version
from .native import NativeKernel, typed_pointer


def _sig(in_dtype, out_dtype):
    def arr(dt, readonly):
        return types.Array(from_dtype(np.dtype(dt)), 1, "C", readonly=readonly)

    return types.void(
        arr(in_dtype, True),
        arr(np.uint32, True),
        arr(np.uint8, True),
        arr(out_dtype, False),
        types.intp,
    )


@functools.cache
def saturating_kernel(in_dtype: np.dtype, out_dtype: np.dtype) -> NativeKernel:
    """float -> integer, truncating toward zero, clamped to the integer range, NaN -> 0
    (Cast's ``rules="legacy"``): :func:`_saturating_numba`'s bits as a native kernel of LLVM
    vector code, which that Numba kernel took 0.50 s to compile on a first call."""
    in_bits = np.dtype(in_dtype).itemsize * 8
    out_dtype = np.dtype(out_dtype)
    signed = out_dtype.kind == "i"
    key = ("saturating_int", in_bits, out_dtype.itemsize * 8, signed)
    emit = _saturating_emitter(in_bits, out_dtype.itemsize * 8, signed)
    kernel = NativeKernel(key, emit, dummy(np.uint8))
    kernel.xo = True  # (no lut or table read)
    return kernel


def _unary_emitter(in_bits: int, out_bits: int, lanes: int, body_of):
    """The emitter of a native kernel writing ``body(v)`` of each vector of ``lanes``
    elements of x (``in_bits`` each) to out (``out_bits``), ``body = body_of(builder)``."""

    def emit(context, builder, args):
        _, _, _, x, out, first, stop, _ = args
        intp = context.get_value_type(types.intp)
        vin = ir.VectorType(ir.IntType(in_bits), lanes)
        vout = ir.VectorType(ir.IntType(out_bits), lanes)
        x_at = typed_pointer(builder, x, in_bits, first)
        out_at = typed_pointer(builder, out, out_bits, first)
        n = builder.sub(stop, first)
        vector_blocks(builder, intp, n, x_at, out_at, vin, vout, body_of(builder))
        return ir.Constant(ir.IntType(32), 0)

    return emit


def _saturating_emitter(in_bits: int, out_bits: int, signed: bool):
    lanes = 16
    info = np.iinfo(f"{'i' if signed else 'u'}{out_bits // 8}")
    ftype = np.float32 if in_bits == 32 else np.float64
    # (the bounds as the input's floats: float(info.max) may round up, as 2**63 for int64,
    # which is then exactly the first value that saturates)
    hi_f, lo_f = float(ftype(info.max)), float(ftype(info.min))

    def body_of(builder):
        i64 = ir.IntType(64)
        float_type = ir.FloatType() if in_bits == 32 else ir.DoubleType()
        vf, vi = ir.VectorType(float_type, lanes), ir.VectorType(i64, lanes)
        vout = ir.VectorType(ir.IntType(out_bits), lanes)

        def f(value):
            return ir.Constant(vf, [value] * lanes)

        def k(value):
            return ir.Constant(vi, [value & (2**64 - 1)] * lanes)

        def body(v):
            v = builder.bitcast(v, vf)
            # (the conversion of an out-of-range value is poison: selected only in range;
            # uint64's range is past int64's, the others' within it)
            r = builder.fptoui(v, vi) if out_bits == 64 and not signed else builder.fptosi(v, vi)
            r = builder.select(builder.fcmp_ordered("<=", v, f(lo_f)), k(int(info.min)), r)
            r = builder.select(builder.fcmp_ordered(">=", v, f(hi_f)), k(int(info.max)), r)
            r = builder.select(builder.fcmp_unordered("uno", v, v), k(0), r)
            return builder.trunc(r, vout) if out_bits < 64 else r

        return body

    return _unary_emitter(in_bits, out_bits, lanes, body_of)


@functools.cache
def _saturating_numba(in_dtype: np.dtype, out_dtype: np.dtype) -> Kernel:
    """float -> integer, truncating toward zero, clamped to the integer range, NaN -> 0: the
    Numba kernel :func:`saturating_kernel` stands for (kept as the tests' reference)."""
    info = np.iinfo(out_dtype)
    f = np.dtype(in_dtype).type
    # The clamp bounds as floats: values at or beyond them saturate.  float(info.max) can
    # round up (2**63 for int64), which is exactly the first value that must saturate.
    hi_f, lo_f = f(float(info.max)), f(float(info.min))
    hi, lo = np.dtype(out_dtype).type(info.max), np.dtype(out_dtype).type(info.min)
    zero = np.dtype(out_dtype).type(0)
    cast = np.dtype(out_dtype).type
    version = source_version()

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            if version == 0 or parallel is None:
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                xc, oc = chunk(x, c, step), chunk(out, c, step)
                for j in range(xc.size):
                    v = xc[j]
                    if v != v:
                        oc[j] = zero
                    elif v >= hi_f:
                        oc[j] = hi
                    elif v <= lo_f:
                        oc[j] = lo
                    else:
                        oc[j] = cast(v)

        return kernel

    return Kernel(make, _sig(in_dtype, out_dtype))


@functools.cache
def int_to_odd_float64_kernel(in_dtype: np.dtype) -> Kernel:
    """int64/uint64 -> float64 rounded to odd (the exact value's nearest float64 with an odd
    mantissa when inexact): one further rounding to a format of at most 51 bits of precision
    then equals one rounding of the integer, so int -> float8/bfloat16 never double-rounds."""
    unsigned = np.dtype(in_dtype) == np.uint64
    two63 = np.float64(2.0**63)
    two64 = np.float64(2.0**64)
    one = np.uint64(1)
    zero_u = np.uint64(0)
    top = np.uint64(1 << 63)
    version = source_version()

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            if version == 0 or parallel is None:
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                xc, oc = chunk(x, c, step), chunk(out, c, step)
                for j in range(xc.size):
                    v = xc[j]
                    f = np.float64(v)  # nearest-even
                    # f as an integer modulo 2**64, then v - f (exact, |v - f| < 2**11)
                    if unsigned:
                        back = zero_u if f >= two64 else np.uint64(f)
                    elif f >= two63:
                        back = top
                    else:
                        back = np.uint64(np.int64(f))
                    diff = np.int64(np.uint64(v) - back)
                    bits = as_bits(f)
                    if diff != 0 and (bits & one) == zero_u:
                        bits = bits + one if (diff > 0) == (f > 0) else bits - one
                    oc[j] = as_float(bits)

        return kernel

    return Kernel(make, _sig(in_dtype, np.float64))


_X86_MODES = {
    "int8": 0, "int16": 0, "uint8": 0, "uint16": 0, "int32": 0,  # low bits of cvt32
    "int64": 1, "uint32": 2, "uint64": 3, "int4": 4, "uint4": 5,
    # ONNX Runtime (CPU): float32/float64/bfloat16 -> uint32 through the vectorised pattern
    # (x >= 2**31 ? cvt32(x - 2**31) ^ 2**31 : cvt32(x)); int4/uint4 rounded half away
    # from zero (std::round), then the int32 range check and the low 4 bits
    "uint32_vector": 6, "int4_round": 7, "uint4_round": 8,
}  # fmt: skip


@functools.cache
def x86_kernel(in_dtype: np.dtype, target: str) -> Kernel:
    """float -> integer with the bits of numpy's casts on x86-64 (onnx.reference's answer)
    or ONNX Runtime's (see :func:`_x86_numba`, the Numba kernel it stands for, which took
    0.42 s to compile on a first call), as a native kernel of LLVM vector code
    (:func:`_x86_native`)."""
    mode = _X86_MODES[target]
    out_dtype = np.dtype(np.int8) if mode in (4, 5, 7, 8) else np.dtype(target.split("_")[0])
    return _x86_native(np.dtype(in_dtype), mode, out_dtype)


def _x86_native(in_dtype: np.dtype, mode: int, out_dtype: np.dtype) -> NativeKernel:
    """:func:`_x86_numba`'s modes written out: the float64 value (float32 widened exactly)
    truncated (or rounded half away from zero), its range checked (x86's out-of-range
    answer the type's smallest integer), converted, the low bits kept."""
    in_bits, out_bits = in_dtype.itemsize * 8, out_dtype.itemsize * 8
    key = ("x86_int", in_bits, mode, out_bits)
    kernel = NativeKernel(key, _x86_emitter(in_bits, mode, out_bits), dummy(np.uint8))
    kernel.xo = True  # (no lut or table read)
    return kernel


def _x86_emitter(in_bits: int, mode: int, out_bits: int):
    lanes = 16

    def body_of(builder):
        i64, f64 = ir.IntType(64), ir.DoubleType()
        vd, vi = ir.VectorType(f64, lanes), ir.VectorType(i64, lanes)
        vout = ir.VectorType(ir.IntType(out_bits), lanes)
        trunc = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vd, [vd]), f"llvm.trunc.v{lanes}f64"
        )

        def d(value):
            return ir.Constant(vd, [value] * lanes)

        def k(value):
            return ir.Constant(vi, [value] * lanes)

        def body(v):
            f = builder.bitcast(v, ir.VectorType(ir.FloatType() if in_bits == 32 else f64, lanes))
            f = builder.fpext(f, vd) if in_bits == 32 else f
            t = builder.call(trunc, [f])
            # (fptosi of an out-of-range value is poison: only selected where in range)
            r = builder.fptosi(t, vi)
            if mode == 0:
                ok = builder.and_(builder.fcmp_ordered(">=", t, d(-(2.0**31))),
                                  builder.fcmp_ordered("<", t, d(2.0**31)))  # fmt: skip
                r = builder.select(ok, r, k(-(2**31)))
            elif mode == 1:
                ok = builder.and_(builder.fcmp_ordered(">=", t, d(-(2.0**63))),
                                  builder.fcmp_ordered("<", t, d(2.0**63)))  # fmt: skip
                r = builder.select(ok, r, k(-(2**63)))
            elif mode == 2:  # (NaN and +-Inf fail both tests too)
                ok = builder.and_(builder.fcmp_ordered(">", t, d(-(2.0**63))),
                                  builder.fcmp_ordered("<", t, d(2.0**63)))  # fmt: skip
                r = builder.and_(builder.select(ok, r, k(0)), k(0xFFFFFFFF))
            elif mode == 3:  # uint64: from 2**63 on, converted less 2**63, the top bit set
                big = builder.fcmp_ordered(">=", t, d(2.0**63))
                sv = builder.select(big, builder.fsub(t, d(2.0**63)), t)
                ok = builder.and_(builder.fcmp_ordered(">=", sv, d(-(2.0**63))),
                                  builder.fcmp_ordered("<", sv, d(2.0**63)))  # fmt: skip
                r = builder.select(ok, builder.fptosi(sv, vi), k(-(2**63)))
                r = builder.select(big, builder.xor(r, k(-(2**63))), r)
            elif mode == 6:  # ONNX Runtime's uint32 (its vectorised pattern)
                big = builder.fcmp_ordered(">=", f, d(2.0**31))
                sv = builder.fsub(t, d(2.0**31))
                hi = builder.select(builder.fcmp_ordered("<", sv, d(2.0**31)),
                                    builder.fptosi(sv, vi), k(-(2**31)))  # fmt: skip
                hi = builder.and_(builder.xor(hi, k(1 << 31)), k(0xFFFFFFFF))
                lo = builder.select(builder.fcmp_ordered(">=", t, d(-(2.0**31))), r,
                                    k(-(2**31)))  # fmt: skip
                r = builder.select(big, hi, builder.and_(lo, k(0xFFFFFFFF)))
            else:  # int4/uint4: the low 4 bits of the int32 conversion (ORT: rounded)
                if mode >= 7:  # half away from zero (v - t is exact)
                    frac = builder.fsub(f, t)
                    fabs = builder.select(builder.fcmp_ordered("<", frac, d(0.0)),
                                          builder.fsub(d(0.0), frac), frac)  # fmt: skip
                    step = builder.select(builder.fcmp_ordered(">", f, d(0.0)), d(1.0), d(-1.0))
                    t = builder.select(builder.fcmp_ordered(">=", fabs, d(0.5)),
                                       builder.fadd(t, step), t)  # fmt: skip
                    r = builder.fptosi(t, vi)
                checked = t if mode >= 7 else f
                ok = builder.and_(builder.fcmp_ordered(">=", checked, d(-(2.0**31))),
                                  builder.fcmp_ordered("<=", checked, d(2.0**31 - 1)))  # fmt: skip
                n = builder.and_(builder.select(ok, r, k(-(2**31))), k(0xF))
                if mode in (4, 7):  # (signed: 8..15 are -8..-1)
                    n = builder.select(builder.icmp_signed(">=", n, k(8)),
                                       builder.sub(n, k(16)), n)  # fmt: skip
                r = n
            return builder.trunc(r, vout) if out_bits < 64 else r

        return body

    return _unary_emitter(in_bits, out_bits, lanes, body_of)


@functools.cache
def _x86_numba(in_dtype: np.dtype, target: str) -> Kernel:
    """float -> integer with the bits of numpy's casts on x86-64 (onnx.reference's answer),
    made deterministic (always numpy's scalar-loop bits), or with ONNX Runtime's (CPU) bits
    for the targets ``"uint32_vector"``, ``"int4_round"`` and ``"uint4_round"``.  See
    docs/cast.md."""
    mode = _X86_MODES[target]
    out_dtype = np.dtype(np.int8) if mode in (4, 5, 7, 8) else np.dtype(target.split("_")[0])
    cast = out_dtype.type
    i32_min, i64_min = np.int64(-(2**31)), np.int64(-(2**63))
    lo32, hi32 = np.float64(-(2.0**31)), np.float64(2.0**31)
    lo64, hi64 = np.float64(-(2.0**63)), np.float64(2.0**63)
    max32 = np.float64(2.0**31 - 1)
    half, one_f = np.float64(0.5), np.float64(1.0)
    top32 = np.int64(1 << 31)
    low32, nib = np.int64(0xFFFFFFFF), np.int64(0xF)
    top = np.uint64(1 << 63)
    version = source_version()

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            if version == 0 or parallel is None:
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                xc, oc = chunk(x, c, step), chunk(out, c, step)
                for j in range(xc.size):
                    v = np.float64(xc[j])
                    t = np.trunc(v)
                    if mode == 0:
                        r = np.int64(t) if lo32 <= t < hi32 else i32_min
                        oc[j] = cast(r)
                    elif mode == 1:
                        oc[j] = np.int64(t) if lo64 <= t < hi64 else i64_min
                    elif mode == 2:
                        ok = lo64 < t < hi64  # NaN and +-Inf fail too
                        oc[j] = cast((np.int64(t) if ok else np.int64(0)) & low32)
                    elif mode == 3:
                        s = t - hi64 if t >= hi64 else t
                        r = np.int64(s) if lo64 <= s < hi64 else i64_min
                        u = np.uint64(r)
                        oc[j] = u ^ top if t >= hi64 else u
                    elif mode == 6:
                        if v >= hi32:  # (NaN takes the other branch)
                            s = t - hi32
                            r = np.int64(s) if s < hi32 else i32_min
                            oc[j] = cast((r ^ top32) & low32)
                        else:
                            r = np.int64(t) if lo32 <= t else i32_min
                            oc[j] = cast(r & low32)
                    else:
                        if mode >= 7:  # round half away from zero (v - t is exact)
                            if abs(v - t) >= half:
                                t = t + one_f if v > 0 else t - one_f
                            ok = lo32 <= t <= max32
                        else:
                            ok = lo32 <= v <= max32
                        r = np.int64(t) if ok else i32_min
                        n = r & nib
                        oc[j] = cast(n - 16 if mode in (4, 7) and n >= 8 else n)

        return kernel

    return Kernel(make, _sig(in_dtype, out_dtype))
