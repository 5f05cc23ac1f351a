"""encode (nearest-even) to the formats off the byte lanes, as Numba kernels run as native
code (:class:`fp8kit._kernels.codec.NumbaNative`): the formula of
:func:`fp8kit._kernels.bits.encode_lean` with the P3109 precision-1 tie rule and tiny step.

The byte-lane kernels (:mod:`fp8kit._kernels.encode16`) take the float8 formats and the
8-bit P3109 formats with 2-4 mantissa bits; the others (float8_e3m4, the float6 and float4
formats, bfloat16 and float16, most P3109 formats) take this kernel, on the same constants
(:func:`fp8kit._kernels.codec._params` and :func:`fp8kit._kernels.codec.lean_params`, so
only where the general kernel itself rounds by ``encode_lean``): float32 and float64 data
on their own bits, bfloat16 and float16 on their own 16-bit words where the format has at
most 6 mantissa bits (else, and where a block or group holds a value those words do not
round, widened to float32 bits exactly in the kernel, as the general kernel's loads do),
and P3109's precision-1 formats, which the general kernel rounds from data widened to
float64, from float32 bits.  :func:`unsigned_kernel` does the same for float8_e8m0fnu's
formula (:func:`fp8kit._kernels.rounding.encode_unsigned_mode`, its rounding modes
compiled in).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from numba import njit, types

from ..formats import FloatFormat
from .bits import (
    as_bits,
    as_float,
    cast_like,
    chunk_range,
    chunks,
    load_bits,
    plane_lookup,
    prefer_512,
    shr,
    span,
    stack_buffer,
)
from .codec import (
    _LOOKUP_BLOCK,
    LOAD_BF16,
    LOAD_DIRECT,
    LOAD_LUT,
    NumbaNative,
    _array,
    _odd_parity,
    _params,
    _strategy,
    lean_params,
    plan,
)
from .registry import source_version
from .rounding import (
    NEAREST_AWAY,
    NEAREST_EVEN,
    TOWARD_NEGATIVE,
    TOWARD_POSITIVE,
    TOWARD_ZERO,
    encode_unsigned_mode,
)

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

#: The tiny step (see _make_lean): float32 subnormal bits to codes of 2**-127.
_TINY_SH = 22
_TINY_HALF = (1 << (_TINY_SH - 1)) - 1


def _sig(width: int, bits: int, table, out_bits: int):
    """A kernel's signature: constants of ``width`` bits, data of ``bits``, the table
    argument's dtype ``table`` (a dummy, or the decode table's byte planes), results of
    ``out_bits``."""
    return types.void(_array(f"u{width // 8}", True), _array(f"u{bits // 8}", True),
                      _array(np.uint32, True), _array(table, True),
                      _array(f"u{out_bits // 8}"), types.intp)  # fmt: skip


@functools.cache
def lean_kernel(fmt: FloatFormat, dtype: np.dtype, saturate) -> NumbaNative | None:
    """Kernel rounding ``dtype`` data (float32, float64, bfloat16 or float16 bits) to
    ``fmt`` codes, nearest-even, with :func:`fp8kit._kernels.codec.encode_kernel`'s call
    and results; None where that kernel does not round by ``encode_lean`` (or rounds
    widened float64, or an unsigned format), except for P3109's precision-1 formats (see
    below) and float16 data, which widens to float32 normals: any format within float32's
    range then."""
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
    # (a smallest normal below float32's, 2**-127: only zero, of the float16 values, is
    # below it, and takes the FPU step to its code 0; from float32 bits, the subnormals
    # take the tiny step: below float32's smallest normal)
    words = _lean_words(p, lp, 1 << 23 if tiny else max(int(p[4]), int(half)))
    # bfloat16 data to formats of at most 6 mantissa bits: the same constants for its own
    # words (codec._params of the "bfloat16" layout), on 16-bit lanes, twice as many a
    # vector as float32's (their codes are those of the float32 bits they widen to: see
    # _make_lean); after the float32 words in the parameter array
    lanes16 = bits == 16 and fmt.mantissa_bits <= 6 and (not half or fmt.bits <= 8)
    if lanes16 and half:
        words += _half_words(fmt, p)
    elif lanes16:
        p16, _ = _params(fmt, "bfloat16", saturate)
        lp16 = lean_params(fmt, "bfloat16", p16, clear=True)
        assert lp16 is not None  # (the same tests as float32's, on the same values)
        words += _lean_words(p16, lp16, 1 << 7 if tiny else int(p16[4]))
    params = np.array(words, f"u{width // 8}")
    code_bytes = 1 if fmt.bits <= 8 else 2
    flags = (bits, width, code_bytes, half, bool(p[15]), bool(p[7]), flip, clear, tiny, lanes16)
    params.flags.writeable = False
    sig = _sig(width, bits, np.uint8, 8 * code_bytes)
    kernel = NumbaNative(_make_lean(*flags), sig, ("encode_lean",) + flags, params)
    kernel.xo = True  # (no lut or table: small calls pass x and out alone)
    kernel.function_passes = False  # (as fast, 0.006-0.01 s less: see Kernel.function_passes)
    assert pl.load == LOAD_DIRECT or bits == 16 or flip
    return kernel


def _lean_words(p, lp, min_normal: int) -> list[int]:
    """The words of :func:`lean_kernel`'s parameter array for the constants ``p`` of
    :func:`fp8kit._kernels.codec._params` and ``lp`` of
    :func:`fp8kit._kernels.codec.lean_params` (one source layout), and the bits below
    which the FPU (or the tiny) step rounds."""
    sh = int(p[2])
    words = [0] * _N
    words[_ABS], words[_RB], words[_ODD_BIT], words[_SH] = int(p[0]), int(p[3]), 1 << sh, sh
    words[_MIN_NORMAL] = min_normal
    words[_MAGIC], words[_OVF], words[_NAN] = int(p[6]), int(p[10]), int(p[12])
    words[_NAN_THR], words[_NEG_THR] = int(lp[0]), int(lp[1])
    words[_SIGN] = int(p[13]) >> int(p[14])
    words[_ONE] = 1  # (a run-time 1: LLVM then keeps the masked add of the tie rule)
    return words


def _half_words(fmt: FloatFormat, p) -> list[int]:
    """The words of :func:`lean_kernel`'s parameter array for float16 data's own words
    (after the float32 ones; ``p``: the float32 layout's constants of
    :func:`fp8kit._kernels.codec._params`, whose codes, sign and overflow words are the
    same): the rounding bias without the rebias, which is the last word, subtracted after
    the shift (``lean_code``'s ``post``: a float16 word plus the rebias would not fit 16
    bits); the smallest word the 16-bit lanes take (float16's smallest normal or the
    format's); NaN's threshold and the negative one as no word reaching them (Inf, NaN
    and the words below the smallest are done widened)."""
    m = fmt.mantissa_bits
    sh = 10 - m
    words = [0] * (_N + 1)
    words[_ABS], words[_RB], words[_ODD_BIT], words[_SH] = 0x7FFF, (1 << (sh - 1)) - 1, 1 << sh, sh
    words[_MIN_NORMAL] = min(max(_HALF_NORMAL, (fmt.minexp + 15) << 10), _HALF_INF)
    words[_OVF], words[_NAN] = int(p[10]), int(p[12])
    words[_NAN_THR], words[_NEG_THR] = 0x7FFF, 0x8000  # (-0 gets code 0 where no -0)
    words[_SIGN] = int(p[13]) >> int(p[14])
    words[_ONE] = 1
    words[_N] = ((15 - fmt.bias) << m) & 0xFFFF  # (the rebias, wrapped: post)
    return words


#: float16's Inf word, from which (with NaN above) the 16-bit lanes hand a group over,
#: and its smallest normal.
_HALF_INF, _HALF_NORMAL = 0x7C00, 0x400
#: float16 data on its own words: elements a group (a constant trip count: LLVM's vector
#: loop has no remainder; a group that holds a word the lanes do not take is done again,
#: widened).
_GROUP = 64


@njit(inline="always")
def off_lanes(a, least, one, infs):
    """Whether the float16 magnitude bits ``a`` are a word the 16-bit lanes hand over to
    the widened loop: not zero and below ``least`` (float16's smallest normal, or a
    format's above it), and with ``infs`` Inf or NaN too (the lean formula's lanes do not
    round them, the unsigned formula's do: one test fewer, 12-15% of its time).  The
    subtractions wrap."""
    if infs:
        span = cast_like(np.uint16(_HALF_INF) - least, one)
        return (cast_like(a - least, one) >= span) & (a != cast_like(one - one, one))
    return cast_like(a - one, one) < cast_like(least - one, one)


def width_of(source: str) -> int:
    """Bits of the source layout's words."""
    return 32 if source == "float32" else 64


@njit(inline="always")
def lean_code(v, w, flip, use_magic, tiny, clear, neg_zero, zeros, post=None):
    """The code of the source bits ``v`` (the words of ``w``'s width) by
    :func:`fp8kit._kernels.bits.encode_lean`'s formula with the constants ``w`` of one
    source layout (:func:`_lean_words`' order, as read by :func:`_make_lean`); the flags as
    there (``use_magic`` and ``tiny`` False: no value below the smallest normal is given
    but, with ``zeros``, zeros, whose magnitude code is 0 where the FPU or the tiny step
    would give it: the integer formula's is not, its bias holding the rebias).  ``post``:
    the rebias, subtracted after the shift (wrapping in the words' width) where the bias
    does not hold it: float16's words, whose sum would not fit 16 bits."""
    abs_mask, rb, odd_bit, sh, min_normal, magic, ovf, nan_thr, nan, sign, neg_thr, one = w
    zero = cast_like(one - one, one)
    a = cast_like(v & abs_mask, one)
    r = cast_like(a + rb, one)
    # the ties-to-even bit: a test under mask and a masked add
    # (the test in the words' width: 16-bit lanes stay 16-bit)
    if (cast_like(a & odd_bit, one) == zero) if flip else (cast_like(a & odd_bit, one) != zero):
        r = cast_like(r + one, one)
    code = shr(r, sh, one)
    if post is not None:
        code = cast_like(code - post, one)
    mag = ovf if code > ovf else code
    if zeros:
        mag = zero if a == zero else mag
    if not clear:
        mag = nan if a > nan_thr else mag
    if tiny:
        kept = shr(a, _TINY_SH, one) & one
        small = shr(cast_like(a + _TINY_HALF + kept, one), _TINY_SH, one)
        mag = small if a < min_normal else mag
    elif use_magic:  # (below the smallest normal the FPU: the sum's low bits are the code)
        mag = as_bits(as_float(a) + magic) if a < min_normal else mag
    if clear:
        mag = zero if v > abs_mask else mag
        mag = nan if a > nan_thr else mag
    elif neg_zero:
        mag = cast_like(mag ^ sign, one) if v > abs_mask else mag
    else:
        mag = cast_like(mag | sign, one) if v > neg_thr else mag
    return mag


def _make_lean(
    bits: int, width: int, code_bytes: int, half: bool, neg_zero: bool, use_magic: bool,
    flip: bool = False, clear: bool = False, tiny: bool = False, lanes16: bool = False,
):  # fmt: skip
    """The make function of :func:`lean_kernel`'s kernel: ``bits`` an element (16:
    bfloat16, or float16 where ``half``, widened to float32 bits) to codes of
    ``code_bytes``, on ``width``-bit words; ``neg_zero``: the format has -0 (the sign
    xor-ed into the code, else or-ed in above ``neg_thr``); ``use_magic``: the FPU rounds
    below the format's smallest normal (not where it is the source's: bfloat16 from
    float32); ``flip``: ties round up where the kept bit is 0 (P3109's precision 1: the
    code's parity is the opposite of the source exponent's); ``clear``: negative numbers
    give code 0 (NaN still the NaN code: an unsigned format, saturating); ``tiny``: below
    float32's smallest normal, integer nearest-even steps of 2**-127 (codes 0, 1, 2:
    P3109's 8-bit unsigned precision-1 formats), not the FPU's.

    ``lanes16`` (bfloat16 data, at most 6 mantissa bits): each block of data whose values
    are all 0 or at least the smallest normal (of the format, where the FPU or the tiny
    step rounds below it) is rounded on its own 16-bit words with the constants of the
    bfloat16 layout, twice as many a vector (256K bfloat16 -> p3109_k8p1se, one thread:
    14.1-14.8 us against 24.5-26.4 widened); a block that holds another value is done
    again, widened.  The codes are the same: a bfloat16 word is the float32 word's top
    half, the formula's shift drops 17 bits or more of the float32 sum, whose low 16 bits
    (those of the rounding bias, all ones) never carry; zeros are given code 0 as the FPU
    or tiny step gives them.

    ``lanes16`` with ``half`` (float16 data, at most 6 mantissa bits, 8-bit codes): groups
    of :data:`_GROUP` rounded on float16's own words (:func:`_half_words`: the same
    formula, the rebias subtracted after the shift); a group holding a word below the
    smallest normal (float16's or the format's) but zero, an Inf or a NaN is done again,
    widened (256K float16 -> p3109_k8p1se, one thread: 14.7-14.8 us against 25.4-25.6
    widened; the old IR took 18)."""
    version = source_version()
    load = (LOAD_LUT if half else LOAD_BF16) if bits == 16 else LOAD_DIRECT
    one32 = np.uint32(1)
    check = use_magic or tiny  # (lanes16: blocks below the smallest normal widened)

    def make(parallel):
        def kernel(prm, x, lut, table, out, nchunks):
            if version == 0 or parallel is None:  # see source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            w32 = (prm[_ABS], prm[_RB], prm[_ODD_BIT], prm[_SH], prm[_MIN_NORMAL],
                   as_float(prm[_MAGIC]), prm[_OVF], prm[_NAN_THR], prm[_NAN], prm[_SIGN],
                   prm[_NEG_THR], prm[_ONE])  # fmt: skip
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                prefer_512()
                xc, oc = chunks(x, out, c, step)
                if lanes16:
                    # (the 16-bit words' constants: bfloat16's or float16's layout)
                    u = np.uint16
                    w16 = (u(prm[_N + _ABS]), u(prm[_N + _RB]), u(prm[_N + _ODD_BIT]),
                           u(prm[_N + _SH]), u(prm[_N + _MIN_NORMAL]), w32[5],
                           u(prm[_N + _OVF]), u(prm[_N + _NAN_THR]), u(prm[_N + _NAN]),
                           u(prm[_N + _SIGN]), u(prm[_N + _NEG_THR]),
                           u(prm[_N + _ONE]))  # fmt: skip
                    one16 = w16[11]
                if lanes16 and half:
                    post = u(prm[_N + _N])  # (float16's rebias: see _half_words)
                    least = w16[4]
                    done = xc.size - xc.size % _GROUP
                    for g in range(0, done, _GROUP):
                        low = False
                        for t in range(_GROUP):
                            v16 = xc[g + t]  # (not v: v is 32-bit, and a variable keeps one type)
                            a = cast_like(v16 & w16[0], one16)
                            low |= off_lanes(a, least, one16, True)
                            oc[g + t] = lean_code(v16, w16, flip, False, False, clear, neg_zero,
                                                  True, post)  # fmt: skip
                        if low:  # (the group again, widened)
                            for t in range(_GROUP):
                                v = load_bits(xc, g + t, lut, load, one32)
                                oc[g + t] = lean_code(v, w32, flip, use_magic, tiny, clear,
                                                      neg_zero, False)  # fmt: skip
                    for j in range(done, xc.size):
                        v = load_bits(xc, j, lut, load, one32)
                        oc[j] = lean_code(v, w32, flip, use_magic, tiny, clear, neg_zero, False)
                elif lanes16:
                    # (0 < |v| < the smallest normal: |v| - 1 below it less 1, wrapping)
                    below = cast_like(w16[4] - one16, one16)
                    for b0 in range(0, xc.size, _LOOKUP_BLOCK):
                        xs, os = span(xc, b0, b0 + _LOOKUP_BLOCK), span(oc, b0, b0 + _LOOKUP_BLOCK)
                        low = False
                        for j in range(xs.size):
                            v16 = xs[j]
                            if check:
                                a = cast_like(v16 & w16[0], one16)
                                low |= cast_like(a - one16, one16) < below
                            os[j] = lean_code(v16, w16, flip, False, False, clear, neg_zero, check)
                        if low:  # (the block again, widened: the FPU or the tiny step)
                            for j in range(xs.size):
                                v = load_bits(xs, j, lut, load, one32)
                                os[j] = lean_code(v, w32, flip, use_magic, tiny, clear, neg_zero,
                                                  False)  # fmt: skip
                else:
                    for j in range(xc.size):
                        v = load_bits(xc, j, lut, load, one32)  # (16-bit data widened)
                        oc[j] = lean_code(v, w32, flip, use_magic, tiny, clear, neg_zero, False)

        return kernel

    return make


@functools.cache
def unsigned_kernel(
    fmt: FloatFormat, dtype: np.dtype, saturate, round_to: bool = False, mode: int = 0
):
    """Kernel rounding ``dtype`` data (float32, float64, bfloat16 or float16 bits) to the
    codes of an unsigned power-of-two format (float8_e8m0fnu), nearest, ties up, as
    :func:`fp8kit._kernels.bits.encode_unsigned` does from the same constants (the ``q``
    of :func:`fp8kit._kernels.codec._params`), with
    :func:`fp8kit._kernels.codec.encode_kernel`'s call and codes (the general kernel's
    formula, with the mode compiled in and no lut read); with ``round_to``, the
    codes' values looked up in the byte planes of the decode table to ``dtype`` (the
    ``table`` argument: :func:`fp8kit._kernels.decode.format_planes`), that kernel's call
    with ``table_dtype`` and ``planes``.  None for other formats, data the API widens
    first, or (``round_to``) where there are no planes.  ``mode``: a deterministic
    rounding mode of :mod:`fp8kit._kernels.rounding` (the formula of
    :func:`fp8kit._kernels.rounding.encode_unsigned_mode`, compiled in); None for the
    stochastic ones.  16-bit data rounds on its own words (see :func:`_make_unsigned`)."""
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
    words = [int(v) for v in q]
    if bits == 16:
        # 16-bit data: the formula on its own words (16-bit lanes), with the constants of
        # the bfloat16 or float16 layout after the float32 ones (see _make_unsigned)
        own = "float16" if dtype == np.float16 else "bfloat16"
        words += [int(v) for v in _params(fmt, own, saturate, mode)[1]]
    params = np.array(words, f"u{width // 8}")
    params.flags.writeable = False
    out_bits = dtype.itemsize * 8 if round_to else 0
    flags = (bits, width, dtype == np.float16, out_bits, int(mode))
    sig = _sig(width, bits, np.uint8, out_bits or 8)
    kernel = NumbaNative(_make_unsigned(*flags), sig, ("encode_unsigned",) + flags, params)
    kernel.xo = not round_to  # (codes: no lut or table read)
    kernel.function_passes = False  # (as fast: see Kernel.function_passes)
    kernel.planes = bool(round_to)
    return kernel


def _make_unsigned(bits: int, width: int, half: bool, out_bits: int, mode: int):
    """The make function of :func:`unsigned_kernel`'s kernel: ``bits`` an element to
    8-bit codes on ``width``-bit words (16-bit data: on its own words, float16's groups
    that hold a subnormal widened to float32 bits) or, with ``out_bits``, to their values
    from the byte planes at ``table``; in ``mode``."""
    version = source_version()
    load = (LOAD_LUT if half else LOAD_BF16) if bits == 16 else LOAD_DIRECT
    one32 = np.uint32(1)
    planes = bool(out_bits)
    # 16-bit data: the formula on its own words, with the constants of its layout
    # (codec._params): every step is an integer one on the words' exponent and top
    # mantissa bits, which a bfloat16 word and the float32 word it widens to share (256K
    # bfloat16 -> float8_e8m0fnu, one thread: 15.3-17.1 us against 32-36 widened in
    # blocks, 28-31 for float32 data).  A float16 word's too, but for its subnormals (the
    # formula has no leading-zero count): each group of _GROUP elements that holds one is
    # done again, widened (256K float16 -> float8_e8m0fnu, one thread: 12.3-12.9 us
    # against 33.2-33.6 widened; groups of 2048 took 19.5 in a standalone test, of 64-256
    # 16.1)
    own16 = bits == 16

    def make(parallel):
        def kernel(prm, x, lut, table, out, nchunks):
            if version == 0 or parallel is None:  # see source_version
                return
            nchunks, c_first, c_stop = chunk_range(nchunks)
            q32 = (prm[0], prm[1], prm[2], prm[3], prm[4], prm[5], prm[6], prm[7], prm[8],
                   prm[9], prm[10], prm[11])  # fmt: skip
            if own16:
                u = np.uint16
                q = (u(prm[12]), u(prm[13]), u(prm[14]), u(prm[15]), u(prm[16]), u(prm[17]),
                     u(prm[18]), u(prm[19]), u(prm[20]), u(prm[21]), u(prm[22]),
                     u(prm[23]))  # fmt: skip
            else:
                q = q32
            one16, least16 = np.uint16(1), np.uint16(_HALF_NORMAL)
            buf = stack_buffer(_LOOKUP_BLOCK, np.uint8)
            step = (x.size + nchunks - 1) // nchunks
            for c in range(c_first, c_stop):
                prefer_512()
                xc, oc = chunks(x, out, c, step)
                # (planes: codes of a block into a buffer, then their values)
                blk = _LOOKUP_BLOCK if planes else (xc.size if xc.size > 1 else 1)
                for b0 in range(0, xc.size, blk):
                    xs, os = span(xc, b0, b0 + blk), span(oc, b0, b0 + blk)
                    done = 0
                    if half:
                        # (groups of a constant length: LLVM's vectorized loop has no
                        # remainder; a group holding a subnormal, 0 < |v| < 2**-14, is
                        # done again widened, one time in about 300 for normal data,
                        # where a block of 2048 was one in 8)
                        done = xs.size - xs.size % _GROUP
                        for g in range(0, done, _GROUP):
                            low = False
                            for t in range(_GROUP):
                                v = xs[g + t]
                                a = cast_like(v & q[0], one16)
                                low |= off_lanes(a, least16, one16, False)
                                code16 = encode_unsigned_mode(v, q, mode, 0, 0, True)
                                if planes:
                                    buf[g + t] = code16
                                else:
                                    os[g + t] = code16
                            if low:
                                for t in range(_GROUP):
                                    v32 = load_bits(xs, g + t, lut, load, one32)
                                    code = encode_unsigned_mode(v32, q32, mode, 0, 0)
                                    if planes:
                                        buf[g + t] = code
                                    else:
                                        os[g + t] = code
                    for j in range(done, xs.size):  # (float16: the rest widened)
                        if half:
                            code = encode_unsigned_mode(load_bits(xs, j, lut, load, one32),
                                                        q32, mode, 0, 0)  # fmt: skip
                        elif own16:
                            code = encode_unsigned_mode(xs[j], q, mode, 0, 0)
                        else:
                            code = encode_unsigned_mode(load_bits(xs, j, lut, load, one32), q,
                                                        mode, 0, 0)  # fmt: skip
                        if planes:
                            buf[j] = code
                        else:
                            os[j] = code
                    if planes:
                        plane_lookup(table, buf, os, xs.size)

        return kernel

    return make
