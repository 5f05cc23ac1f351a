"""One kernel for study.quantize's recipes on float32 data: the amaxes, and FakeConvert with
the scales they give, in LLVM vector code.

A cold ``study.quantize`` used to compile two kernels (the runs' amax, then FakeConvert's
rows or scalar kernel), each with a Numba-lowered loop around its vector code; this one
kernel walks the runs itself (see :func:`quantize_runs`) and takes what it does per call:

=====  =================================================================================
mode   per run ``t``
=====  =================================================================================
0      ``amax[t]``: the largest finite ``|x|`` (bits), ``bad[t]``: 1 if a NaN or Inf
1      FakeConvert (:func:`fp8kit._kernels.encode16._fake_body`) with ``scale[t]``
2      MX block scaling in one pass: the run's amax, its E8M0 code (``amax[t]``; 255 for a
       run holding a NaN or an Inf, whose elements all become NaN), FakeConvert with
       ``2**(127 - code)``
=====  =================================================================================

Runs are those of :func:`fp8kit._kernels.metrics.amax_runs_kernel`: the data seen as rows
of ``length`` elements, each row cut into runs of ``run`` elements (the last run of a row
shorter when the length is not a multiple).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .bits import (
    array_args,
    block_mask,
    chunk_items,
    chunk_range,
    masked_access,
    run_walk,
    splat,
    vector_blocks,
)
from .codec import Kernel, _array, source_version
from .encode16 import ROW_BLOCK, _fake_body, _fake_constants
from .native import GenericNativeKernel, body_function, chunk_bounds
from .native import available as native_available

AMAX, FAKE, MX = 0, 1, 2
#: E8M0's NaN code (an MX run holding a NaN or an Inf).
MX_NAN = 255


@intrinsic
def quantize_runs(typingctx, consts, x, scale, out, dims, amax, bad, t0, t1):
    """Runs ``t0 .. t1 - 1`` in the mode ``dims[0]`` (see the module), with ``dims =
    [mode, length, run, emax_elem]`` (``emax_elem``: the exponent of the element format's
    largest normal, MX mode only); x, out: float32 bits; scale: float32, one per run (FAKE
    mode); amax, bad: uint32, one per run."""
    if not isinstance(consts, types.Array):
        return None

    def codegen(context, builder, signature, args):
        arrays = array_args(context, builder, signature, args, 7)
        _emit_quantize_runs(context, builder, arrays, args[7], args[8])
        return context.get_dummy_value()

    sig = types.void(consts, x, scale, out, dims, amax, bad, t0, t1)
    return sig, codegen


def _emit_quantize_runs(context, builder, arrays, t0, t1):
    """The LLVM IR of :func:`quantize_runs` (``arrays``: its seven array arguments,
    anything with the ``.data`` pointer)."""
    ca, xa, sa, oa, da, aa, ba = arrays
    intp = context.get_value_type(types.intp)
    i1, i32, i64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
    lanes = ROW_BLOCK
    vin = ir.VectorType(i32, lanes)
    vf = ir.VectorType(ir.FloatType(), lanes)

    def k32(value):
        return ir.Constant(i32, value)

    def v32(value):
        return ir.Constant(vin, [value] * lanes)

    def at(arr, k):
        return builder.load(builder.gep(arr.data, [k]))

    mode, length, run, emax = (at(da, ir.Constant(intp, k)) for k in range(4))
    w, _ = _fake_constants(builder, ca.data, intp, vin)
    no_shift = ir.Constant(vf, [0.0] * lanes)
    umax = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vin, [vin, vin]), "llvm.umax.v16i32"
    )
    red_max = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(i32, [vin]), "llvm.vector.reduce.umax.v16i32"
    )
    ctlz = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(i32, [i32, i1]), "llvm.ctlz.i32"
    )
    with run_walk(builder, intp, length, run, t0, t1) as (t, lo, n):
        src = builder.gep(xa.data, [lo])
        finite = cgutils.alloca_once_value(builder, ir.Constant(i32, 0))
        top = cgutils.alloca_once_value(builder, ir.Constant(i32, 0))
        with builder.if_then(builder.icmp_signed("!=", mode, ir.Constant(i64, FAKE))):
            # the largest |x| (Inf and NaN the largest bits) and the largest finite one;
            # masked lanes load as 0, which changes neither
            acc_top = cgutils.alloca_once_value(builder, v32(0))
            acc_fin = cgutils.alloca_once_value(builder, v32(0))
            step = ir.Constant(intp, lanes)
            with cgutils.for_range_slice(builder, ir.Constant(intp, 0), n, step, intp) as (
                j, _,
            ):  # fmt: skip
                mask, _ = block_mask(builder, n, j, lanes)
                p = builder.bitcast(builder.gep(src, [j]), vin.as_pointer())
                v = masked_access(builder, "load", vin, [p, k32(4), mask, v32(0)])
                a = builder.and_(v, v32(0x7FFFFFFF))
                fin = builder.select(builder.icmp_unsigned("<", a, v32(0x7F800000)), a, v32(0))
                builder.store(builder.call(umax, [builder.load(acc_top), a]), acc_top)
                builder.store(builder.call(umax, [builder.load(acc_fin), fin]), acc_fin)
            builder.store(builder.call(red_max, [builder.load(acc_top)]), top)
            builder.store(builder.call(red_max, [builder.load(acc_fin)]), finite)
        amax_t, top_t = builder.load(finite), builder.load(top)
        is_bad = builder.icmp_unsigned(">=", top_t, k32(0x7F800000))
        with builder.if_else(builder.icmp_signed("==", mode, ir.Constant(i64, AMAX))) as (
            amax_mode, other,
        ):  # fmt: skip
            with amax_mode:
                builder.store(amax_t, builder.gep(aa.data, [t]))
                builder.store(builder.zext(is_bad, i32), builder.gep(ba.data, [t]))
            with other:
                # MX: floor(log2(amax)) from the exponent field (a subnormal's from its
                # leading zeros), the code clamped to E8M0's [0, 254] (an all-zero run
                # 0), 255 for a run holding a NaN or an Inf
                field = builder.lshr(amax_t, k32(23))
                lead = builder.call(ctlz, [amax_t, ir.Constant(i1, 0)])
                log2 = builder.select(
                    builder.icmp_unsigned("!=", field, k32(0)),
                    builder.sub(field, k32(127)), builder.sub(k32(31 - 149), lead),
                )  # fmt: skip
                code = builder.add(builder.sub(log2, builder.trunc(emax, i32)), k32(127))
                code = builder.select(builder.icmp_signed("<", code, k32(0)), k32(0), code)
                code = builder.select(builder.icmp_signed(">", code, k32(254)), k32(MX_NAN),
                                      code)  # fmt: skip
                code = builder.select(builder.icmp_unsigned("==", amax_t, k32(0)), k32(0),
                                      code)  # fmt: skip
                code = builder.select(is_bad, k32(MX_NAN), code)
                is_mx = builder.icmp_signed("==", mode, ir.Constant(i64, MX))
                with builder.if_then(is_mx):
                    builder.store(code, builder.gep(aa.data, [t]))
                # 2**(127 - code) as float32 bits (a subnormal for code 254)
                e2 = builder.sub(k32(127), code)
                normal = builder.shl(builder.add(e2, k32(127)), k32(23))
                sub = builder.shl(k32(1), builder.add(e2, k32(149)))
                mx_bits = builder.select(builder.icmp_signed(">=", e2, k32(-126)), normal, sub)
                mx_scale = builder.bitcast(mx_bits, ir.FloatType())
                s = builder.select(is_mx, mx_scale, builder.load(builder.gep(sa.data, [t])))
                nan_run = builder.and_(is_mx, builder.icmp_unsigned("==", code, k32(MX_NAN)))
                nan_all = splat(builder, nan_run, ir.VectorType(i1, lanes))
                sv = splat(builder, s, vf)

                def body(v):
                    r = _fake_body(builder, v, w, sv, no_shift, ir.Constant(i1, 0))
                    return builder.select(nan_all, v32(0x7FC00000), r)

                dst = builder.gep(oa.data, [lo])
                vector_blocks(builder, intp, n, src, dst, vin, vin, body)


def _quantize_native(context, builder, args):
    """The native kernel of :func:`quantize_kernel` (:data:`fp8kit._kernels.native.
    GENERIC_TYPE`), called as ``(consts, x, scale, out, dims, amax, bad, nchunks)``: the
    chunks split the runs, one call runs their union (in a function of its own)."""
    ptrs, ints, _ = args
    i32, i64 = ir.IntType(32), ir.IntType(64)
    i32p = i32.as_pointer()
    arg_types = [i32p, i32p, ir.FloatType().as_pointer(), i32p, i64.as_pointer(), i32p, i32p,
                 i64, i64]  # fmt: skip
    loaded = [builder.load(builder.gep(ptrs, [ir.Constant(i64, k)])) for k in range(1, 8)]
    pointers = [builder.bitcast(p, t) for p, t in zip(loaded, arg_types[:7], strict=True)]
    total = builder.load(builder.gep(ints, [ir.Constant(i64, 6)]))  # (amax's length)
    t0, t1 = chunk_bounds(builder, builder.load(builder.gep(ints, [ir.Constant(i64, 8)])), total)

    def runs(inner, a):
        arrays = [SimpleNamespace(data=p) for p in a[:7]]
        _emit_quantize_runs(context, inner, arrays, a[7], a[8])

    body = body_function(builder, "runs", arg_types, runs)
    with builder.if_then(builder.icmp_signed("<", t0, t1)):
        builder.call(body, [*pointers, t0, t1])
    return ir.Constant(i32, 0)


def _make(parallel):
    version = source_version()

    def kernel(consts, x, scale, out, dims, amax, bad, nchunks):
        if version == 0 or parallel is None:  # never true; see codec.source_version
            return
        nchunks, c_first, c_stop = chunk_range(nchunks)
        total = amax.size
        step = (total + nchunks - 1) // nchunks
        for c in range(c_first, c_stop):
            t0, t1 = chunk_items(c, step, total)
            if t0 < t1:
                quantize_runs(consts, x, scale, out, dims, amax, bad, t0, t1)

    return kernel


_NO_PARAMS = np.zeros(0, np.uint8)


@functools.cache
def quantize_kernel() -> Kernel | GenericNativeKernel:
    """Kernel ``(consts, x, scale, out, dims, amax, bad, nchunks)`` of :func:`quantize_runs`
    (``consts``: :func:`fp8kit._kernels.encode16.fake_scalars` of the format; x, out:
    float32 bits, C-contiguous 1-D; the chunks split the runs, one per entry of amax).
    The caller checks what :func:`fp8kit._kernels.encode16.fake_kernel` needs: float32
    data, an 8-bit format that rounds in place, nearest-even, no NaN scale (FAKE mode)."""
    if native_available():  # (no Numba compile: see fp8kit._kernels.native)
        return GenericNativeKernel(("quantize32",), _quantize_native, _NO_PARAMS)
    ro = functools.partial(_array, readonly=True)
    sig = types.void(
        ro(np.uint32), ro(np.uint32), ro(np.float32), _array(np.uint32), ro(np.int64),
        _array(np.uint32), _array(np.uint32), types.intp,
    )  # fmt: skip
    return Kernel(_make, sig, ("quantize32", source_version()))
