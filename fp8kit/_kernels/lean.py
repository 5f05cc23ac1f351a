"""encode (nearest-even) to the formats off the byte lanes, as a native kernel: the formula
of :func:`fp8kit._kernels.bits.encode_lean` written out in LLVM vector code.

The byte-lane kernels (:mod:`fp8kit._kernels.encode16`) take the float8 formats and the
8-bit P3109 formats with 2-4 mantissa bits; the others (float8_e3m4, the float6 and float4
formats, bfloat16 and float16, most P3109 formats) ran the Numba-lowered kernel of
:func:`fp8kit._kernels.codec.encode_kernel`, whose first call in a process pays Numba's
set-up (0.3 s here) on top of its compile.  This kernel computes the same codes from the
same constants (:func:`fp8kit._kernels.codec._params` and
:func:`fp8kit._kernels.codec.lean_params`, so only where the general kernel itself rounds
by ``encode_lean``): float32 and float64 data on their own bits, bfloat16 and float16
widened to float32 bits exactly in the kernel (as the general kernel's loads do).
:func:`unsigned_kernel` does the same for float8_e8m0fnu's formula
(:func:`fp8kit._kernels.bits.encode_unsigned` and its rounding modes).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from llvmlite import ir
from numba import types

from ..formats import FloatFormat
from . import encode16
from .bits import load_planes, plane_values, splat, vector_blocks, widen_half
from .codec import (
    LOAD_DIRECT,
    STREAM_MIN_TRAFFIC,
    _odd_parity,
    _params,
    _strategy,
    lean_params,
    plan,
)
from .native import NativeKernel, typed_pointer
from .rounding import NEAREST_AWAY, NEAREST_EVEN, TOWARD_NEGATIVE, TOWARD_POSITIVE, TOWARD_ZERO

#: The data kinds: (bits read an element, source layout the rounding works on)
_KINDS = {
    np.dtype(np.float32): (32, "float32"),
    np.dtype(np.float64): (64, "float64"),
    np.dtype(ml_dtypes.bfloat16): (16, "float32"),
    np.dtype(np.float16): (16, "float32"),
}

# Layout of lean_kernel's parameter array (words of the source's width).
(_ABS, _RB, _ODD_BIT, _SH, _MIN_NORMAL, _MAGIC, _OVF, _NAN_THR, _NAN, _SIGN, _NEG_THR, _ONE,
 _N) = range(13)  # fmt: skip

#: The tiny step (see _lean_emitter): float32 subnormal bits to codes of 2**-127.
_TINY_SH = 22
_TINY_HALF = (1 << (_TINY_SH - 1)) - 1

#: Elements a vector: one cache line of 8-bit codes (32 of 16-bit ones).
LANES = {1: 64, 2: 32}


@functools.cache
def lean_kernel(fmt: FloatFormat, dtype: np.dtype, saturate) -> NativeKernel | None:
    """Kernel rounding ``dtype`` data (float32, float64, bfloat16 or float16 bits) to
    ``fmt`` codes, nearest-even, with :func:`fp8kit._kernels.codec.encode_kernel`'s call
    and results; None where that kernel does not round by ``encode_lean`` (or rounds
    widened float64, or an unsigned format), except for P3109's precision-1 formats (see
    below) and float16 data, which widens to float32 normals: any format within float32's
    range then.

    bfloat16 and float16 data to formats of 8 bits or fewer round on 16-bit lanes (the
    formula of :func:`fp8kit._kernels.encode16._vector_body`, on the constants of
    :func:`fp8kit._kernels.encode16._prm` with ``normals``), 64 elements in two vectors
    where widened to float32 they take four, and a block of 64 holding a source subnormal
    widened (one branch a block): 0.62-0.64 -> about 1.0 of the streaming limit, one thread
    (float16 -> P3109's precision-1 formats, bfloat16 -> the unsigned ones).  Both
    formulas' codes are compared in numpy on every 16-bit input but the subnormals when
    the kernel is made (:func:`_lean_codes`); where they differ the widening takes all."""
    dtype = np.dtype(dtype)
    if dtype not in _KINDS or fmt.specials == "unsigned":
        return None
    bits, source = _KINDS[dtype]
    half = dtype == np.float16
    pl = plan(fmt, dtype)
    # P3109's precision-1 formats: the plan widens them to float64 (their ties go to the
    # even code, whose parity is the opposite of float32's exponent bit, which the general
    # kernel's tie rule reads); this kernel rounds them from float32 bits by the opposite
    # tie test
    flip = source == "float32" and _odd_parity(fmt, source)
    tiny = False
    if half:
        # (no float16 is a float32 subnormal: the FPU step only needs a normal magic)
        if fmt.maxexp - 1 > 127 or fmt.minexp < -127 or fmt.minexp - fmt.mantissa_bits < -149:
            return None
    elif flip:
        # (2**-127, the smallest normal of P3109's 8-bit unsigned precision-1 formats, is
        # a float32 subnormal: the float32 subnormals round by their own integer step)
        tiny = width_of(source) == 32 and fmt.minexp == -127
        if _strategy(fmt, source) != "fast" and not tiny:
            return None
    elif pl.source != source or pl.strategy != "fast" or pl.widen_first:
        return None
    p, _ = _params(fmt, source, saturate)
    # (the unsigned P3109 formats, saturating: negative numbers give 0, not the NaN code)
    lp = lean_params(fmt, source, p, clear=True)
    if lp is None:
        return None
    clear = not fmt.has_negative_zero and int(p[13]) == 0
    width = width_of(source)
    sh = int(p[2])
    words = [0] * _N
    words[_ABS], words[_RB], words[_ODD_BIT], words[_SH] = int(p[0]), int(p[3]), 1 << sh, sh
    # (a smallest normal below float32's, 2**-127: only zero, of the float16 values, is
    # below it, and takes the FPU step to its code 0; from float32 bits, the subnormals
    # take the tiny step)
    words[_MIN_NORMAL] = 1 << 23 if tiny else max(int(p[4]), int(half))
    words[_MAGIC], words[_OVF], words[_NAN] = int(p[6]), int(p[10]), int(p[12])
    words[_NAN_THR], words[_NEG_THR] = int(lp[0]), int(lp[1])
    words[_SIGN] = int(p[13]) >> int(p[14])
    words[_ONE] = 1  # (a run-time 1: LLVM then keeps the masked add of the tie rule)
    params = np.array(words, f"u{width // 8}")
    code_bytes = 1 if fmt.bits <= 8 else 2
    flags = (bits, width, code_bytes, half, bool(p[15]), bool(p[7]), flip, clear, tiny)
    lanes16 = ()
    if bits == 16 and code_bytes == 1:
        w16 = encode16._prm(fmt, dtype, saturate, normals=True)
        if w16 is not None:
            v = np.arange(1 << 16)
            a = v & 0x7FFF
            src_m, _, src_bias = encode16._SOURCES16[dtype]
            normal = (a == 0) | (a >= 1 << src_m)
            want, got = _lean_codes(params, flags, v), encode16._word_codes(w16)
            if np.array_equal(got[normal], want[normal]):
                params = np.concatenate([params.view(np.uint8), w16.view(np.uint8)])
                # no test for subnormals where the 16-bit formula rounds them too: not
                # by the FPU step, or only where they all round to 0 (so that a
                # denormals-are-zero mode cannot change a code)
                smallest, src_emin = 1 << src_m, 1 - src_bias
                if np.array_equal(got, want) and (
                    not w16[encode16._MIN_NORMAL] or fmt.minexp == src_emin
                    or fmt.minexp - fmt.mantissa_bits - 1 >= src_emin
                ):  # fmt: skip
                    smallest = 0
                lanes16 = (
                    smallest, encode16.cpu_has("avx512bw"), bool(w16[encode16._NEED_INF]),
                    bool(w16[encode16._FLIP]), bool(w16[encode16._OFFSET]),
                    int(w16[encode16._SH]) == 0, bool(w16[encode16._MIN_NORMAL]),
                )  # fmt: skip
    params.flags.writeable = False
    flags += (lanes16,)
    kernel = NativeKernel(("encode_lean",) + flags, _lean_emitter(*flags), params)
    kernel.xo = True  # (no lut or table: small calls pass x and out alone)
    assert pl.load == LOAD_DIRECT or bits == 16 or flip
    return kernel


def width_of(source: str) -> int:
    """Bits of the source layout's words."""
    return 32 if source == "float32" else 64


def _lean_codes(params: np.ndarray, flags: tuple, v: np.ndarray) -> np.ndarray:
    """The codes :func:`_lean_emitter`'s formula gives the 16-bit inputs ``v`` (int64),
    widened to float32 bits, in numpy: the same constants (``params``) and steps."""
    _, _, _, half, neg_zero, use_magic, flip, clear, tiny = flags
    w = [np.uint32(k) for k in params]
    if half:
        v32 = v.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    else:
        v32 = v.astype(np.uint32) << np.uint32(16)
    a = v32 & w[_ABS]
    r = a + w[_RB]  # (uint32: wraps as the vector adds do)
    odd = (a & w[_ODD_BIT]) != 0
    r = np.where(odd != flip, r + w[_ONE], r)
    mag = np.minimum(r >> w[_SH], w[_OVF])
    nan = a > w[_NAN_THR]
    if not clear:
        mag = np.where(nan, w[_NAN], mag)
    if tiny:
        step = (a + np.uint32(_TINY_HALF) + ((a >> np.uint32(_TINY_SH)) & 1)) >> _TINY_SH
        mag = np.where(a < w[_MIN_NORMAL], step, mag)
    elif use_magic:
        with np.errstate(invalid="ignore", over="ignore"):
            total = a.view(np.float32) + w[_MAGIC].view(np.float32)
        mag = np.where(a < w[_MIN_NORMAL], total.view(np.uint32), mag)
    if clear:
        mag = np.where(nan, w[_NAN], np.where(v32 > w[_ABS], 0, mag))
    elif neg_zero:
        mag = np.where(v32 > w[_ABS], mag ^ w[_SIGN], mag)
    else:
        mag = np.where(v32 > w[_NEG_THR], mag | w[_SIGN], mag)
    return (mag & 0xFF).astype(np.uint8)


def _lean_emitter(
    bits: int, width: int, code_bytes: int, half: bool, neg_zero: bool, use_magic: bool,
    flip: bool = False, clear: bool = False, tiny: bool = False, lanes16: tuple = (),
):  # fmt: skip
    """The emitter of the native function (:data:`fp8kit._kernels.native.FUNCTION_TYPE`)
    encoding ``x[first:stop]`` (``bits`` an element; 16: bfloat16, or float16 where
    ``half``, widened to float32 bits) to ``out`` (codes of ``code_bytes``) with
    :func:`lean_kernel`'s constants ``prm`` on ``width``-bit lanes; ``neg_zero``: the
    format has -0 (the sign xor-ed into the code, else or-ed in above ``neg_thr``);
    ``use_magic``: the FPU rounds below the format's smallest normal (not where it is the
    source's: bfloat16 from float32); ``flip``: ties round up where the kept bit is 0
    (P3109's precision 1: the code's parity is the opposite of the source exponent's);
    ``clear``: negative numbers give code 0 (NaN still the NaN code: an unsigned format,
    saturating); ``tiny``: below float32's smallest normal (``min_normal``), integer
    nearest-even steps of 2**-127 (codes 0, 1, 2: P3109's 8-bit unsigned precision-1
    formats), not the FPU's.  ``lanes16``: where not empty, blocks without a source
    subnormal round on 16-bit lanes (:func:`fp8kit._kernels.encode16._vector_body`, its
    constants after ``prm``'s): the source's smallest normal (0: no test, the formula
    rounds every input) and that function's flags."""
    lanes = LANES[code_bytes]
    float_type = ir.FloatType() if width == 32 else ir.DoubleType()
    stream_min = STREAM_MIN_TRAFFIC // (bits // 8 + code_bytes)

    def emit(context, builder, args):
        prm, _, _, x, out, first, stop, total = args
        intp = context.get_value_type(types.intp)
        vt = ir.VectorType(ir.IntType(width), lanes)
        vf = ir.VectorType(float_type, lanes)
        vin = ir.VectorType(ir.IntType(bits), lanes)
        vout = ir.VectorType(ir.IntType(8 * code_bytes), lanes)
        words = builder.bitcast(prm, ir.IntType(width).as_pointer())
        w = [splat(builder, builder.load(builder.gep(words, [ir.Constant(intp, k)])), vt)
             for k in range(_N)]  # fmt: skip
        magic = builder.bitcast(w[_MAGIC], vf)
        zero = ir.Constant(vt, [0] * lanes)

        def splat_int(value):
            return ir.Constant(vt, [value] * lanes)

        def widened(v):
            if bits == 16:  # (bfloat16: the top half of float32's bits; float16: exact)
                v = widen_half(builder, v) if half else builder.shl(
                    builder.zext(v, vt), ir.Constant(vt, [16] * lanes)
                )  # fmt: skip
            a = builder.and_(v, w[_ABS])
            r = builder.add(a, w[_RB])
            # the ties-to-even bit: a test under mask and a masked add
            odd = builder.icmp_unsigned("==" if flip else "!=",
                                        builder.and_(a, w[_ODD_BIT]), zero)  # fmt: skip
            r = builder.select(odd, builder.add(r, w[_ONE]), r)
            code = builder.lshr(r, w[_SH])
            mag = builder.select(builder.icmp_unsigned(">", code, w[_OVF]), w[_OVF], code)
            nan = builder.icmp_unsigned(">", a, w[_NAN_THR])
            if not clear:
                mag = builder.select(nan, w[_NAN], mag)
            if tiny:
                kept = builder.and_(builder.lshr(a, splat_int(_TINY_SH)), splat_int(1))
                step = builder.add(builder.add(a, splat_int(_TINY_HALF)), kept)
                sub = builder.lshr(step, splat_int(_TINY_SH))
                mag = builder.select(builder.icmp_unsigned("<", a, w[_MIN_NORMAL]), sub, mag)
            elif use_magic:  # below the smallest normal the FPU: the sum's low bits the code
                sub = builder.bitcast(builder.fadd(builder.bitcast(a, vf), magic), vt)
                mag = builder.select(builder.icmp_unsigned("<", a, w[_MIN_NORMAL]), sub, mag)
            if clear:
                negative = builder.icmp_unsigned(">", v, w[_ABS])
                mag = builder.select(negative, zero, mag)
                mag = builder.select(nan, w[_NAN], mag)
            elif neg_zero:
                negative = builder.icmp_unsigned(">", v, w[_ABS])
                mag = builder.select(negative, builder.xor(mag, w[_SIGN]), mag)
            else:
                signed = builder.icmp_unsigned(">", v, w[_NEG_THR])
                mag = builder.select(signed, builder.or_(mag, w[_SIGN]), mag)
            return builder.trunc(mag, vout)

        body = widened
        if lanes16:
            smallest, pmadd, need_inf, flip16, offset, exact, magic16 = lanes16
            i16 = ir.IntType(16)
            v16 = ir.VectorType(i16, lanes)
            half16 = ir.VectorType(i16, lanes // 2)  # (one 512-bit vector)
            at = builder.gep(prm, [ir.Constant(intp, _N * width // 8)])
            words16 = builder.bitcast(at, i16.as_pointer())
            s16 = [builder.load(builder.gep(words16, [ir.Constant(intp, k)]))
                   for k in range(encode16._OFFSET + 1)]  # fmt: skip
            # (splat in the entry: the loop and the tail block use them)
            c16 = [splat(builder, scalar, half16) for scalar in s16]

            def c(k, scalar=False):
                return s16[k] if scalar else c16[k]

            one16 = ir.Constant(v16, [1] * lanes)
            below = ir.Constant(v16, [max(smallest - 1, 0)] * lanes)
            abs16 = ir.Constant(v16, [0x7FFF] * lanes)
            mask_ty = ir.IntType(lanes)

            def part(v, k):
                pick = ir.Constant(ir.VectorType(ir.IntType(32), lanes // 2),
                                   list(range(k, k + lanes // 2)))  # fmt: skip
                return builder.shuffle_vector(v, v, pick)

            def fast(v):
                lo, hi = (
                    encode16._vector_body(
                        builder, part(v, k), c, pmadd, half, neg_zero, need_inf,
                        flip=flip16, offset=offset, exact=exact, magic=magic16,
                    )
                    for k in (0, lanes // 2)
                )  # fmt: skip
                both = ir.Constant(ir.VectorType(ir.IntType(32), lanes), list(range(lanes)))
                return builder.shuffle_vector(lo, hi, both)

            def body(v):
                if not smallest:
                    return fast(v)
                # a block with a subnormal (0 < |v| < smallest) takes the widening
                a = builder.and_(v, abs16)
                sub = builder.icmp_unsigned("<", builder.sub(a, one16), below)
                any_sub = builder.icmp_unsigned(
                    "!=", builder.bitcast(sub, mask_ty), ir.Constant(mask_ty, 0)
                )
                with builder.if_else(any_sub, likely=False) as (rare, usual):
                    with rare:
                        slow, slow_block = widened(v), builder.block
                    with usual:
                        usual_codes, usual_block = fast(v), builder.block
                result = builder.phi(vout)
                result.add_incoming(slow, slow_block)
                result.add_incoming(usual_codes, usual_block)
                return result

        stream = builder.icmp_signed(">=", total, ir.Constant(intp, stream_min))
        x_at = typed_pointer(builder, x, bits, first)
        out_at = typed_pointer(builder, out, 8 * code_bytes, first)
        n = builder.sub(stop, first)
        vector_blocks(builder, intp, n, x_at, out_at, vin, vout, body, stream=stream)
        return ir.Constant(ir.IntType(32), 0)

    return emit


@functools.cache
def unsigned_kernel(
    fmt: FloatFormat, dtype: np.dtype, saturate, round_to: bool = False, mode: int = 0
):
    """Kernel rounding ``dtype`` data (float32, float64, bfloat16 or float16 bits) to the
    codes of an unsigned power-of-two format (float8_e8m0fnu), nearest, ties up, as
    :func:`fp8kit._kernels.bits.encode_unsigned` does from the same constants (the ``q``
    of :func:`fp8kit._kernels.codec._params`), with
    :func:`fp8kit._kernels.codec.encode_kernel`'s call and codes; with ``round_to``, the
    codes' values looked up in the byte planes of the decode table to ``dtype`` (the
    ``table`` argument: :func:`fp8kit._kernels.decode.format_planes`), that kernel's call
    with ``table_dtype`` and ``planes``.  None for other formats, data the API widens
    first, or (``round_to``) where there are no planes.  The Numba kernel it stands for
    compiled in 0.5 s on a first call (0.2 s more for round_to).  ``mode``: a deterministic
    rounding mode of :mod:`fp8kit._kernels.rounding` (the formula of
    :func:`fp8kit._kernels.rounding.encode_unsigned_mode`, compiled in); None for the
    stochastic ones."""
    from .decode import format_planes

    dtype = np.dtype(dtype)
    if dtype not in _KINDS or fmt.specials != "unsigned" or fmt.bits > 8:
        return None
    bits, source = _KINDS[dtype]
    pl = plan(fmt, dtype)
    if pl.source != source or pl.widen_first or pl.strategy != "unsigned":
        return None
    if round_to and format_planes(fmt, dtype) is None:
        return None
    if mode not in (NEAREST_EVEN, NEAREST_AWAY, TOWARD_ZERO, TOWARD_POSITIVE, TOWARD_NEGATIVE):
        return None
    _, q = _params(fmt, source, saturate, mode)
    width = 32 if source == "float32" else 64
    params = np.array([int(v) for v in q], f"u{width // 8}")
    params.flags.writeable = False
    out_bits = dtype.itemsize * 8 if round_to else 0
    # (the smallest value 2**-bias a subnormal of the source: encode_unsigned_mode's
    # branch below 2**(1 - bias), in the modes but nearest)
    low = int(q[4]) == 0 and mode in (TOWARD_ZERO, TOWARD_POSITIVE, TOWARD_NEGATIVE)
    # float16's normals (2**-14 .. 2**16 rounded) all within the format's codes
    fast16 = dtype == np.float16 and fmt.bias - 14 >= 1 and fmt.bias + 16 <= fmt.max_code
    flags = (bits, width, dtype == np.float16, out_bits, int(mode), low, fast16)
    kernel = NativeKernel(("encode_unsigned",) + flags, _unsigned_emitter(*flags), params)
    kernel.xo = not round_to  # (codes: no lut or table read)
    kernel.planes = bool(round_to)
    return kernel


def _unsigned_emitter(
    bits: int, width: int, half: bool, out_bits: int, mode: int, low: bool, fast16: bool
):
    """The emitter of :func:`unsigned_kernel`'s native function: ``x[first:stop]`` (``bits``
    an element, widened to float32 bits where 16) to 8-bit codes on ``width``-bit lanes or,
    with ``out_bits``, to their values from the planes at ``table``; in ``mode`` (``low``:
    the branch of :func:`fp8kit._kernels.rounding.encode_unsigned_mode` for a smallest
    value that is a subnormal of the source).  ``fast16`` (float16 data whose normals the
    format holds): a block of 64 elements without a float16 subnormal rounds on its own
    16-bit lanes (the code is the rounded exponent, rebiased), the others widened as
    before (16M elements, one thread: 0.55-0.61 of the streaming limit widened, 0.89-0.98
    so)."""
    nearest = mode in (NEAREST_EVEN, NEAREST_AWAY)
    lanes = 64
    stream_min = STREAM_MIN_TRAFFIC // (bits // 8 + (out_bits // 8 or 1))

    # bfloat16 on 16-bit lanes (half the vectors of float32's bits): its bits are float32's
    # top half, and every bit-domain constant's low half is zero (masks, Inf, the
    # thresholds) or an increment whose low half, a fraction below one of the top half's
    # units, never moves the sum past a multiple of the shift (floor((x + I + f) / 2**k) =
    # floor((x + I) / 2**k) for integers x, I and 0 <= f < 1): all taken >> 16
    narrow = bits == 16 and not half
    lane_bits = 16 if narrow else width

    def emit(context, builder, args):
        prm, _, table, x, out, first, stop, total = args
        intp = context.get_value_type(types.intp)
        vt = ir.VectorType(ir.IntType(lane_bits), lanes)
        v8 = ir.VectorType(ir.IntType(8), lanes)
        words = builder.bitcast(prm, ir.IntType(width).as_pointer())

        def word(k):
            w = builder.load(builder.gep(words, [ir.Constant(intp, k)]))
            if narrow:
                if k in (0, 3, 5, 10, 11):  # (abs_mask, half_ulp, src_inf, c1, c0)
                    w = builder.lshr(w, ir.Constant(w.type, 16))
                elif k == 2:  # (src_m)
                    w = builder.sub(w, ir.Constant(w.type, 16))
                w = builder.trunc(w, ir.IntType(16))
            return splat(builder, w, vt)

        (abs_mask, one, src_m, half_ulp, rebias, src_inf, max_code, ovf, inf_res, nan_code, c1,
         c0) = (word(k) for k in range(12))  # fmt: skip
        zero = ir.Constant(vt, [0] * lanes)
        planes = load_planes(builder, table, intp) if out_bits else None
        if nearest:
            inc = half_ulp
        elif mode == TOWARD_POSITIVE:  # (the source's mantissa mask)
            inc = builder.sub(builder.shl(one, src_m), one)
        else:
            inc = zero
        if fast16:
            v16 = ir.VectorType(ir.IntType(16), lanes)

            def k16(value):
                return ir.Constant(v16, [value] * lanes)

            def word16(k):
                w = builder.load(builder.gep(words, [ir.Constant(intp, k)]))
                return splat(builder, builder.trunc(w, ir.IntType(16)), v16)

            inc16 = k16(0x200 if nearest else 0x3FF if mode == TOWARD_POSITIVE else 0)
            # (the code of float16's biased exponent e: e + format bias - 15, where the
            # float32 rebias word is 127 - format bias)
            rebias32 = builder.load(builder.gep(words, [ir.Constant(intp, 4)]))
            off = builder.sub(ir.Constant(rebias32.type, 112), rebias32)
            off16 = splat(builder, builder.trunc(off, ir.IntType(16)), v16)
            inf16, nan16 = word16(8), word16(9)

        def body(v):
            if not fast16:
                code = codes_of(widen_half(builder, v) if half else v)
                return plane_values(builder, planes, code, out_bits) if out_bits else code
            a16 = builder.and_(v, k16(0x7FFF))
            sub = builder.and_(
                builder.icmp_unsigned("<", a16, k16(0x400)),
                builder.icmp_unsigned("!=", a16, k16(0)),
            )
            any_sub = builder.icmp_unsigned(
                "!=", builder.bitcast(sub, ir.IntType(lanes)), ir.Constant(ir.IntType(lanes), 0)
            )
            with builder.if_else(any_sub, likely=False) as (slow, fast):
                with slow:  # (a float16 subnormal in the block: widened, the general formula)
                    slow_code = codes_of(widen_half(builder, v))
                    slow_end = builder.basic_block
                with fast:
                    fast_code = codes16(v, a16)
                    fast_end = builder.basic_block
            code = builder.phi(v8)
            code.add_incoming(slow_code, slow_end)
            code.add_incoming(fast_code, fast_end)
            return plane_values(builder, planes, code, out_bits) if out_bits else code

        def codes16(v, a16):  # (normals, zeros, Inf, NaN and negatives of float16)
            e = builder.lshr(builder.add(a16, inc16), k16(10))
            code = builder.add(e, off16)
            code = builder.select(builder.icmp_unsigned("==", a16, k16(0x7C00)), inf16, code)
            bad = builder.or_(
                builder.or_(
                    builder.icmp_unsigned("!=", v, a16), builder.icmp_unsigned("==", a16, k16(0))
                ),
                builder.icmp_unsigned(">", a16, k16(0x7C00)),
            )
            return builder.trunc(builder.select(bad, nan16, code), v8)

        def codes_of(v):
            a = builder.and_(v, abs_mask)
            e = builder.lshr(builder.add(a, inc), src_m)
            code = builder.select(builder.icmp_unsigned(">", e, rebias), builder.sub(e, rebias),
                                  zero)  # fmt: skip
            if low:  # (below 2**(1 - bias): the position between codes 0 and 1)
                above = builder.icmp_unsigned(">", a, c0)
                frac = builder.select(above, builder.shl(builder.sub(a, c0), one), zero)
                small = builder.lshr(builder.add(frac, inc), src_m)
                code = builder.select(builder.icmp_unsigned("<", a, c1), small, code)
            if nearest:  # (ml_dtypes' rule below 2**(1 - bias))
                small = builder.select(builder.icmp_unsigned(">", a, c0), one, zero)
                code = builder.select(builder.icmp_unsigned("<", a, c1), small, code)
            over = max_code if mode in (TOWARD_ZERO, TOWARD_NEGATIVE) else ovf
            code = builder.select(builder.icmp_unsigned(">", code, max_code), over, code)
            code = builder.select(builder.icmp_unsigned("==", a, src_inf), inf_res, code)
            bad = builder.or_(
                builder.or_(
                    builder.icmp_unsigned("!=", v, a), builder.icmp_unsigned("==", a, zero)
                ),
                builder.icmp_unsigned(">", a, src_inf),
            )
            return builder.trunc(builder.select(bad, nan_code, code), v8)

        stream = builder.icmp_signed(">=", total, ir.Constant(intp, stream_min))
        x_at = typed_pointer(builder, x, bits, first)
        out_at = typed_pointer(builder, out, out_bits or 8, first)
        vin = ir.VectorType(ir.IntType(bits), lanes)
        vout = ir.VectorType(ir.IntType(out_bits or 8), lanes)
        n = builder.sub(stop, first)
        vector_blocks(builder, intp, n, x_at, out_at, vin, vout, body, stream=stream)
        return ir.Constant(ir.IntType(32), 0)

    return emit
