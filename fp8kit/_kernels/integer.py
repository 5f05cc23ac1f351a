"""Float -> integer kernels: saturating (clamp, NaN -> 0), and the x86 bit patterns that the
ONNX reference (through numpy's ``x.astype(int_type)``) and ONNX Runtime produce for
out-of-range values."""

from __future__ import annotations

import functools

import numpy as np
from numba import from_dtype, types

from .bits import as_bits, as_float, chunk, chunk_range, chunks, prefer_512
from .codec import Kernel, source_version
from .inplace import NumbaNative


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
def saturating_kernel(in_dtype: np.dtype, out_dtype: np.dtype) -> NumbaNative:
    """float -> integer, truncating toward zero, clamped to the integer range, NaN -> 0
    (Cast's ``rules="legacy"``); it reads no lut or table (small calls pass x and out
    alone)."""
    in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
    info = np.iinfo(out_dtype)
    f = in_dtype.type
    # The clamp bounds as floats: values at or beyond them saturate.  float(info.max) can
    # round up (2**63 for int64), which is exactly the first value that must saturate.
    hi_f, lo_f = f(float(info.max)), f(float(info.min))
    hi, lo = out_dtype.type(info.max), out_dtype.type(info.min)
    zero = out_dtype.type(0)
    cast = out_dtype.type
    u64 = out_dtype == np.dtype(np.uint64)
    version = source_version()

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            if version == 0 or parallel is None:
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                prefer_512()
                xc, oc = chunks(x, out, c, step)
                for j in range(xc.size):
                    v = xc[j]
                    # (the conversion of an out-of-range value is undefined: selected only
                    # in range; uint64's range is past int64's, the others' within it)
                    r = cast(np.uint64(v)) if u64 else cast(np.int64(v))
                    r = lo if v <= lo_f else r
                    r = hi if v >= hi_f else r
                    oc[j] = zero if v != v else r

        return kernel

    kernel = NumbaNative(make, _sig(in_dtype, out_dtype))
    kernel.xo = True  # (no lut or table read)
    return kernel


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
def x86_kernel(in_dtype: np.dtype, target: str) -> NumbaNative:
    """float -> integer with the bits of numpy's casts on x86-64 (onnx.reference's answer),
    made deterministic (always numpy's scalar-loop bits), or with ONNX Runtime's (CPU) bits
    for the targets ``"uint32_vector"``, ``"int4_round"`` and ``"uint4_round"``: the float64
    value (float32 widened exactly) truncated (or rounded half away from zero), its range
    checked (x86's out-of-range answer the type's smallest integer), converted, the low
    bits kept.  It reads no lut or table (small calls pass x and out alone).  See
    docs/cast.md."""
    mode = _X86_MODES[target]
    out_dtype = np.dtype(np.int8) if mode in (4, 5, 7, 8) else np.dtype(target.split("_")[0])
    cast = out_dtype.type
    i32_min, i64_min = np.int64(-(2**31)), np.int64(-(2**63))
    lo32, hi32 = np.float64(-(2.0**31)), np.float64(2.0**31)
    lo64, hi64 = np.float64(-(2.0**63)), np.float64(2.0**63)
    max32 = np.float64(2.0**31 - 1)
    half, one_f, zero_f = np.float64(0.5), np.float64(1.0), np.float64(0.0)
    top32 = np.int64(1 << 31)
    low32, nib = np.int64(0xFFFFFFFF), np.int64(0xF)
    zero, eight, sixteen = np.int64(0), np.int64(8), np.int64(16)
    signed4 = mode in (4, 7)
    version = source_version()

    def make(parallel):
        def kernel(x, lut, table, out, nchunks):
            if version == 0 or parallel is None:
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                prefer_512()
                xc, oc = chunks(x, out, c, step)
                for j in range(xc.size):
                    v = np.float64(xc[j])
                    t = np.trunc(v)
                    # (the conversion of an out-of-range value is undefined: only selected
                    # where in range)
                    if mode == 0:
                        ok = (t >= lo32) & (t < hi32)
                        oc[j] = cast(np.int64(t) if ok else i32_min)
                    elif mode == 1:
                        ok = (t >= lo64) & (t < hi64)
                        oc[j] = np.int64(t) if ok else i64_min
                    elif mode == 2:  # (NaN and +-Inf fail both tests too)
                        ok = (t > lo64) & (t < hi64)
                        oc[j] = cast((np.int64(t) if ok else zero) & low32)
                    elif mode == 3:  # from 2**63 on, converted less 2**63, the top bit set
                        big = t >= hi64
                        s = t - hi64 if big else t
                        ok = (s >= lo64) & (s < hi64)
                        r = np.int64(s) if ok else i64_min
                        oc[j] = np.uint64(r ^ i64_min if big else r)
                    elif mode == 6:  # ONNX Runtime's uint32 (its vectorised pattern)
                        s = t - hi32
                        hi = np.int64(s) if s < hi32 else i32_min
                        hi = (hi ^ top32) & low32
                        lo = (np.int64(t) if t >= lo32 else i32_min) & low32
                        oc[j] = cast(hi if v >= hi32 else lo)  # (NaN: the low branch)
                    else:  # int4/uint4: the low 4 bits of the int32 conversion (ORT: rounded)
                        if mode >= 7:  # half away from zero (v - t is exact)
                            d = v - t
                            d = -d if d < zero_f else d
                            st = one_f if v > zero_f else -one_f
                            t = t + st if d >= half else t
                            ok = (t >= lo32) & (t <= max32)
                        else:
                            ok = (v >= lo32) & (v <= max32)
                        n = (np.int64(t) if ok else i32_min) & nib
                        if signed4:  # (8..15 are -8..-1)
                            n = n - sixteen if n >= eight else n
                        oc[j] = cast(n)

        return kernel

    kernel = NumbaNative(make, _sig(in_dtype, out_dtype))
    kernel.xo = True  # (no lut or table read)
    return kernel
