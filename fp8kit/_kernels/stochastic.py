"""Stochastic rounding of float32, bfloat16, float16 and float64 data to formats of up to 8
bits in LLVM vector code.

The kernel of :func:`fp8kit._kernels.codec.encode_mode_kernel` for the common case (a format
of up to 8 bits where :func:`fp8kit._kernels.codec.stochastic_params` allows the
constant-shift formula, ``rounding="stochastic"``, no flush): the same bits, from the same
random words (:mod:`fp8kit._kernels.rounding`: Philox4x32-10, element ``i`` of a block of
``4 * K * S`` elements using part ``(i // K) % S`` of word ``i // (K * S)`` of the call with
counter ``block * K + i % K``), in loops per block:

1. the block's random words, 16 Philox calls at a time (64-bit lanes below 2**32, so that
   the 32 x 32 -> 64 products are one vpmuludq), each word's parts written where their
   elements are (a buffer on the stack, one word per element);
2. data other than float32 only: the block's elements widened to float32 bits (16-bit data,
   exactly) or rounded to odd on float32 (float64), into a buffer;
3. the elements, 64 at a time: :func:`fp8kit._kernels.rounding.encode_stochastic_fast` and
   :func:`fp8kit._kernels.bits._finish_with` on 32-bit lanes, then the codes (encode) or
   their values looked up in the decode table's byte planes (round_to, AVX512-VBMI).

The dtype of bfloat16, float16 and float64 data (staged as float32 bits) is a run-time
argument, so that one compiled function serves those three; float32 data, and codes or
values, are compiled in.  The Numba kernel it replaces there compiled in 0.5-0.6 s per
dtype and operation (its loops went through LLVM's loop vectorizer); this one is written
out, a native kernel (:mod:`fp8kit._kernels.native`: no Numba compile at all).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils

from .bits import (
    PARAMS_LAYOUT,
    block_load,
    block_store,
    cpu_has,
    f64_dropped_bits,
    f64_to_odd_f32,
    flush_subnormal_codes,
    load_planes,
    plane_values,
    splat,
    values_of_16_bit_codes,
    widen_half,
)
from .native import body_function, spec_fields
from .rounding import _M0, _M1, _W0, _W1, K

_Q, _O, _SP = PARAMS_LAYOUT[1], PARAMS_LAYOUT[2], PARAMS_LAYOUT[3]
#: Input kinds of :func:`emit_sr_range`: float32, bfloat16, float16 and float64 data (as their
#: bits).
IN_F32, IN_BF16, IN_F16, IN_F64 = 0, 1, 2, 3
#: Whether the kernel takes float64 data: rounded to odd on float32 by an AVX-512 conversion
#: (:func:`fp8kit._kernels.bits.f64_to_odd_f32`), which keeps the bits stochastic
#: rounding reads where ``random_bits`` is below the bits float32 drops (see
#: :func:`fp8kit._kernels.codec.encode_mode_kernel`).
F64_INPUT = cpu_has("avx512f")
#: The staged float32 bits (a signalling NaN no conversion makes: float64 NaNs convert
#: quiet, 16-bit data widen with their payload's low bits zero) of a finite float64 from
#: 2**128 on, where the format's largest is below 2**128 but float32's largest truncated
#: would round down with a small random number.
_BEYOND = 0x7F800001
#: Elements per vector of the rounding loop (one 512-bit vector of codes).
LANES = 64
#: Philox calls per vector of the random-word loop.
CALLS = 16


def _philox(builder, c0, c1, k0, k1):
    """Philox4x32-10 of the counters ``(c0, c1, 0, 0)`` (``<N x i64>``, below 2**32) and
    the key ``(k0, k1)`` (i64 scalars below 2**32): the four words, ``<N x i64>`` each."""
    vt = c0.type
    n = vt.count
    i64 = ir.IntType(64)

    def k(value):
        return ir.Constant(vt, [value] * n)

    lo, s32 = k(0xFFFFFFFF), k(32)
    a0, a1, a2, a3 = c0, c1, k(0), k(0)
    b0, b1 = k0, k1
    for _ in range(10):
        p0 = builder.mul(k(int(_M0)), a0)
        p1 = builder.mul(k(int(_M1)), a2)
        kb0, kb1 = splat(builder, b0, vt), splat(builder, b1, vt)
        a0, a1, a2, a3 = (
            builder.xor(builder.xor(builder.lshr(p1, s32), a1), kb0),
            builder.and_(p1, lo),
            builder.xor(builder.xor(builder.lshr(p0, s32), a3), kb1),
            builder.and_(p0, lo),
        )
        b0 = builder.and_(builder.add(b0, ir.Constant(i64, int(_W0))), ir.Constant(i64, 0xFFFFFFFF))
        b1 = builder.and_(builder.add(b1, ir.Constant(i64, int(_W1))), ir.Constant(i64, 0xFFFFFFFF))
    return a0, a1, a2, a3


def emit_sr_range(
    context,
    builder,
    prm,
    planes,
    x,
    out,
    key,
    glo,
    ghi,
    offset,
    in_kind,
    rbits,
    parts,
    neg_zero,
    staging,
    to_values,
    variant=0,
    code_bytes=1,
    values16=0,
    excess=0,
    flush=0,
    unsigned=0,
    to16=0,
    beyond=0,
    extra64=0,
    tiny=0,
):
    """Stochastic rounding, in LLVM IR, of the elements with global (C-order) indices
    ``glo .. ghi - 1`` of ``x`` (an i8 pointer; its element 0 has index ``offset``) into
    ``out`` (i8): ``in_kind`` (i64, run time) :data:`IN_F32`, :data:`IN_BF16`,
    :data:`IN_F16` or :data:`IN_F64` data, to codes, or with ``to_values`` their values'
    bits in the data's dtype, looked up in the decode table's byte ``planes`` (i8);
    ``prm``: the kernel's constants (i32, :func:`fp8kit._kernels.codec.pack_params`);
    ``key``: the Philox key (i32[2]); ``rbits``, ``parts``
    (:func:`fp8kit._kernels.rounding.parts`) and ``neg_zero`` (1 for a format with -0:
    the sign logic of :func:`fp8kit._kernels.bits._finish_with` compiled in), ``staging``
    (0 for float32 data, read as it is; 1 for the others, widened or rounded to odd into a
    buffer per block first) and ``to_values`` (1: values, 0: codes) are Python ints.  The
    staged data's dtype is a branch per 64 elements (never taken differently within a
    call), so that one compiled kernel serves bfloat16, float16 and float64 data; one
    kernel for every dtype and output took 0.07 s longer to compile than float32 to codes
    alone, so float32 data and the output are compiled in.  ``variant``: 0, or one of the
    stochastic variants of :mod:`fp8kit._kernels.rounding` (``STOCHASTIC_C`` ... ``_HALF``,
    compiled in): :func:`fp8kit._kernels.rounding._variant_up` on the same fixed-point
    fraction, which needs ``rbits`` below ``sh`` (see :func:`variant_up`).
    ``code_bytes``: 2 for formats of 9-16 bits (16-bit codes); ``values16``: their values
    instead of planes (1 bfloat16, 2 float16: float32 bits widened from the codes, for
    float32 data, and float64 data converted once more; 0 otherwise); ``to16``: for
    16-bit data, the values' type (1 bfloat16, 2 float16; the codes themselves or rounded
    to it: :func:`fp8kit._kernels.bits.values_of_16_bit_codes`); ``excess``: 1 where
    ``rbits`` exceeds the ``sh`` fraction bits (the carry is then that of the random
    part's top ``sh`` bits: see :func:`fp8kit._kernels.codec.stochastic_params`);
    ``flush``: 1 for ``flush_subnormals`` (a subnormal result becomes the zero of its sign,
    +0 where the format has no -0: :func:`fp8kit._kernels.rounding.flush_code`);
    ``unsigned``: 1 for the powers of two of float8_e8m0fnu (``prm``'s unsigned ``q``:
    :func:`fp8kit._kernels.rounding.encode_unsigned_mode`'s stochastic rule, ``rbits`` at
    most 23); ``beyond``: 1 where float64 data from ``2**128`` on always overflow (a format
    whose largest is below it, reaching float32's range: bfloat16): they are staged as
    :data:`_BEYOND`; ``extra64``: 1 where ``excess`` takes float64 data too (the 32 bits
    below those truncated on float32 staged beside them,
    :func:`fp8kit._kernels.bits.f64_dropped_bits`, carry into the fraction); ``tiny``: 1 for
    a format whose smallest normal is float32's subnormal 2**-127 (P3109's 8-bit unsigned
    precision-1 formats, ``sh`` 23): below float32's smallest normal (``prm``'s
    ``min_normal``) the fixed point is the subnormal's bits doubled (steps of 2**-127 from
    0, where ``|x| * 2**150`` would overflow float32), by integer operations."""
    intp = context.get_value_type(types.intp)
    i16, i32, i64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
    v32 = ir.VectorType(i32, LANES)
    vf = ir.VectorType(ir.FloatType(), LANES)
    vc = ir.VectorType(i64, CALLS)
    block = 4 * K * parts
    width = 32 // parts

    def p(index):  # a constant of prm, splat
        return splat(builder, builder.load(builder.gep(prm, [ir.Constant(intp, index)])), v32)

    def c(value):
        return ir.Constant(v32, [value] * LANES)

    abs_mask, src_inf, max_mag, nominal_ovf = p(0), p(8), p(9), p(10)
    inf_res, nan_mag, sign_bit, sign_shift = p(11), p(12), p(13), p(14)
    ovf_pos, ovf_neg = p(_O), p(_O + 1)
    use_magic, scale, min_normal, rebias, sh = (p(_SP + k) for k in range(5))
    scale = builder.bitcast(scale, vf)
    zero = c(0)
    k0, k1 = (builder.zext(builder.load(builder.gep(key, [ir.Constant(intp, j)])), i64)
              for j in (0, 1))  # fmt: skip
    value_planes = load_planes(builder, planes, intp) if to_values else None
    in_bf16 = builder.icmp_signed("==", in_kind, ir.Constant(in_kind.type, IN_BF16))
    in_64 = builder.icmp_signed("==", in_kind, ir.Constant(in_kind.type, IN_F64))
    # (each element's part of its word, in the part's width: 16 KiB for any split, so
    # that the buffer stays in L1; 32-bit slots for 8-bit parts measured 20% slower)
    iw = ir.IntType(width)
    words = cgutils.alloca_once(builder, iw, size=block)
    words.align = 64
    if staging:  # (the other dtypes' data as float32 bits)
        staged = cgutils.alloca_once(builder, i32, size=block)
        staged.align = 64
        value_size = builder.select(in_64, ir.Constant(intp, 8), ir.Constant(intp, 2))
    else:
        value_size = ir.Constant(intp, 4)
    if staging and extra64:  # (and float64 data's bits below those)
        extras = cgutils.alloca_once(builder, i32, size=block)
        extras.align = 64
    out_size = value_size if to_values else ir.Constant(intp, code_bytes)
    lanes_c = ir.Constant(ir.VectorType(i64, CALLS), list(range(CALLS)))
    lanes_e = ir.Constant(v32, list(range(LANES)))

    def rounded(v, rnd, ext=None):
        """encode_stochastic_fast, then _finish_with (the overflow code by sign); ``ext``:
        float64 data's 32 bits below ``v``'s (0 for the other data)"""
        a = builder.and_(v, abs_mask)
        t_normal = builder.add(a, rebias)
        # below the format's smallest normal: |x| * 2**(23 - minexp) truncated (exact;
        # where a is larger the conversion may overflow, and that lane is not selected)
        if tiny:  # (float32's subnormals in units of 2**-150: the format's 2**-127 is 2**23)
            fixed = builder.shl(a, c(1))
        else:
            fixed = builder.fptosi(builder.fmul(builder.bitcast(a, vf), scale), v32)
        small = builder.and_(
            builder.icmp_unsigned("!=", use_magic, zero),
            builder.icmp_unsigned("<", a, min_normal),
        )
        t = builder.select(small, fixed, t_normal)
        if variant and excess:
            code = variant_code_excess(builder, variant, rbits, t_normal, fixed, sh, a, small,
                                       min_normal, rnd, ext)  # fmt: skip
        elif variant:
            up = variant_up(builder, variant, rbits, t, sh, a, small, min_normal, rnd)
            code = builder.add(builder.lshr(t, sh), up)
        elif excess and ext is not None:
            # (float64 data: the fraction's rbits bits are float32's sh and the top
            # rbits - sh of ``ext``; below the smallest normal those of ``ext`` below the
            # fixed point's bits from float32, k of them where k > 0)
            r_b = builder.lshr(rnd, c(32 - rbits)) if rbits < 32 else rnd
            max_b = c((1 << rbits) - 1 - (1 << 32 if rbits == 32 else 0))
            dd = builder.sub(c(rbits), sh)  # (>= 1)
            frac = builder.and_(t_normal, builder.sub(builder.shl(c(1), sh), c(1)))
            f_b = builder.or_(builder.shl(frac, dd), builder.lshr(ext, builder.sub(c(32), dd)))
            up = builder.icmp_unsigned(">", r_b, builder.sub(max_b, f_b))
            normal = builder.add(builder.lshr(t_normal, sh), builder.zext(up, v32))
            fixed = _append_ext(builder, a, min_normal, fixed, ext, dd)[0]
            below = builder.lshr(builder.add(fixed, r_b), c(rbits))
            code = builder.select(small, below, normal)
        elif excess:
            # (more random bits than the sh fraction bits: in the normal range the random
            # part's top sh bits carry; below the smallest normal ``fixed`` has rbits
            # fraction bits (stochastic_params' scale), and all of them do)
            top = builder.lshr(rnd, builder.sub(c(32), sh))
            normal = builder.lshr(builder.add(t_normal, top), sh)
            below = builder.lshr(builder.add(fixed, builder.lshr(rnd, c(32 - rbits))), c(rbits))
            code = builder.select(small, below, normal)
        else:
            r_b = builder.lshr(rnd, c(32 - rbits))
            inc = builder.shl(r_b, builder.sub(sh, c(rbits)))
            code = builder.lshr(builder.add(t, inc), sh)
        negative = builder.icmp_unsigned(">", v, abs_mask)
        ovf = builder.select(negative, ovf_neg, ovf_pos)
        mag = builder.select(builder.icmp_unsigned(">", code, ovf), ovf, code)
        mag = builder.select(builder.icmp_unsigned("==", a, src_inf), inf_res, mag)
        nan = builder.icmp_unsigned(">", a, src_inf)
        if beyond:  # (float64 data from 2**128 on: overflow, whatever the random number)
            marked = builder.icmp_unsigned("==", a, c(_BEYOND))
            mag = builder.select(marked, ovf, mag)
            nan = builder.and_(nan, builder.not_(marked))
        if neg_zero:  # formats with -0: the NaN code, the sign xor-ed in
            sign = builder.lshr(builder.and_(v, sign_bit), sign_shift)
            return flushed(builder.xor(builder.select(nan, nan_mag, mag), sign))
        # formats without -0
        s = builder.lshr(sign_bit, sign_shift)
        has_s = builder.icmp_unsigned("!=", s, zero)
        keep = builder.select(has_s, abs_mask, zero)
        nonzero = builder.icmp_unsigned("!=", mag, zero)
        unsigned = builder.select(
            builder.and_(negative, nonzero), builder.or_(builder.and_(mag, keep), s), mag
        )
        neg_inf_nan = builder.and_(
            builder.not_(has_s), builder.icmp_unsigned("!=", nominal_ovf, max_mag)
        )
        at_inf = builder.and_(builder.icmp_unsigned("==", a, src_inf), negative)
        to_nan = builder.or_(nan, builder.and_(neg_inf_nan, at_inf))
        return flushed(builder.select(to_nan, nan_mag, unsigned))

    if unsigned:  # (encode_unsigned_mode, stochastic: up with probability (x - 2**k) / 2**k)
        (u_abs, _, _, _, u_rebias, u_inf, u_max, u_ovf, u_inf_res, u_nan, u_c1, u_c0) = (
            p(_Q + k) for k in range(12)
        )

        def rounded_unsigned(v, rnd, ext=None):
            """``ext``: float64 data's 32 bits below ``v``'s, truncated (0 for the other
            data), where more random bits are read than rounding to odd leaves exact"""
            a = builder.and_(v, u_abs)
            r_b = builder.lshr(rnd, c(32 - rbits))

            def up(low):  # (floor(low * 2**rbits / 2**23) + R carries into 2**rbits)
                return builder.lshr(builder.add(builder.lshr(low, c(23 - rbits)), r_b), c(rbits))

            e = builder.add(builder.lshr(a, c(23)), up(builder.and_(a, c(0x7FFFFF))))
            normal = builder.select(builder.icmp_unsigned(">", e, u_rebias),
                                    builder.sub(e, u_rebias), zero)  # fmt: skip
            # 2**-bias a float32 subnormal (bias 127): below 2**(1 - bias) the position
            # between codes 0 and 1, (a - c0) / c0, on float32's 23 fraction bits
            frac = builder.select(builder.icmp_unsigned(">", a, u_c0),
                                  builder.shl(builder.sub(a, u_c0), c(1)), zero)  # fmt: skip
            if ext is not None:  # (the 23rd bit there: float64's first below float32's)
                frac = builder.select(builder.icmp_unsigned("<", a, u_c0), zero,
                                      builder.or_(frac, builder.lshr(ext, c(31))))  # fmt: skip
            at_c0 = builder.and_(builder.icmp_unsigned("==", u_rebias, zero),
                                builder.icmp_unsigned("<", a, u_c1))  # fmt: skip
            code = builder.select(at_c0, up(frac), normal)
            code = builder.select(builder.icmp_unsigned(">", code, u_max), u_ovf, code)
            code = builder.select(builder.icmp_unsigned("==", a, u_inf), u_inf_res, code)
            nan = builder.icmp_unsigned(">", a, u_inf)
            if beyond:  # (float64 data from 2**128 on: overflow)
                marked = builder.icmp_unsigned("==", a, c(_BEYOND))
                code = builder.select(marked, u_ovf, code)
                nan = builder.and_(nan, builder.not_(marked))
            bad = builder.or_(builder.icmp_unsigned("!=", v, a), nan)
            zero_a = builder.icmp_unsigned("==", a, zero)
            if ext is not None:  # (below float32's subnormals: truncated to 0, not zero)
                zero_a = builder.and_(zero_a, builder.icmp_unsigned("==", ext, zero))
            bad = builder.or_(bad, zero_a)
            return builder.select(bad, u_nan, code)

    def flushed(code):  # (where flush: the smallest normal's code is 1 << (23 - sh))
        if not flush:
            return code
        smallest = builder.shl(c(1), builder.sub(c(23), sh))
        sign = builder.lshr(sign_bit, sign_shift)
        return flush_subnormal_codes(builder, code, sign, smallest, neg_zero)

    gb0 = builder.mul(builder.sdiv(glo, ir.Constant(intp, block)), ir.Constant(intp, block))
    with cgutils.for_range_slice(builder, gb0, ghi, ir.Constant(intp, block), intp) as (gb, _):
        # 1. the block's random words
        first = builder.mul(builder.sdiv(gb, ir.Constant(intp, block)), ir.Constant(intp, K))
        step_c = ir.Constant(intp, CALLS)
        with cgutils.for_range_slice(builder, ir.Constant(intp, 0), ir.Constant(intp, K),
                                     step_c, intp) as (g, _):  # fmt: skip
            ctr = builder.add(splat(builder, builder.add(first, g), vc), lanes_c)
            lo32 = ir.Constant(vc, [0xFFFFFFFF] * CALLS)
            ws = _philox(builder, builder.and_(ctr, lo32),
                         builder.lshr(ctr, ir.Constant(vc, [32] * CALLS)), k0, k1)  # fmt: skip
            for t in range(4):
                w = builder.trunc(ws[t], ir.VectorType(i32, CALLS))
                vw = ir.VectorType(i32, CALLS)
                for h in range(parts):
                    part = builder.lshr(w, ir.Constant(vw, [h * width] * CALLS)) if h else w
                    part = builder.trunc(part, ir.VectorType(iw, CALLS)) if parts > 1 else part
                    at = builder.add(ir.Constant(intp, (t * parts + h) * K), g)
                    ptr = builder.gep(words, [at])
                    ptr = builder.bitcast(ptr, ir.VectorType(iw, CALLS).as_pointer())
                    builder.store(part, ptr, align=width // 8)
        # 2. the elements of [lo, hi) in this block, 64 at a time
        lo = builder.select(builder.icmp_signed(">", glo, gb), glo, gb)
        end = builder.add(gb, ir.Constant(intp, block))
        hi = builder.select(builder.icmp_signed("<", ghi, end), ghi, end)
        start = builder.mul(builder.sdiv(builder.sub(lo, gb), ir.Constant(intp, LANES)),
                            ir.Constant(intp, LANES))  # fmt: skip

        stop, step = builder.sub(hi, gb), ir.Constant(intp, LANES)

        def element_loop():
            """``(e0, at, full, slice_mask)`` of each 64 elements of [lo, hi)"""
            with cgutils.for_range_slice(builder, start, stop, step, intp) as (e0, _):
                gi = builder.add(gb, e0)

                def slice_mask(gi=gi):  # (partial slices only: lo <= gi + j < hi)
                    first = builder.trunc(builder.sub(lo, gi), i32)
                    last = builder.trunc(builder.sub(hi, gi), i32)
                    return builder.and_(
                        builder.icmp_signed(">=", lanes_e, splat(builder, first, v32)),
                        builder.icmp_signed("<", lanes_e, splat(builder, last, v32)),
                    )

                full = builder.and_(
                    builder.icmp_signed(">=", gi, lo),
                    builder.icmp_signed("<=", builder.add(gi, ir.Constant(intp, LANES)), hi),
                )
                yield e0, builder.sub(gi, offset), full, slice_mask

        def lanes(ety, ptr, full, slice_mask):
            """64 elements of type ety at ptr (those of the slice where not full)"""
            return block_load(builder, ptr, ir.VectorType(ety, LANES), full, slice_mask)

        # 2. 16-bit data widened to float32 bits, float64 data rounded to odd on
        # float32, into the block's buffer on the stack (a second copy of the loop
        # below for 16-bit data measured no faster for float32 data than this, but
        # took 0.05 s more to compile)
        def stage(wide):
            for e0, at, full, slice_mask in element_loop():
                size = ir.Constant(intp, 8 if wide else 2)
                src = builder.gep(x, [builder.mul(at, size)])
                if wide:
                    v64 = lanes(i64, src, full, slice_mask)
                    # (plain stochastic rounding reads the floor of the fraction: float64
                    # truncated on float32 gives it for as many random bits as float32
                    # drops; the variants' first rounding needs the sticky bit, and
                    # float8_e8m0fnu's rule a nonzero value below float32's subnormals)
                    # (formats spanning float32's range, bfloat16 and float8_e8m0fnu, reach
                    # its subnormals too: those by integer operations)
                    # (the variants with float64's bits below staged beside: truncated)
                    odd = bool((variant or unsigned) and not extra64)
                    v = f64_to_odd_f32(builder, v64, odd=odd, subnormals=bool(beyond or tiny))

                    def c64(value):
                        return ir.Constant(ir.VectorType(i64, LANES), [value] * LANES)

                    a64 = builder.and_(v64, c64((1 << 63) - 1))
                    if beyond:  # (a finite float64 from 2**128 on: the marker, its sign)
                        low = builder.icmp_unsigned(">=", a64, c64(0x47F << 52))
                        big = builder.and_(low, builder.icmp_unsigned("<", a64, c64(0x7FF << 52)))
                        mark = builder.or_(builder.and_(v, c(-(1 << 31))), c(_BEYOND))
                        v = builder.select(big, mark, v)
                    if extra64 and unsigned:
                        # (float8_e8m0fnu reads them below float32's smallest normal
                        # alone: a block of normal values, the common case, stores zeros)
                        dst = builder.bitcast(builder.gep(extras, [e0]), v32.as_pointer())
                        below = builder.icmp_unsigned("<", a64, c64(897 << 52))
                        any_below = builder.icmp_unsigned(
                            "!=", builder.bitcast(below, i64), ir.Constant(i64, 0)
                        )
                        with builder.if_else(any_below) as (some, none):
                            with some:
                                builder.store(f64_dropped_bits(builder, v64), dst, align=64)
                            with none:
                                builder.store(zero, dst, align=64)
                    elif extra64:
                        dst = builder.bitcast(builder.gep(extras, [e0]), v32.as_pointer())
                        builder.store(f64_dropped_bits(builder, v64), dst, align=64)
                else:
                    h = lanes(i16, src, full, slice_mask)
                    bf = builder.shl(builder.zext(h, v32), c(16))
                    v = builder.select(in_bf16, bf, widen_half(builder, h))
                dst = builder.bitcast(builder.gep(staged, [e0]), v32.as_pointer())
                builder.store(v, dst, align=64)

        if staging and F64_INPUT:
            with builder.if_else(in_64) as (wide, narrow):
                with wide:
                    stage(True)
                with narrow:
                    stage(False)
        elif staging:
            stage(False)
        # 3. the elements of [lo, hi) in this block, 64 at a time
        for e0, at, full, slice_mask in element_loop():
            if staging:
                src = builder.gep(staged, [e0])
            else:
                src = builder.gep(x, [builder.mul(at, ir.Constant(intp, 4))])
            v = lanes(i32, src, full, slice_mask)
            rp = builder.bitcast(builder.gep(words, [e0]), ir.VectorType(iw, LANES).as_pointer())
            rnd = builder.load(rp, align=64)
            if parts > 1:  # (the part moved to the word's top bits)
                rnd = builder.shl(builder.zext(rnd, v32), c(32 - width))
            vcode = ir.VectorType(ir.IntType(8 * code_bytes), LANES)
            if staging and extra64:  # (float64 data only: other data's bits are exact)
                ep = builder.bitcast(builder.gep(extras, [e0]), v32.as_pointer())
                ext = builder.select(in_64, builder.load(ep, align=64), zero)
                codes = rounded_unsigned(v, rnd, ext) if unsigned else rounded(v, rnd, ext)
            elif unsigned:
                codes = rounded_unsigned(v, rnd)
            else:
                codes = rounded(v, rnd)
            codes = builder.trunc(codes, vcode)
            dst = builder.gep(out, [builder.mul(at, out_size)])

            def store(result, dst=dst, full=full, slice_mask=slice_mask):
                block_store(builder, result, dst, full, slice_mask)

            if not to_values:
                store(codes)
            elif values16:  # (bfloat16's or float16's codes as values of the data's type)
                to = ("bfloat16", "float16")[to16 - 1] if to16 else (
                    "float64" if staging else "float32")  # fmt: skip
                store(values_of_16_bit_codes(builder, codes, values16 == 1, to))
            else:  # (in the data's width: round_to keeps the dtype)
                words16 = plane_values(builder, value_planes, codes, 16)
                if not staging:
                    store(builder.shl(builder.zext(words16, v32), c(16)))
                elif F64_INPUT:
                    with builder.if_else(in_64) as (w64, w16):
                        with w64:
                            v64 = ir.VectorType(i64, LANES)
                            wide64 = builder.zext(words16, v64)
                            store(builder.shl(wide64, ir.Constant(v64, [48] * LANES)))
                        with w16:
                            store(words16)
                else:
                    store(words16)


def variant_up(builder, variant, rbits, t, sh, a, small, min_normal, rnd):
    """1 (``<N x i32>``) where the stochastic variant ``variant`` rounds up, as
    :func:`fp8kit._kernels.rounding._variant_up` does with the fraction ``t``'s ``sh`` low
    bits (the constant-shift formula's fixed point) and ``rbits`` (< ``sh``) random bits:
    that fraction first rounded to ``rbits`` bits (ties by the variant's rule), then up
    where the rounded fraction and the random number reach ``2**rbits``; stochastic_half
    up where inexact and the random number's top bit is set.  Below the format's smallest
    normal (``small``) the fixed point was truncated from ``|x| * 2**(src_m - minexp)``:
    whether it dropped a set bit (the remainder's sticky bit) is read from the source bits
    ``a`` by integer operations (a flush-to-zero or denormals-are-zero mode cannot change
    it), the dropped bits counted from the exponent fields of ``a`` and ``min_normal``."""
    vt = t.type

    def c(value):
        return ir.Constant(vt, [value] * vt.count)

    one = c(1)
    low = builder.and_(t, builder.sub(builder.shl(one, sh), one))
    sticky = _small_sticky(builder, a, small, min_normal, 0)
    d = builder.sub(sh, c(rbits))  # (>= 1)
    rem = builder.and_(low, builder.sub(builder.shl(one, d), one))
    half = builder.shl(one, builder.sub(d, one))
    return _variant_carry(builder, variant, rbits, builder.lshr(low, d), rem, half, low,
                          sticky, rnd)  # fmt: skip


def _variant_carry(builder, variant, rbits, f, rem, half, low, sticky, rnd):
    """1 (``<N x i32>``) where the variant rounds up: ``f`` the fraction floored to
    ``rbits`` bits, ``rem`` the bits below them (``half``: their half), ``low`` the whole
    fraction and ``sticky`` whether a set bit lies below it (their inexactness); the
    fraction rounded to ``rbits`` bits by the variant's tie rule, then up where it and the
    random number reach ``2**rbits``; stochastic_half up where inexact and the random
    number's top bit is set."""
    from .rounding import STOCHASTIC_B, STOCHASTIC_C, STOCHASTIC_HALF, STOCHASTIC_ODD

    vt = f.type

    def c(value):
        return ir.Constant(vt, [value] * vt.count)

    one, zero = c(1), c(0)
    r = builder.lshr(rnd, c(32 - rbits)) if rbits < 32 else rnd
    if variant == STOCHASTIC_HALF:
        inexact = builder.or_(builder.icmp_unsigned("!=", low, zero), sticky)
        top = builder.icmp_unsigned("!=", builder.lshr(r, c(rbits - 1)), zero)
        return builder.zext(builder.and_(inexact, top), vt)
    at_half = builder.icmp_unsigned("==", rem, half)
    gt = builder.or_(builder.icmp_unsigned(">", rem, half), builder.and_(at_half, sticky))
    tie = builder.and_(at_half, builder.not_(sticky))
    odd = builder.icmp_unsigned("!=", builder.and_(f, one), zero)
    tie_up = {STOCHASTIC_C: odd, STOCHASTIC_B: None, STOCHASTIC_ODD: builder.not_(odd)}[variant]
    upf = builder.or_(gt, tie if tie_up is None else builder.and_(tie, tie_up))
    max_b = c((1 << rbits) - 1 - (1 << 32 if rbits == 32 else 0))
    full = builder.and_(upf, builder.icmp_unsigned("==", f, max_b))
    f_b = builder.add(f, builder.zext(upf, vt))
    up = builder.or_(full, builder.icmp_unsigned(">", r, builder.sub(max_b, f_b)))
    return builder.zext(up, vt)


def _small_sticky(builder, a, small, min_normal, more):
    """Where ``small`` (below the format's smallest normal, the fixed point truncated from
    ``|x| * 2**(23 - minexp + more)``): whether that dropped a set bit of the source bits
    ``a``, by integer operations (a flush-to-zero or denormals-are-zero mode cannot change
    it): a's significand (its implicit bit where normal) below bit ``minexp_field - more
    - max(exp_field, 1)``, counted from the exponent fields of ``a`` and ``min_normal``."""
    vt = a.type
    n = vt.count

    def c(value):
        return ir.Constant(vt, [value] * n)

    one, zero = c(1), c(0)
    exp_field = builder.lshr(a, c(23))
    e1 = builder.select(builder.icmp_unsigned("<", exp_field, one), one, exp_field)
    mant = builder.and_(a, c(0x7FFFFF))
    mant = builder.select(builder.icmp_unsigned(">", exp_field, zero),
                          builder.or_(mant, c(0x800000)), mant)  # fmt: skip
    # (signed: with more fraction bits than the format's, no bit may be dropped)
    more = c(more) if isinstance(more, int) else more
    dropped = builder.sub(builder.sub(builder.lshr(min_normal, c(23)), e1), more)
    dropped = builder.select(builder.icmp_signed("<", dropped, zero), zero, dropped)
    wide = builder.icmp_unsigned(">=", dropped, c(32))
    mask = builder.sub(builder.shl(one, builder.select(wide, zero, dropped)), one)
    lost = builder.select(wide, mant, builder.and_(mant, mask))
    return builder.and_(small, builder.icmp_unsigned("!=", lost, zero))


def _append_ext(builder, a, min_normal, fixed, ext, over):
    """``(fixed, more, k)``: the fixed point ``fixed`` (``<N x i32>``, below the format's
    smallest normal, truncated from the float32 bits ``a``, with ``over`` fraction bits
    past the ``sh`` of the normal range) continued into float64's 32 bits below ``a``'s
    (``ext``): their top ``k`` appended where the fixed point has ``k`` bits more than
    float32 holds at a's exponent (``more``; k at most 31, 1 where not ``more``)."""
    vt = a.type

    def c(value):
        return ir.Constant(vt, [value] * vt.count)

    e_a = builder.lshr(a, c(23))
    e_a = builder.select(builder.icmp_unsigned("<", e_a, c(1)), c(1), e_a)
    k = builder.add(builder.sub(e_a, builder.lshr(min_normal, c(23))), over)
    more = builder.icmp_signed(">", k, c(0))
    k = builder.select(more, k, c(1))
    k = builder.select(builder.icmp_signed(">", k, c(31)), c(31), k)  # (small: < 32)
    tail = builder.select(more, builder.lshr(ext, builder.sub(c(32), k)), c(0))
    return builder.add(fixed, tail), more, k


def variant_code_excess(
    builder, variant, rbits, t_normal, fixed, sh, a, small, min_normal, rnd, ext=None
):  # fmt: skip
    """The code (``<N x i32>``, before the overflow rules) of the stochastic variant
    ``variant`` with ``rbits`` random bits at least the ``sh`` bits the normal range drops:
    there the fraction (``t_normal``'s ``sh`` low bits) is exact in ``rbits`` bits, so its
    first rounding changes nothing; below the smallest normal (``small``) the fixed point
    ``fixed`` has ``rbits + 1`` fraction bits (the bit below the random bits, and the sticky
    bit read from the source bits ``a``), rounded as :func:`variant_up` does.  ``ext``:
    float64 data's 32 bits below ``a``'s, truncated on float32
    (:func:`fp8kit._kernels.bits.f64_dropped_bits`; 0 for the other data): the fraction then
    continues into them, in both ranges, and the first rounding reads its bits below the
    random bits whole."""
    vt = t_normal.type

    def c(value):
        return ir.Constant(vt, [value] * vt.count)

    one, zero = c(1), c(0)
    # (below the smallest normal rbits + 1 <= 30 - mantissa bits: stochastic_params; with
    # no such range, formats sharing float32's, ``small`` is never set)
    b1 = min(rbits + 1, 31)
    low_n = builder.and_(t_normal, builder.sub(builder.shl(one, sh), one))
    if ext is not None:
        # (below the smallest normal: ext's bits above the fixed point's last, k of them,
        # appended to it (as emit_sr_range's plain rounding does, one bit further), the
        # rest sticky; the normal range's fraction is the sh bits and ext's 32, rounded
        # first at 32 - (rbits - sh) bits of ext, in 64-bit lanes)
        fixed, more, k = _append_ext(builder, a, min_normal, fixed, ext, builder.sub(c(b1), sh))
        ext_below = builder.icmp_unsigned(
            "!=", builder.select(more, builder.shl(ext, k), ext), zero
        )
    low_s = builder.and_(fixed, c((1 << b1) - 1))
    code = builder.select(small, builder.lshr(fixed, c(b1)), builder.lshr(t_normal, sh))
    sticky = _small_sticky(builder, a, small, min_normal, builder.sub(c(b1), sh))
    if ext is None:
        # (the normal range's fraction is exact in rbits bits: nothing below them)
        f = builder.select(small, builder.lshr(low_s, one),
                           builder.shl(low_n, builder.sub(c(rbits), sh)))  # fmt: skip
        rem = builder.select(small, builder.and_(low_s, one), zero)
        low = builder.select(small, low_s, low_n)
        return builder.add(code, _variant_carry(builder, variant, rbits, f, rem, one, low,
                                                sticky, rnd))  # fmt: skip
    v64 = ir.VectorType(ir.IntType(64), vt.count)

    def k64(value):
        return ir.Constant(v64, [value] * vt.count)

    whole = builder.or_(builder.shl(builder.zext(low_n, v64), k64(32)), builder.zext(ext, v64))
    drop = builder.zext(builder.sub(c(32), builder.sub(c(rbits), sh)), v64)  # (2 .. 33)
    f_n = builder.trunc(builder.lshr(whole, drop), vt)
    rem_n = builder.and_(whole, builder.sub(builder.shl(k64(1), drop), k64(1)))
    half_n = builder.shl(k64(1), builder.sub(drop, k64(1)))
    sticky = builder.or_(sticky, builder.and_(small, ext_below))
    f = builder.select(small, builder.lshr(low_s, one), f_n)
    rem = builder.select(small, builder.zext(builder.and_(low_s, one), v64), rem_n)
    half = builder.select(small, k64(1), half_n)
    low = builder.select(small, low_s, builder.or_(low_n, ext))
    return builder.add(code, _variant_carry(builder, variant, rbits, f, rem, half, low, sticky,
                                            rnd))  # fmt: skip


def sr_native(
    random_bits: int, split: int, neg_zero: int, staged: int, values: int, kind_at: int,
    variant: int = 0, code_bytes: int = 1, values16: int = 0, excess: int = 0, flush: int = 0,
    unsigned: int = 0, to16: int = 0, beyond: int = 0, extra64: int = 0, tiny: int = 0,
):  # fmt: skip
    """The emitter of the native kernel (:data:`fp8kit._kernels.native.GENERIC_TYPE`)
    of stochastic rounding (:func:`emit_sr_range`), called as the other kernels of
    :func:`fp8kit._kernels.codec.encode_mode_kernel`, ``(prm, x, lut, table, out, key,
    offset, nchunks)``: x and out the data's and the result's arrays (any dtype), ``table``
    the decode table's byte planes (values only), ``offset`` the global index of x's
    element 0; word ``kind_at`` of ``prm`` (uint32) is :func:`emit_sr_range`'s
    ``in_kind``.  Its chunks are whole blocks counted from the start
    of the whole array (as the Numba kernel's: any split gives the same bits anyway); the
    chunks of one call are contiguous, so it runs their union at once."""
    block = 4 * K * split

    def emit(context, builder, args):
        ptrs, ints, _ = args
        i32, i64 = ir.IntType(32), ir.IntType(64)

        def c(v):
            return ir.Constant(i64, v)

        def ptr(k):
            return builder.load(builder.gep(ptrs, [c(k)]))

        def integer(k):
            return builder.load(builder.gep(ints, [c(k)]))

        prm, key = (builder.bitcast(ptr(k), i32.as_pointer()) for k in (0, 5))
        kind = builder.zext(builder.load(builder.gep(prm, [c(kind_at)])), i64)
        n, offset = integer(1), integer(6)
        nchunks, first, stop = spec_fields(builder, integer(7))
        step = builder.sdiv(builder.sub(builder.add(n, nchunks), c(1)), nchunks)
        step = builder.mul(builder.sdiv(builder.add(step, c(block - 1)), c(block)), c(block))
        end = builder.add(offset, n)

        def bound(chunk):  # block_items' inner bound before chunk ``chunk``
            at = builder.add(builder.add(offset, builder.mul(chunk, step)), c(block - 1))
            at = builder.mul(builder.sdiv(at, c(block)), c(block))
            return builder.select(builder.icmp_signed("<", at, end), at, end)

        glo = builder.select(builder.icmp_signed("==", first, c(0)), offset, bound(first))
        ghi = builder.select(builder.icmp_signed("==", stop, nchunks), end, bound(stop))
        i8p = ir.IntType(8).as_pointer()
        arg_types = [i32.as_pointer(), i8p, i8p, i8p, i32.as_pointer()] + [i64] * 4

        def rounding(inner, a):
            emit_sr_range(context, inner, *a, random_bits, split, neg_zero, staged, values,
                          variant, code_bytes, values16, excess, flush, unsigned,
                          to16, beyond, extra64, tiny)  # fmt: skip

        body = body_function(builder, "range", arg_types, rounding)
        with builder.if_then(builder.icmp_signed("<", glo, ghi)):
            builder.call(body, [prm, ptr(3), ptr(1), ptr(4), key, glo, ghi, offset, kind])
        return ir.Constant(i32, 0)

    return emit
