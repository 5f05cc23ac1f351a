"""Encode bfloat16 and float16 input on 16-bit lanes (32 elements per 512-bit vector) or
byte lanes (64), and float32 and float64 input on byte lanes.

The float32 kernels widen 16-bit input to float32 bits and round on 16 lanes: the same
~20 vector operations per 16 elements as float32 input for half the bytes (bfloat16 ->
float8_e4m3fn measured 0.36-0.38 of the streaming limit on one thread).  Here the rounding
stays on the input's own bits, in LLVM vector code written out (:func:`_vector_body`):
the loop vectorizer, given the scalar formula, widened the 16-bit lanes to two float32
registers and back for the FPU step, which took half the loop's time.  There is no 16-bit
FPU add on the CPUs this targets (no AVX512-FP16): results below the format's smallest
normal are rounded by the FPU trick of :func:`fp8kit._kernels.bits.encode_fast`, on the
32-bit lanes that hold two 16-bit elements each, which a flush-to-zero mode cannot change
(the kernel is only used where every source subnormal rounds to zero, and the sum is a
float32 normal).  Nearest-even only; the overflow, Inf, NaN and sign rules are those of
:func:`fp8kit._kernels.bits._finish_with`, with the same constants (from
:func:`fp8kit._kernels.codec._params`).  One compiled kernel serves every format and both
16-bit dtypes (constants at run time; the variant is picked once per call).

Where the CPU has AVX512-VBMI, 16-bit input runs on byte lanes instead, 64 elements per
vector (:func:`_byte_body`): a normal code is the sum of a table entry for the high byte
(bfloat16: sign and 7 exponent bits; float16: sign, 5 exponent and 2 mantissa bits) and
one for the low byte (the rest of the bits that round; float16's index also takes the
high byte's last mantissa bit, which decides ties of 2-bit mantissas), both looked up by
``vpermi2b``; the few exponents below the format's smallest normal take a third table.
The tables are built in numpy from the 16-bit kernel's own formula (:func:`_word_codes`)
and used only where the scheme reproduces it on every input (:func:`_byte_params`): the
float8 formats and the P3109 8-bit formats with 2-4 mantissa bits (from float16: those
within its range; the others run :func:`fp8kit._kernels.lean.lean_kernel`, widened
to float32 bits).  About 30 vector operations per 64 elements where the 16-bit lanes
take about 42; 64K elements in cache, one thread: bfloat16 -> float8_e4m3fn 0.082 against 0.096
ns an element, float16 -> float8_e4m3fn 0.079 against 0.098.  From 8M elements they write
with non-temporal stores (:data:`STREAM_MIN`).

float32 input to those formats takes the bfloat16 tables too (:func:`f32_byte_kernel`):
its top 16 bits, the lowest or-ed with whether any bit below is set, round as the float32
does.  1M elements in cache, one thread: float32 -> float8_e4m3fn 0.106 ns an element
against 0.144 for the float32 formula (:func:`fp8kit._kernels.codec.encode_kernel`), whose
kernel also took longer to compile (cold first call of encode 0.55 -> 0.45 s).  float64
input is first rounded to odd on float32 (:func:`f64_byte_kernel`), which keeps it rounded
once.
FakeConvert of float32 data with one scale writes its formula out the same way
(:func:`fake_kernel`: float32 arithmetic and the rounding in place on 16 lanes, no codes),
compiled in 0.16 s where the general kernel takes 0.37; with scales in any other broadcast
layout, :func:`fake_walk_kernel` (which replaced the per-row kernel).  The byte-lane loops,
FakeConvert's and the walk are native kernels (:mod:`fp8kit._kernels.native`): compiled
without Numba's typed pipeline.

round_to bfloat16 and float16 (nearest-even) looks those codes up in the decode table's
byte planes in the same pass (:func:`round16_kernel`); round_to float32 and float64 round
the bits in place instead (:mod:`fp8kit._kernels.inplace`: faster than codes and planes).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils

from ..formats import FloatFormat, get_format
from .bits import (
    _X86,
    PREFETCH_BYTES,
    STREAM_BYTES,
    as_bits,
    as_float,
    block_end,
    block_load,
    block_mask,
    block_store,
    byte_address,
    cast_like,
    chunk_range,
    chunks,
    cpu_has,
    encode_fast,
    f64_to_odd_f32,
    first_lanes,
    half_to_single_bits,
    load_planes,
    masked_access,
    next_row,
    permute_bytes,
    plane_values,
    prefer_512,
    prefetches,
    round_in_place,
    shl,
    span,
    splat,
    stack_buffer,
    store_fence,
    stream_block,
    vector_blocks,
    walk_rows,
    widen_half,
)
from .codec import STREAM_MIN_TRAFFIC, Kernel, _array, _params, dummy, plan, source_version
from .native import (
    LEAN_PASSES,
    GenericNativeKernel,
    NativeKernel,
    body_function,
    chunk_bounds,
    element_range,
)
from .native import available as native_available

# 16-bit source layouts: (mantissa bits, exponent bits, bias)
_SOURCES16 = {
    np.dtype(ml_dtypes.bfloat16): (7, 8, 127),
    np.dtype(np.float16): (10, 5, 15),
}


def _fits(fmt: FloatFormat, in_dtype: np.dtype) -> bool:
    """Whether the 16-bit kernel rounds ``in_dtype`` to fmt exactly as the float32 path does:
    fmt's range within the source's normal range, the source's subnormals all rounding to
    zero (so the integer path never sees them as normals), at least one mantissa bit (ties
    by the kept bit's parity) and a sign rule of the fast path."""
    src_m, src_e, src_bias = _SOURCES16[in_dtype]
    src_emin, src_emax = 1 - src_bias, (1 << src_e) - 2 - src_bias
    if fmt.specials == "unsigned" or fmt.mantissa_bits == 0 or fmt.bits > 8:
        return False
    if fmt.mantissa_bits >= src_m or fmt.minexp < src_emin or fmt.maxexp - 1 > src_emax:
        return False
    # the largest source subnormal (< 2**src_emin) must round to zero: below half of fmt's
    # smallest subnormal, or fmt's subnormals are the source's (same smallest normal)
    if fmt.minexp != src_emin and fmt.minexp - fmt.mantissa_bits - 1 < src_emin:
        return False
    return plan(fmt, in_dtype).strategy == "fast"


def _prm(fmt: FloatFormat, in_dtype: np.dtype, saturate) -> np.ndarray | None:
    """The kernel's constants, or None where its folded Inf rule would differ (then the
    float32 kernels run)."""
    src_m, src_e, src_bias = _SOURCES16[in_dtype]
    p, _ = _params(fmt, "float32", saturate)  # the codes: source-independent
    max_mag, ovf, inf_res, nan_mag = (int(v) for v in p[9:13])
    sign_or = int(p[13]) >> (32 - fmt.bits)
    neg_zero = bool(p[15])
    m = fmt.mantissa_bits
    sh = src_m - m
    rebias = src_bias - fmt.bias
    emin_field = fmt.minexp + src_bias  # source exponent field of fmt's smallest normal
    src_inf = ((1 << src_e) - 1) << src_m
    assert ovf in (max_mag, max_mag + 1)
    flip = m == 0 and rebias % 2 == 1
    offset = 0  # (the rebias after the shift: no format this kernel takes needs it)
    # The sign rule of bits._finish_with for formats without -0 (keep, s) and the result
    # it gives a negative Inf.
    s = sign_or
    keep = 0x7FFF if s else 0
    if not neg_zero and s == 0 and ovf != max_mag:
        return None  # (-Inf is NaN there: no format the kernel takes has that rule)
    neg_inf = inf_res if neg_zero else ((inf_res & keep) | s if inf_res else 0)
    # Inf costs no compare where it gives the overflow code (the unsigned min of the
    # rounded code, which is larger for Inf, gives it) or the NaN code with either sign
    # (the NaN compare takes a >= src_inf): 2 of the ~18 vector operations a block.
    nan_thr = src_inf
    # (Inf's rounded code is at or above ovf, but with the rebias after the shift it may
    # not be: then Inf takes its compare)
    code_inf = ((src_inf + (1 << sh >> 1)) >> sh) + offset if offset else ovf
    need_inf = inf_res != min(code_inf, ovf)
    if need_inf and inf_res == nan_mag and neg_inf == nan_mag:
        nan_thr, need_inf = src_inf - 1, False
    # below fmt's smallest normal the FPU rounds (see _vector_body) the float32 whose bits
    # are the source's shifted to float32's exponent field: the value times 2**-scale
    # (exact), so magic (bits.encode_fast's) is scaled alike, a float32 normal
    scale = 127 - src_bias
    magic = fmt.minexp - m + 23 - scale
    # min_normal: below it, the FPU rounding; none when fmt's subnormals are the source's
    # (the normal formula rounds them: float16 -> float8_e5m2), nor where every source
    # normal is a normal of fmt (``normals``)
    min_normal = 0 if fmt.minexp <= 1 - src_bias else emin_field << src_m
    assert scale >= 0 and (magic >= -126 or min_normal == 0)
    magic_bits = int(np.array(2.0 ** max(magic, -126), np.float32).view(np.uint32))
    # rb: rounding bias (ties by the kept bit, see _vector_body) and rebias, as in
    # codec._params; with the offset the rebias is added after the shift
    rb = (((1 << (sh - 1)) - 1 if sh else 0) - (0 if offset else rebias << src_m)) & 0xFFFF
    prm = [
        0x7FFF,  # abs_mask
        sh,
        rb,
        min_normal,
        23 - src_m,  # widening shift: source bits -> float32 bits of value * 2**-scale
        magic_bits >> 16,  # (the low 16 bits are zero)
        nan_thr,
        src_inf,
        ovf,
        inf_res,
        nan_mag,
        (sign_or << (16 - fmt.bits)) & 0xFFFF,  # sign_bit
        16 - fmt.bits,  # sign_shift
        int(neg_zero),
        int(need_inf),
        sign_or,  # s: what a negative value's code is or-ed with (no -0)
        keep,
        int(flip),
        offset,
    ]
    out = np.array(prm, np.uint16)
    out.flags.writeable = False
    return out


@functools.cache
def encode16_kernel(fmt: FloatFormat, in_dtype: np.dtype, saturate) -> Kernel | None:
    """Kernel rounding bfloat16/float16 bits (uint16) to ``fmt`` codes (uint8), nearest-even,
    with :func:`fp8kit._kernels.codec.encode_kernel`'s call and results (on byte lanes where
    the CPU and the format allow, see the module's docstring), and float32 bits on byte
    lanes (:func:`f32_byte_kernel`), float64 bits too (:func:`f64_byte_kernel`); None where
    that kernel must do it."""
    in_dtype = np.dtype(in_dtype)
    if in_dtype == np.float32:
        return f32_byte_kernel(fmt, saturate)
    if in_dtype == np.float64:
        return f64_byte_kernel(fmt, saturate)
    if in_dtype == np.float16 and fmt == get_format("bfloat16"):
        return f16_to_bf16_kernel(saturate)
    if in_dtype not in _SOURCES16:
        return None
    prm = _prm(fmt, in_dtype, saturate) if _fits(fmt, in_dtype) else None
    if prm is None:
        # (float16 to formats beyond its range: the lean kernel's 16-bit lanes, a block
        # with a float16 subnormal widened, 0.99-1.02 of the streaming limit where
        # float32's byte-lane tables on the widened data took 0.75-0.96)
        return None
    if cpu_has("avx512vbmi"):
        byte_prm = _byte_params(prm)
        if byte_prm is not None:
            half = in_dtype == np.float16
            return byte_kernel(_HALF_BYTES if half else _BYTES, byte_prm)
    half = in_dtype == np.float16
    flags = (cpu_has("avx512bw"), half, bool(prm[_NEG_ZERO]), bool(prm[_NEED_INF]))
    kernel = NativeKernel(("encode16_words",) + flags, _words_native(*flags), prm)
    kernel.xo = True  # (no lut or table: small calls pass x and out alone)
    return kernel


@functools.cache
def f32_byte_kernel(fmt: FloatFormat, saturate) -> Kernel | None:
    """Kernel rounding float32 bits (uint32) to ``fmt`` codes (uint8) on byte lanes, with
    :func:`fp8kit._kernels.codec.encode_kernel`'s call and results; None where that kernel
    must do it (no AVX512-VBMI, or no bfloat16 byte-lane tables for ``fmt``).

    A float32 rounds to ``fmt`` as the bfloat16 of its top 16 bits does once the lowest of
    them is or-ed with whether any of the 16 below is set, where ``fmt`` keeps at most 5
    mantissa bits: its rounding bit is then above that lowest bit, which only counts as a
    sticky bit (so ties, and a NaN whose payload is in the low bits, stay what they are);
    bfloat16 has float32's exponent range, so nothing else differs.  Two vpermi2b per
    byte and a merge take the top two bytes of 64 elements (:func:`_bytes_of_words`), a
    test per 16 the sticky bits, then the bfloat16 body: 0.106 ns an element in cache
    where the float32 formula takes 0.144.  The kernel also compiles in less time (LLVM
    IR written out, no loop to vectorize: 0.155 s against 0.29)."""
    if not cpu_has("avx512vbmi") or fmt.mantissa_bits > 5:
        return None
    bf16 = np.dtype(ml_dtypes.bfloat16)
    if not _fits(fmt, bf16):
        return None
    prm = _prm(fmt, bf16, saturate)
    byte_prm = None if prm is None else _byte_params(prm)
    if byte_prm is None:
        return None
    return byte_kernel(_F32_BYTES, byte_prm)


@functools.cache
def f64_byte_kernel(fmt: FloatFormat, saturate) -> Kernel | None:
    """Kernel rounding float64 bits (uint64) to ``fmt`` codes (uint8) on byte lanes, with
    :func:`fp8kit._kernels.codec.encode_kernel`'s call and results (rounded once); None
    where :func:`f32_byte_kernel` is None.

    Each float64 becomes a float32 rounded to odd (converted toward zero, the lowest bit
    or-ed with whether that was inexact: :func:`f64_to_odd_f32`), which rounds to ``fmt``
    as the float64 does: float32 keeps 18 or more bits beyond ``fmt``'s,
    so the dropped bits only ever act as a sticky bit.  Beyond float32's range it is
    float32's largest (odd) finite, far beyond ``fmt``'s; below float32's smallest normal
    a zero or the smallest subnormal of its sign, both below half of ``fmt``'s smallest
    subnormal (``fmt`` is within bfloat16's normal range); Inf stays Inf and a NaN is a
    NaN of its sign.  Then the float32 byte-lane body.  Its kernel compiled in about
    0.21 s where the float64 formula's took 0.29 (cold first call of encode 0.63 -> 0.48 s,
    in a busy hour)."""
    f32 = f32_byte_kernel(fmt, saturate)
    if f32 is None:
        return None
    return byte_kernel(_F64_BYTES, f32._params)


@functools.cache
def round16_kernel(fmt: FloatFormat, in_dtype: np.dtype, saturate) -> Kernel | None:
    """Kernel rounding bfloat16/float16 bits to the bits of ``fmt``'s nearest-even values in
    the same type (round-to-format), with :func:`fp8kit._kernels.codec.encode_kernel`'s
    call with ``table_dtype`` and ``planes``: :func:`encode16_kernel`'s byte-lane codes,
    looked up in the decode table's byte planes in registers, in one pass (0.17 s to
    compile against 0.28 s for that kernel's loop).  None where either is missing."""
    from .decode import format_planes

    in_dtype = np.dtype(in_dtype)
    if in_dtype not in _SOURCES16 or format_planes(fmt, in_dtype) is None:
        return None
    codes = encode16_kernel(fmt, in_dtype, saturate)
    if codes is None or codes._key[0] not in ("encode16_bytes", "encode16_half_bytes"):
        return None
    half = in_dtype == np.float16
    which = _F16_ROUND if half else _BF16_ROUND
    kernel = byte_kernel(which, codes._params)
    kernel.planes = True
    return kernel


# Layout of fake_scalars' array.
(_FK_SCALE, _FK_SHIFT, _FK_HAS_SHIFT, _FK_HALF, _FK_KEEP, _FK_KEEP_SH, _FK_MIN_NORMAL,
 _FK_MAGIC, _FK_MAX, _FK_ZSIGN, _FK_N) = range(11)  # fmt: skip


def fake_scalars(r8, scale: np.float32, shift: np.float32 | None) -> np.ndarray:
    """The ``lut`` argument of :func:`fake_kernel` and the ``consts`` one of
    :func:`fake_walk_kernel` (uint32; the latter reads no scale and shift from it): the
    bits of scale and shift, whether there is a shift (adding a zero one would turn -0 into
    +0), and the constants
    of :func:`fp8kit._kernels.bits.round_in_place` ``r8`` (float32 source:
    :func:`fp8kit._kernels.fake.round_params`), the smallest normal 0 where the FPU step is
    not used, and the sign bit of a zero result (0 in formats without -0)."""
    (_, _, half, keep, min_normal, magic, use_magic, src_inf, max_bits, nan_bits, sign_bit,
     neg_zero, _) = r8  # fmt: skip
    assert (int(src_inf), int(nan_bits), int(sign_bit)) == (0x7F800000, 0x7FC00000, 1 << 31)
    shift_bits = np.float32(0.0 if shift is None else shift).view(np.uint32)
    words = [
        np.float32(scale).view(np.uint32), shift_bits,
        shift is not None, half, keep[0], keep[1], min_normal if use_magic else 0,
        np.float32(magic).view(np.uint32), max_bits, (1 << 31) if neg_zero else 0,
    ]  # fmt: skip
    return np.array([int(v) for v in words], np.uint32)


@functools.cache
def fake_kernel() -> Kernel:
    """Kernel of FakeConvert's formula ``(round(x * scale - shift) + shift) / scale`` for
    float32 data and one scale (and shift), nearest-even, in one pass (:func:`_fake_word`):
    the call of the encode kernels, ``lut`` :func:`fake_scalars` (every format: its
    constants are there), ``table`` unused, ``out`` float32 bits.  The same float32
    arithmetic as :func:`fp8kit._kernels.fake.fake_convert_kernel`'s for scales and shifts
    that are not NaN (the caller's check: their x86 NaN rule needs no fix then), in a plain
    loop over each chunk that LLVM vectorizes; from :data:`STREAM_MIN` elements it writes
    whole cache lines with non-temporal stores."""
    return _fake_loop(False)


@functools.cache
def fake16_kernel(dtype) -> Kernel:
    """:func:`fake_kernel` for bfloat16 or float16 data (``dtype``): the same float32
    arithmetic on their values (exact), the result rounded once to the data's type
    (:func:`fp8kit._kernels.bits.encode_fast`), as
    :func:`fp8kit._kernels.fake.fake_convert_kernel` does in spec mode; ``lut``:
    :func:`fake_scalars`.  A kernel per type: one for both (the type read at run time) took
    0.35 s of Numba's front end on a first call, where each alone takes 0.2."""
    return _fake_loop(True, np.dtype(dtype) == np.float16)


@njit(inline="always")
def _fake_word(b, s, h, has_shift, r):
    """FakeConvert of the float32 bits ``b``: ``(round(x * s - h) + h) / s`` in float32
    (without a shift no subtraction and no addition, which would turn -0 into +0),
    ``round`` as :func:`fp8kit._kernels.bits.round_in_place` with the constants ``r``."""
    y = as_float(b) * s
    y = y - h if has_shift else y
    fq = as_float(round_in_place(as_bits(y), r))
    fq = fq + h if has_shift else fq
    return as_bits(fq / s)


@njit(inline="always")
def _fake16_run(xs, os, s, h, has_shift, r, half, q):
    """:func:`_fake_word` of the float16 (``half``) or bfloat16 bits ``xs`` widened to
    float32 (exact), each result rounded to the data's type with the constants ``q``
    (:func:`fp8kit._kernels.bits.encode_fast`) into ``os``."""
    for j in range(xs.size):
        v = xs[j]
        # (shl: Numba's << gives int64, which would make the bits a float64)
        b = half_to_single_bits(v) if half else shl(v, np.uint32(16), np.uint32(1))
        os[j] = encode_fast(_fake_word(b, s, h, has_shift, r), q)


def _fake_loop(half_data: bool, half: bool = False) -> Kernel:
    """The Numba kernel of :func:`fake_kernel` (float32 bits) or, ``half_data``,
    :func:`fake16_kernel` (bfloat16 bits, or float16 where ``half``), with the codec call
    ``(prm, x, lut, table, out, nchunks)`` (prm and table unused)."""
    bits_dt = np.uint16 if half_data else np.uint32
    from .fake import F16, round_params

    # float32 result -> float16 or bfloat16 (spec mode: one IEEE rounding, overflow to Inf)
    q16 = _params(get_format("float16"), "float32", False)[0]
    qbf = _params(get_format("bfloat16"), "float32", False)[0]
    assert F16 == 1 and bool(q16[7]) and not bool(qbf[7])
    r32 = round_params(get_format("float8_e4m3fn"))  # (the float32-source words of r8)
    version = source_version()
    stream_min = STREAM_MIN
    u32 = np.uint32

    def make(parallel):
        def kernel(prm, x, lut, table, out, nchunks):
            if version == 0 or parallel is None:  # never true; see codec.source_version
                return
            no_stream = (nchunks >> 62) & 1  # (fp8kit._parallel.NO_STREAM: a new array)
            nchunks, c_first, c_stop = chunk_range(nchunks)
            s, h = as_float(lut[_FK_SCALE]), as_float(lut[_FK_SHIFT])
            has_shift = lut[_FK_HAS_SHIFT] != 0
            # (round_in_place's constants: the format's from fake_scalars, a smallest normal
            # of 0 where the FPU step is not used, the -0 rule read at run time)
            r = (r32[0], r32[1], lut[_FK_HALF], (lut[_FK_KEEP], lut[_FK_KEEP_SH]),
                 lut[_FK_MIN_NORMAL], as_float(lut[_FK_MAGIC]), True, r32[7], lut[_FK_MAX],
                 r32[9], r32[10], lut[_FK_ZSIGN] != u32(0), r32[12])  # fmt: skip
            n = x.size
            step = (n + nchunks - 1) // nchunks
            # (large arrays: whole cache lines of out with non-temporal stores, from a stack
            # buffer, as codec.encode_kernel does; out aligned to its elements, as numpy
            # allocates it)
            stream = n >= stream_min and no_stream == 0
            stream = stream and byte_address(out, 0) % out.itemsize == 0
            for c in range(c_first, c_stop):
                prefer_512()  # see bits.prefer_512
                sbuf = stack_buffer(_FAKE_BLOCK, bits_dt)
                b0 = c * step
                hi = b0 + step
                hi = hi if hi < n else n  # (not min: see bits.chunk)
                while b0 < hi:
                    b1 = block_end(out, b0, hi, stream, _FAKE_BLOCK)
                    full = stream and b1 - b0 == _FAKE_BLOCK
                    xs = span(x, b0, b1)
                    os = sbuf if full else span(out, b0, b1)
                    # (16-bit data: the type's own rounding, not both selected: 256K
                    # bfloat16 in 0.8 of the time)
                    if half_data and half:
                        _fake16_run(xs, os, s, h, has_shift, r, True, q16)
                    elif half_data:
                        _fake16_run(xs, os, s, h, has_shift, r, False, qbf)
                    else:
                        for j in range(xs.size):
                            os[j] = _fake_word(xs[j], s, h, has_shift, r)
                    if full:
                        stream_block(out, b0, sbuf, _FAKE_BLOCK)
                    b0 = b1
                if stream:
                    store_fence()

        return kernel

    sig = types.void(
        _array(np.uint8, readonly=True),
        _array(bits_dt, readonly=True),
        _array(np.uint32, readonly=True),
        _array(np.uint8, readonly=True),
        _array(bits_dt),
        types.intp,
    )
    return Kernel(make, sig, ("fake_one_scale", half_data, half, version), dummy(np.uint8))


#: Elements per block of the one-scale FakeConvert kernels' streamed output (a stack
#: buffer that stays in L1).
_FAKE_BLOCK = 512


def _emit_fake_walk(
    context, builder, half_data, consts, x, scale, shift, shape, sstr, out, r0, r1, stage=None,
    fix_nan=False, along=None,
):  # fmt: skip
    """FakeConvert (:func:`_fake_body`), in LLVM IR, of rows ``r0 .. r1 - 1`` of the data
    ``x`` (float32 bits, or bfloat16/float16 bits: :func:`_fake16_body`, ``consts``' word after
    :func:`fake_scalars`' 1 for float16) into ``out``, seen as ``shape`` (4 dims; a row:
    ``shape[3]`` elements), the scale (and shift, where ``consts`` says there is one) of
    element ``(a, b, d, t)`` at ``a * sstr[0] + b * sstr[1] + d * sstr[2] + t * sstr[3]``
    with ``sstr[3]`` 0 (one per row) or 1 (one per element along rows), 16 lanes a
    block, a row's last masked: every broadcast layout of scales in one kernel of LLVM
    vector code (0.15 s to compile, where the general kernel took 0.36-0.39).  ``stage``:
    ``"pre"`` (:func:`_pre_body`, float32 bits out) or ``"post"``
    (:func:`_post_body`, float32 bits in) of FakeConvert in the other rounding modes;
    ``fix_nan``: scales or shifts may be NaN (:func:`_x86_first_nan`); ``along``: whether
    scales vary along the rows (``sstr[3]`` 1), known when the kernel is built (True or
    False) or read from ``sstr`` (None)."""
    intp = context.get_value_type(types.intp)
    i1, i32, i64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
    lanes = 2 * ROW_BLOCK if half_data else ROW_BLOCK  # (one 512-bit load of x)
    v32 = ir.VectorType(i32, lanes)
    vf = ir.VectorType(ir.FloatType(), lanes)
    vx = ir.VectorType(ir.IntType(16 if half_data and stage != "post" else 32), lanes)
    w, has_shift = _fake_constants(builder, consts, intp, v32)
    if half_data:
        half = builder.load(builder.gep(consts, [ir.Constant(intp, _FK_N)]))
        half = builder.icmp_unsigned("!=", half, ir.Constant(half.type, 0))

    def at(ptr, k):
        return builder.load(builder.gep(ptr, [ir.Constant(intp, k)]))

    one, zero = ir.Constant(i64, 1), ir.Constant(i64, 0)
    n1, n2, n3 = (at(shape, k) for k in (1, 2, 3))
    # Large outputs are written with non-temporal stores (a plain store first reads the
    # line it writes: a third of the traffic), only where every whole block covers whole
    # cache lines (else plain stores would share lines with streamed ones, which measured
    # very slow): out aligned to them and rows a multiple of them, or rows of 4 blocks or
    # more, whose blocks start at the first cache line of out in the row (a masked block
    # before it; numpy's large arrays start 16 bytes past a line, so without this rows of
    # several lines never streamed: 4096 x 4096 float32 into out=, 10.0 against 5.6 ms
    # for one scale); and where the caller allows it (``consts``' word after the float16
    # flag): into a new array, whose pages the first store faults in, streaming measured
    # 15-20% slower (16M float32, rows of 32: 23.6-24.3 against 19.2-20.8 ms), into an
    # existing one up to 1.4x faster.
    out_bytes = (16 if half_data and stage != "pre" else 32) // 8
    line_elements = STREAM_BYTES // out_bytes  # (at most a block: lanes * out_bytes >= 64)
    total = builder.mul(builder.mul(at(shape, 0), builder.mul(n1, n2)), n3)
    traffic = builder.mul(total, ir.Constant(i64, out_bytes + vx.element.width // 8))
    line = ir.Constant(i64, STREAM_BYTES - 1)
    may_stream = builder.load(builder.gep(consts, [ir.Constant(intp, _FK_N + 1)]))

    def all_of(*conditions):
        result = conditions[0]
        for c in conditions[1:]:
            result = builder.and_(result, c)
        return result

    # (not the "pre" stage's buffer, which round_to reads next: from the caches; nor in
    # place, where each line was just read into them)
    out_at = builder.ptrtoint(out, i64)
    long_rows = builder.icmp_signed(">=", n3, ir.Constant(i64, 4 * lanes))
    lines_whole = all_of(
        builder.icmp_unsigned("==", builder.and_(out_at, line), zero),
        builder.icmp_unsigned(
            "==", builder.and_(builder.mul(n3, ir.Constant(i64, out_bytes)), line), zero
        ),
    )
    stream = all_of(
        ir.Constant(i1, _X86 and stage != "pre"),
        builder.icmp_unsigned("!=", may_stream, ir.Constant(may_stream.type, 0)),
        builder.icmp_signed(">=", traffic, ir.Constant(i64, STREAM_MIN_TRAFFIC)),
        builder.or_(lines_whole, long_rows),
        builder.icmp_unsigned("==", builder.and_(out_at, ir.Constant(i64, out_bytes - 1)), zero),
        builder.icmp_unsigned("!=", builder.ptrtoint(x, i64), out_at),
    )
    st0, st1, st2, st3 = (at(sstr, k) for k in (0, 1, 2, 3))
    if along is None:
        per_element = builder.icmp_signed("!=", st3, zero)
    else:
        per_element = ir.Constant(i1, along)
    # (software prefetching of the data, and of the scales where they vary along the rows,
    # as vector_blocks does; with the line-aligned blocks above, one thread, 16M float32 in
    # rows of 4096 with a scale each into a new array 19.0-19.4 -> 15.9-16.3 ms, bfloat16
    # data 32.0-32.8 -> 11.5-12.4 ms, into out= 10.3-10.7 -> 6.6-8.1 ms)
    i8p = ir.IntType(8).as_pointer()
    fetch = None
    if prefetches():  # (a hint: it never faults, past the array's end too)
        fetch = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        )

    def prefetch(ptr, size):
        ahead = builder.gep(builder.bitcast(ptr, i8p), [ir.Constant(intp, PREFETCH_BYTES)])
        for k in range(0, size, STREAM_BYTES):
            at = builder.gep(ahead, [ir.Constant(intp, k)])
            builder.call(fetch, [at] + [ir.Constant(i32, v) for v in (0, 3, 1)])

    var = walk_rows(builder, r0, n1, n2)  # (r0's row indices, then counted on)
    names = ("a", "b", "d")
    step = ir.Constant(intp, lanes)
    n4 = ir.Constant(i32, 4)
    with cgutils.for_range_slice(builder, r0, r1, ir.Constant(intp, 1), intp) as (r, _):
        a, b, d = (builder.load(var[k]) for k in names)
        base = builder.add(
            builder.add(builder.mul(a, st0), builder.mul(b, st1)), builder.mul(d, st2)
        )
        s_row = splat(builder, builder.load(builder.gep(scale, [base])), vf)
        h_row = splat(builder, builder.load(builder.gep(shift, [base])), vf)
        start = builder.mul(r, n3)
        # (long rows: the blocks from the row's first cache line of out on, a masked block
        # of the elements before it at t < 0)
        past = builder.and_(
            builder.add(out_at, builder.mul(start, ir.Constant(i64, out_bytes))), line
        )
        head = builder.and_(
            builder.sub(ir.Constant(i64, line_elements),
                        builder.udiv(past, ir.Constant(i64, out_bytes))),
            ir.Constant(i64, line_elements - 1),
        )  # fmt: skip
        t0 = builder.select(
            builder.and_(long_rows, builder.icmp_unsigned("!=", head, zero)),
            builder.sub(head, step), zero,
        )  # fmt: skip
        with cgutils.for_range_slice(builder, t0, n3, step, intp) as (t, _):
            mask, full = block_mask(builder, n3, t, lanes)
            before = builder.icmp_signed("<", t, zero)  # (the head block: lanes -t on)
            skip = builder.trunc(builder.select(before, builder.neg(t), zero), i32)
            mask = builder.and_(mask, builder.not_(first_lanes(builder, skip, lanes)))
            full = builder.and_(full, builder.not_(before))
            # (the scales of the block where they vary along rows: no access otherwise)
            smask = builder.and_(mask, splat(builder, per_element, ir.VectorType(i1, lanes)))

            def scales(arr, row_value):
                at = builder.gep(arr, [builder.add(base, t)])
                ptr = builder.bitcast(at, v32.as_pointer())
                got = masked_access(
                    builder, "load", v32, [ptr, n4, smask, ir.Constant(v32, [0] * lanes)]
                )
                return builder.select(per_element, builder.bitcast(got, vf), row_value)

            scale_v, shift_v = scales(scale, s_row), scales(shift, h_row)
            src = builder.gep(x, [builder.add(start, t)])
            if fetch is not None:  # (each cache line of the block's input, read, kept)
                prefetch(src, lanes * vx.element.width // 8)
                with builder.if_then(per_element):  # (and the scales along the row)
                    prefetch(builder.gep(scale, [builder.add(base, t)]), 4 * lanes)
                    with builder.if_then(has_shift):
                        prefetch(builder.gep(shift, [builder.add(base, t)]), 4 * lanes)
            dst = builder.gep(out, [builder.add(start, t)])
            v = block_load(builder, src, vx, full, lambda: mask)
            if stage == "pre":
                wide = _widen16(builder, v, half) if half_data else v
                res = _pre_body(builder, wide, w, scale_v, shift_v, has_shift, fix_nan)
            elif stage == "post":
                res = _post_body(builder, v, scale_v, shift_v, has_shift, fix_nan)
                res = _narrow16(builder, res, half) if half_data else res
            elif half_data:
                res = _fake16_body(builder, v, w, scale_v, shift_v, has_shift, half, fix_nan)
            else:
                res = _fake_body(builder, v, w, scale_v, shift_v, has_shift, fix_nan)
            with builder.if_else(builder.and_(full, stream), likely=True) as (nt, plain):
                with nt:  # (whole cache lines of out: see below)
                    ptr = builder.bitcast(dst, res.type.as_pointer())
                    store = builder.store(res, ptr, align=STREAM_BYTES)
                    store.set_metadata(
                        "nontemporal", builder.module.add_metadata([ir.Constant(i32, 1)])
                    )
                with plain:
                    block_store(builder, res, dst, full, lambda: mask)
        next_row(builder, var, a, b, builder.add(d, one), n1, n2)
    if _X86:
        with builder.if_then(stream):
            fence = builder.module.declare_intrinsic(
                "llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), [])
            )
            builder.call(fence, [])


def _fake_walk_native(width: int, stage=None, fix_nan=False, along=None):
    """The emitter of :func:`fake_walk_kernel`'s native kernel
    (:data:`fp8kit._kernels.native.GENERIC_TYPE`), called as ``(consts, x, scale, shift,
    shape, sstr, out, nchunks)``: the chunks split the rows, one call runs its chunks'
    union (:func:`_emit_fake_walk` in a function of its own, 512-bit vectors preferred)."""
    x_bits = ir.IntType(16 if width == 16 and stage != "post" else 32).as_pointer()
    out_bits = ir.IntType(16 if width == 16 and stage != "pre" else 32).as_pointer()
    f32, i64 = ir.FloatType().as_pointer(), ir.IntType(64)
    types_ = [ir.IntType(32).as_pointer(), x_bits, f32, f32, i64.as_pointer(),
              i64.as_pointer(), out_bits, i64, i64]  # fmt: skip

    def emit(context, builder, args):
        ptrs, ints, _ = args
        loaded = [builder.load(builder.gep(ptrs, [ir.Constant(i64, k)])) for k in range(1, 8)]
        consts, x, scale, shift, shape, sstr, out = (
            builder.bitcast(p, t) for p, t in zip(loaded, types_[:7], strict=True)
        )
        rows = builder.load(shape)
        for k in (1, 2):
            rows = builder.mul(rows, builder.load(builder.gep(shape, [ir.Constant(i64, k)])))
        spec = builder.load(builder.gep(ints, [ir.Constant(i64, 8)]))
        r0, r1 = chunk_bounds(builder, spec, rows)

        def body(inner, a):
            _emit_fake_walk(context, inner, width == 16, *a, stage=stage, fix_nan=fix_nan,
                            along=along)  # fmt: skip

        walk = body_function(builder, "walk", types_, body, prefer_512=True)
        with builder.if_then(builder.icmp_signed("<", r0, r1)):
            builder.call(walk, [consts, x, scale, shift, shape, sstr, out, r0, r1])
        return ir.Constant(ir.IntType(32), 0)

    return emit


@functools.cache
def fake_walk_kernel(
    width: int, stage=None, fix_nan=False, along=None
) -> GenericNativeKernel | None:
    """Kernel of FakeConvert's formula for float32 (``width`` 32) or bfloat16 and float16
    (16) data (``consts``: :func:`fake_scalars`, a word 1 for float16 data, a word 1 where
    large outputs may be streamed: see :func:`_emit_fake_walk`) and scales (and
    shifts) broadcast to them in any layout (:func:`_emit_fake_walk`): ``(consts, x, scale,
    shift, shape, sstr, out, nchunks)``, the 4-D ``shape`` and scale strides ``sstr`` of
    :func:`fp8kit.fake_convert` (inner stride 0 or 1), ``shift`` the scale array where
    there is none; the chunks split the rows.  A native kernel (no Numba compile); None
    where native kernels cannot be called (:func:`fp8kit._kernels.native.available`).
    ``fix_nan``: scales or shifts may be NaN (x86's NaN rule fixed: :func:`_x86_first_nan`;
    another kernel, so that the others spend no instruction on it).  (The OpenVINO CPU
    plugin's arithmetic runs :func:`fp8kit._kernels.fake.fake_convert_kernel`: as fast,
    measured.)  ``stage``: ``"pre"`` or ``"post"``, the steps of FakeConvert in the other
    rounding modes before and after :func:`fp8kit.round_to` (:func:`_pre_body`, from the
    data to float32 bits, and :func:`_post_body`, from float32 bits to the data's type).
    ``along``: the scales vary along the rows (True: ``sstr[3]`` is 1) or not (False),
    compiled in (a kernel for each); None: read from ``sstr`` at run time.
    (The spec's formula stays LLVM vector code here: the general Numba kernel took 1.2-1.4x
    its time on float32 data with a scale per row, 16M and 256K elements, one thread.)"""
    if not native_available():
        return None
    key = ("fake_walk", width) + (() if stage is None else (stage,))
    key += ("fix_nan",) if fix_nan else ()
    key += () if along is None else ("along" if along else "per_row",)
    emit = _fake_walk_native(width, stage, fix_nan, along)
    kernel = GenericNativeKernel(key, emit, _NO_PARAMS)
    if stage is None or along is not None:
        # (the short pipeline: the whole walk compiles in 0.016 s instead of 0.036-0.040,
        # a stage with ``along`` compiled in in 0.011-0.012 s instead of 0.034-0.041, and
        # both run as fast; a stage reading the flag at run time ran 2-12% slower with it:
        # the full pipeline had unswitched its loop on the flag)
        kernel.passes = LEAN_PASSES
    return kernel


_NO_PARAMS = np.zeros(0, np.uint8)


# Layout of _prm's array (the vector code reads it by index).
(_ABS, _SH, _RB, _MIN_NORMAL, _WSH, _MAGIC, _NAN_THR, _SRC_INF, _OVF, _INF_RES, _NAN_MAG,
 _SIGN_BIT, _SIGN_SHIFT, _NEG_ZERO, _NEED_INF, _S, _KEEP, _FLIP, _OFFSET) = range(19)  # fmt: skip
#: Elements per vector block of :func:`_words_native`.
BLOCK = 32


def _vector_body(builder, v, c, pmadd, f16, neg_zero, need_inf):
    """The codes (``<n x i8>``) of the bits ``v`` (``<n x i16>``, n even; 32 with
    ``pmadd``); ``c(k)``:
    constant k of _prm's array splat over the vector.  Element i of the input is in the
    low (even i) or high (odd i) half of 32-bit lane i // 2 of the same register: below the
    smallest normal the FPU rounds on those lanes directly (no widening of 16-bit lanes to
    two registers and back, which cost 10 of the 24 operations of the auto-vectorized
    loop, half its time)."""
    lanes = v.type.count
    i32 = ir.IntType(32)
    v32 = ir.VectorType(i32, lanes // 2)
    f32 = ir.VectorType(ir.FloatType(), lanes // 2)

    def k32(value):
        return ir.Constant(v32, [value] * (lanes // 2))

    a = builder.and_(v, c(_ABS))
    # nearest-even on the source's bits: the carry out of the mantissa bumps the exponent
    sh = c(_SH)
    one = ir.Constant(v.type, [1] * lanes)
    lsb = builder.and_(builder.lshr(a, sh), one)
    code = builder.lshr(builder.add(builder.add(a, c(_RB)), lsb), sh)
    # below fmt's smallest normal: value + magic in float32 (bits.encode_fast), whose low
    # 16 bits are the code (magic's are zero)
    w = builder.bitcast(a, v32)
    if f16 and pmadd:  # one multiply-add per lane: the other element times 0 (9% faster)
        fnty = ir.FunctionType(v32, [v.type, v.type])
        name = "llvm.x86.avx512.pmaddw.d.512"
        madd = cgutils.get_or_insert_function(builder.module, fnty, name)
        even = builder.call(madd, [a, ir.Constant(v.type, [1 << 13, 0] * (lanes // 2))])
        odd = builder.call(madd, [a, ir.Constant(v.type, [0, 1 << 13] * (lanes // 2))])
    elif f16:  # float16: bits << 13 are the float32 bits of the value times 2**-112
        even = builder.lshr(builder.shl(w, k32(16)), k32(3))
        odd = builder.and_(builder.lshr(w, k32(3)), k32(0x0FFFE000))
    else:  # bfloat16: the float32 bits are the bits << 16
        even = builder.shl(w, k32(16))
        odd = builder.and_(w, k32(0xFFFF0000))
    magic_bits = builder.shl(builder.zext(c(_MAGIC, True), i32), ir.Constant(i32, 16))
    magic = builder.bitcast(splat(builder, magic_bits, v32), f32)
    fe = builder.fadd(builder.bitcast(even, f32), magic)
    fo = builder.fadd(builder.bitcast(odd, f32), magic)
    fe, fo = builder.bitcast(fe, v32), builder.bitcast(fo, v32)
    sub = builder.or_(builder.and_(fe, k32(0xFFFF)), builder.shl(fo, k32(16)))
    code = builder.select(
        builder.icmp_unsigned("<", a, c(_MIN_NORMAL)), builder.bitcast(sub, v.type), code
    )
    return _vector_finish(builder, v, a, code, c, neg_zero, need_inf)


def _vector_finish(builder, v, a, code, c, neg_zero, need_inf):
    """:func:`_vector_body`'s overflow, Inf, NaN and sign rules on the rounded ``code``."""
    lanes = v.type.count
    ovf = c(_OVF)
    mag = builder.select(builder.icmp_unsigned(">", code, ovf), ovf, code)
    if need_inf:
        mag = builder.select(builder.icmp_unsigned("==", a, c(_SRC_INF)), c(_INF_RES), mag)
    nan = builder.icmp_unsigned(">", a, c(_NAN_THR))
    if neg_zero:
        mag = builder.select(nan, c(_NAN_MAG), mag)
        # (shift, then mask: the and and the xor fuse into one vpternlog)
        sign = builder.and_(builder.lshr(v, c(_SIGN_SHIFT)), c(_S))
        res = builder.xor(mag, sign)
    else:
        zero = ir.Constant(v.type, [0] * lanes)
        negative = builder.icmp_unsigned(">", v, c(_ABS))
        signed = builder.and_(negative, builder.icmp_unsigned("!=", mag, zero))
        mag = builder.select(signed, builder.or_(builder.and_(mag, c(_KEEP)), c(_S)), mag)
        res = builder.select(nan, c(_NAN_MAG), mag)
    return builder.trunc(res, ir.VectorType(ir.IntType(8), lanes))


def _words_native(use_pmadd: bool, half: bool, neg_zero: bool, need_inf: bool):
    """The emitter of the native kernel encoding bfloat16 or (``half``) float16 bits with
    _prm's constants ``prm`` on 16-bit lanes, one vector of BLOCK elements at a time
    (:func:`_vector_body`): LLVM vector code written here, since the loop vectorizer cannot
    see the two halves of a 32-bit lane as two elements.  Portable LLVM IR (other targets
    split the vectors; ``use_pmadd`` allows AVX512-BW's vpmaddwd); the variant (float16 or
    bfloat16 bits, -0 or not, Inf apart or not) is compiled in: one loop a kernel (eight
    in one Numba kernel took 0.26 s to compile)."""

    def emit(context, builder, args):
        prm, _, _, x, out, first, stop, total = args
        intp = context.get_value_type(types.intp)
        i16 = ir.IntType(16)
        v16 = ir.VectorType(i16, BLOCK)
        v8 = ir.VectorType(ir.IntType(8), BLOCK)
        words = builder.bitcast(prm, i16.as_pointer())
        scalars = [builder.load(builder.gep(words, [ir.Constant(intp, k)]))
                   for k in range(_KEEP + 1)]  # fmt: skip
        splats = {}

        def c(k, scalar=False):
            if scalar:
                return scalars[k]
            if k not in splats:
                splats[k] = splat(builder, scalars[k], v16)
            return splats[k]

        for k in range(_KEEP + 1):  # (in the entry: the loop and the tail block use them)
            c(k)
        x_at, out_at, n, _ = element_range(builder, args, 16, 8)
        vector_blocks(
            builder, intp, n, x_at, out_at, v16, v8,
            lambda v: _vector_body(builder, v, c, use_pmadd, half, neg_zero, need_inf),
        )  # fmt: skip
        return ir.Constant(ir.IntType(32), 0)

    return emit


@functools.cache
def f16_to_bf16_kernel(saturate) -> Kernel:
    """Kernel rounding float16 bits to bfloat16 bits, nearest-even (the call of
    :func:`encode16_kernel`'s kernels).  Every float16 is a bfloat16 normal in range, so
    only the mantissa rounds: the float32 value (the hardware conversion, exact) rounded by
    one add and shift, Inf and NaN by the saturation's codes (about 8 vector operations per
    16 elements, where the general float32 kernel takes 20).  Where the CPU converts to
    bfloat16 in hardware, LLVM IR that does (:func:`_f16_to_bf16_native`): the Numba
    kernel (:func:`_make_f16_bf16`, the same bits) took 1.4x its time in cache (256K
    elements, one thread; equal from memory)."""
    p, _ = _params(get_format("bfloat16"), "float32", saturate)
    prm = np.array([int(p[11]), int(p[12])], np.uint16)  # inf_res, nan_mag
    prm.flags.writeable = False
    sig = types.void(
        _array(np.uint16, readonly=True),
        _array(np.uint16, readonly=True),
        _array(np.uint32, readonly=True),
        _array(np.uint8, readonly=True),
        _array(np.uint16),
        types.intp,
    )
    if _bf16_convert():
        kernel = NativeKernel(("f16_to_bf16",), _f16_to_bf16_native, prm)
        kernel.xo = True  # (no lut or table: small calls pass x and out alone)
        return kernel
    return Kernel(_make_f16_bf16, sig, ("f16_to_bf16", source_version()), prm)


def _bf16_convert() -> bool:
    """Whether the CPU Numba compiles for converts float32 to bfloat16 in hardware
    (AVX512-BF16's vcvtne2ps2bf16, 32 per instruction): elsewhere LLVM may lower the
    conversion to a library call the JIT cannot resolve."""
    return cpu_has("avx512bf16") and _bfloat_type() is not None


@functools.cache
def _bfloat_type():
    """LLVM's ``bfloat`` type, or None: llvmlite has no such type, and this subclasses a
    private class of llvmlite's (built on first use, so that a llvmlite without it costs
    the hardware kernel, not ``import fp8kit``)."""
    try:

        class _BFloatType(ir.types._BaseFloatType):
            null = "0.0"
            intrinsic_name = "bf16"

            def __str__(self):
                return "bfloat"

        _BFloatType._create_instance()
        return _BFloatType()
    except Exception:  # pragma: no cover - another llvmlite
        return None


def _f16_to_bf16_native(context, builder, args):
    """The native kernel of :func:`f16_to_bf16_kernel` (where the CPU converts to bfloat16):
    the bfloat16 bits of the float16 bits ``x[first:stop]``, nearest-even: the hardware
    conversions to float32 (exact) and on to bfloat16 (nearest-even: every float16 is a
    float32 and a bfloat16 normal, so no flush-to-zero mode applies), then Inf and NaN by
    ``prm``'s codes (inf_res, nan_mag) with the sign.  (Plain stores: non-temporal ones
    measured no faster, 2M-16M elements.)"""
    prm, _, _, x, out, first, stop, total = args
    intp = context.get_value_type(types.intp)
    i16, i32 = ir.IntType(16), ir.IntType(32)
    v16 = ir.VectorType(i16, BLOCK)

    def k16(value):
        return ir.Constant(v16, [value] * BLOCK)

    words = builder.bitcast(prm, i16.as_pointer())
    inf_res = splat(builder, builder.load(builder.gep(words, [ir.Constant(intp, 0)])), v16)
    nan_mag = splat(builder, builder.load(builder.gep(words, [ir.Constant(intp, 1)])), v16)
    half = ir.VectorType(ir.HalfType(), BLOCK)
    f32 = ir.VectorType(ir.FloatType(), BLOCK // 2)
    bf = ir.VectorType(_bfloat_type(), BLOCK // 2)

    def part(h, lo):
        mask = ir.Constant(ir.VectorType(i32, BLOCK // 2), list(range(lo, lo + BLOCK // 2)))
        return builder.fptrunc(builder.fpext(builder.shuffle_vector(h, h, mask), f32), bf)

    def body(v):
        h = builder.bitcast(v, half)
        both = ir.Constant(ir.VectorType(i32, BLOCK), list(range(BLOCK)))
        r = builder.bitcast(builder.shuffle_vector(part(h, 0), part(h, BLOCK // 2), both), v16)
        a = builder.and_(v, k16(0x7FFF))
        sign = builder.and_(v, k16(0x8000))
        r = builder.select(
            builder.icmp_unsigned("==", a, k16(0x7C00)), builder.or_(inf_res, sign), r
        )
        return builder.select(
            builder.icmp_unsigned(">", a, k16(0x7C00)), builder.xor(nan_mag, sign), r
        )

    x_at, out_at, n, _ = element_range(builder, args, 16, 16)
    vector_blocks(builder, intp, n, x_at, out_at, v16, v16, body)
    return ir.Constant(i32, 0)


def _make_f16_bf16(parallel):
    version = source_version()
    one = np.uint32(1)
    one16 = np.uint16(1)
    half_m1 = np.uint32(0x7FFF)
    sixteen = np.uint32(16)
    abs16, sign16, inf16 = np.uint16(0x7FFF), np.uint16(0x8000), np.uint16(0x7C00)

    def kernel(prm, x, lut, table, out, nchunks):
        if version == 0 or parallel is None:  # never true; see codec.source_version
            return
        nchunks, c_first, c_stop = chunk_range(nchunks)
        inf_res, nan_mag = prm[0], prm[1]
        step = (x.size + nchunks - 1) // nchunks
        for c in range(c_first, c_stop):
            prefer_512()
            xc, oc = chunks(x, out, c, step)
            for j in range(xc.size):
                v = xc[j]
                f = half_to_single_bits(v)
                r = cast_like(
                    cast_like(f + half_m1 + (cast_like(f >> sixteen, one) & one), one) >> sixteen,
                    one16,
                )
                a = cast_like(v & abs16, one16)
                s = cast_like(v & sign16, one16)
                # (Inf: +-max when saturating; NaN: the NaN code with the sign, as the
                # float32 kernel's _finish_with gives for formats with -0)
                r = cast_like(inf_res | s, one16) if a == inf16 else r
                r = cast_like(nan_mag ^ s, one16) if a > inf16 else r
                oc[j] = r

    return kernel


# ---------------------------------------------------------------- 16-bit input on byte lanes

#: Elements per block of :func:`_byte_native`: 64 byte lanes of a 512-bit vector.
BYTE_BLOCK = 64
#: Elements from which the byte-lane kernels write with non-temporal stores (their output is
#: then 8 MB, its traffic 24 MB, most of the L3 cache here, and the output would not stay in
#: the caches for the next operation anyway).  bfloat16 -> float8_e4m3fn, plain against
#: non-temporal stores, ms, one thread: 4M 0.32 / 0.35, 8M 0.75 / 0.64, 16M 1.54 / 1.23;
#: two threads, 16M: 1.36 / 0.98 (float16: 1.46 / 1.26 and 1.35 / 1.26).
STREAM_MIN = 1 << 23


# Layout of _byte_params' array: three 128-byte tables, then scalars (_B_NEG_ZERO: the sign
# bit a negative zero code gets, 0x80 or 0).
_B_OVF, _B_E_END, _B_NAN, _B_INF, _B_STEP, _B_E_LO1, _B_NEG_ZERO = range(384, 391)
# Per source (float16 or not): the high byte of 1.0 (shifted: a row of normal inputs),
# the bits of the largest finite value, Inf and a NaN, and the exponent field of Inf/NaN.
_B_SOURCE = {
    False: (0x3F00, 0x7F7F, 0x7F80, 0x7FC0, 255),
    True: (0x3C00, 0x7BFF, 0x7C00, 0x7E00, 31),
}


def _byte_fields(v: np.ndarray, half: bool):
    """What :func:`_byte_body` derives from the 16-bit inputs ``v`` (int64), in numpy: the
    index of table ``A`` (high byte, bits 0-6), of table ``C`` (bits 0-6) and whether the
    low exponent step is added to ``C``'s entry, the exponent field, the index of table
    ``S`` before its row (``S`` rows: see :func:`_byte_params`; float16: the high byte
    less the row's exponents), and whether the mantissa is nonzero.

    bfloat16: high byte = sign, 7 exponent bits; low byte = the last exponent bit, 7
    mantissa bits.  float16: high byte = sign, 5 exponent bits, 2 mantissa bits; low byte =
    8 mantissa bits.  ``C`` is indexed by float16's mantissa bits 8-2 (bit 8, in the high
    byte, decides ties of formats with 2 mantissa bits) with the last two or-ed into bit 2
    (a sticky bit for the formats with up to 6 mantissa bits; the check of the tables
    rejects the others)."""
    hi, lo = (v >> 8) & 0xFF, v & 0xFF
    if half:
        c_idx = (((hi << 6) | (lo >> 2)) & 0x7F) | ((lo & 3) != 0)
        step = np.zeros(v.shape, bool)
        exponent = (hi >> 2) & 0x1F
        s_low = ((lo >> 2) & 0x20) | np.where(lo & 0x7F, 0x40, 0)
        mantissa = ((hi & 3) | lo) != 0
    else:
        c_idx = lo & 0x7F
        step = lo >= 0x80
        exponent = ((hi << 1) & 0xFF) | (lo >> 7)
        s_low = ((lo >> 1) & 0x38) | np.where(lo & 15, 0x40, 0)
        mantissa = (lo & 0x7F) != 0
    return hi & 0x7F, c_idx, step, exponent, s_low, mantissa


def _s_index(hi7, exponent, s_low, e_lo1, half):
    """Index of table ``S`` (numpy; :func:`_byte_body` does the same on 8 bits): up to 8
    rows, row 0 for the exponents below ``e_lo1 + 1``, times 16 entries for the bits that
    round there.  bfloat16: the row in bits 0-2, the mantissa's top 3 bits in bits 3-5;
    float16, whose high byte is its exponent and top 2 mantissa bits: one saturating
    subtraction gives the row and those 2 bits (bits 0-4), the low byte's top bit is bit
    5.  Bit 6: whether any bit below them is set.  (No shifts of the row: one operation
    fewer per vector.)"""
    if half:
        return (np.maximum(hi7 - (e_lo1 << 2), 0) | s_low) & 0xFF
    return (np.maximum(exponent - e_lo1, 0) | s_low) & 0xFF


def _word_codes(prm: np.ndarray) -> np.ndarray:
    """The codes :func:`_vector_body` gives every 16-bit input (numpy, the same arithmetic
    on the same constants ``prm``: wrapping 16-bit adds, the float32 FPU step below the
    smallest normal), as uint8 for the inputs 0..65535."""
    p = [int(v) for v in prm]
    u16 = np.uint16
    v = np.arange(1 << 16, dtype=u16)
    a = v & u16(p[_ABS])
    sh = u16(p[_SH])
    lsb = ((a >> sh) ^ u16(p[_FLIP])) & u16(1) if p[_SH] else u16(0)
    code = (a + u16(p[_RB]) + lsb) >> sh  # (uint16: wraps as the vector adds do)
    code = np.where(a != 0, code + u16(p[_OFFSET]), code)
    w = a.astype(np.uint32) << np.uint32(p[_WSH])
    magic = np.uint32(p[_MAGIC] << 16).view(np.float32)
    with np.errstate(invalid="ignore"):  # (NaN inputs: their sum is not used)
        total = w.view(np.float32) + magic
    sub = (total.view(np.uint32) & np.uint32(0xFFFF)).astype(u16)
    code = np.where(a < u16(p[_MIN_NORMAL]), sub, code)
    mag = np.minimum(code, u16(p[_OVF]))
    if p[_NEED_INF]:
        mag = np.where(a == u16(p[_SRC_INF]), u16(p[_INF_RES]), mag)
    nan = a > u16(p[_NAN_THR])
    if p[_NEG_ZERO]:
        mag = np.where(nan, u16(p[_NAN_MAG]), mag)
        res = mag ^ ((v >> u16(p[_SIGN_SHIFT])) & u16(p[_S]))
    else:
        signed = (v > u16(p[_ABS])) & (mag != 0)
        mag = np.where(signed, (mag & u16(p[_KEEP])) | u16(p[_S]), mag)
        res = np.where(nan, u16(p[_NAN_MAG]), mag)
    return (res & u16(0xFF)).astype(np.uint8)


def _byte_params(prm: np.ndarray) -> np.ndarray | None:
    """The constants of the byte-lane kernel (:func:`_byte_native`) for a 16-bit kernel's
    ``prm`` (:func:`_prm`), or None where its scheme does not reproduce the 16-bit kernel's
    codes on every input (then that kernel runs).  Built from those codes (numpy, no
    compile) and checked against them by :func:`_byte_codes`, the kernel's arithmetic in
    numpy, on all 65,536 inputs (once per format, source and saturation: encode16_kernel
    caches)."""
    half = int(prm[_WSH]) != 16
    one, largest, inf_bits, nan_bits, special = _B_SOURCE[half]
    codes = _word_codes(prm)
    mag = codes[: 1 << 15].astype(np.int64)  # the positive inputs
    hi7, c_idx, step_at, exponent, s_low, _ = _byte_fields(np.arange(1 << 15), half)
    ovf = int(mag[largest])
    # the low byte's part of a normal code (relative to the row's first): its mantissa
    # rounded (the carry included) and, for bfloat16, its exponent bit, one exponent step
    # (two rows: float16's first high-byte bit is a mantissa bit, in C's index)
    rows2 = (one | np.arange(256)[None, :]) + np.array([[0], [0x100]])
    c512 = (mag[rows2] - mag[rows2[:, :1]]).ravel()
    rows2 = rows2.ravel()
    step = int(c512[0x80] - c512[0]) if not half else 0
    c512 = c512 - np.where(step_at[rows2], step, 0)
    c = np.zeros(128, np.int64)
    c[c_idx[rows2]] = c512
    if c.min() < 0 or c.max() > 255 or (c[c_idx[rows2]] != c512).any():
        return None
    a_tab = np.zeros(128, np.int64)
    regular = np.zeros(1 << 15, bool)
    for h in range(128):  # (the high byte's 256 inputs are h << 8 | the low byte)
        rows = slice(h << 8, (h + 1) << 8)
        cc = np.minimum(c[c_idx[rows]] + np.where(step_at[rows], step, 0), 255)
        best = None
        for base in (mag[h << 8] - cc[0], mag[(h << 8) | 0x80] - cc[0x80]):
            base = 255 if h == 127 else min(max(int(base), 0), 255)
            ok = np.minimum(base + cc, ovf) == mag[rows]
            if best is None or ok.sum() > best[1].sum():
                best = (base, ok)
        a_tab[h], regular[rows] = best
    irregular = ~regular & (exponent < special)  # (Inf and NaN: their own rule)
    e_end = int(exponent[irregular].max()) + 1 if irregular.any() else 0
    below = exponent < e_end
    nonzero = below & (mag != 0)
    e_lo = int(exponent[nonzero].min()) if nonzero.any() else e_end
    if (e_end - e_lo + 1) * 16 > 128 or e_end > 128:
        return None
    # below e_end every input goes through the table of the smallest exponents, S: row
    # exponent - e_lo + 1 (0 below e_lo), then the bits that round there (_byte_fields)
    v = np.flatnonzero(below)
    idx = _s_index(hi7[v], exponent[v], s_low[v], max(e_lo - 1, 0), half)
    s_tab = np.zeros(128, np.int64)
    s_tab[idx & 0x7F] = mag[v]
    if idx.max(initial=0) > 0x7F or (s_tab[idx] != mag[v]).any():
        return None  # (an index with two codes: the scheme does not fit)
    e_lo1 = max(e_lo - 1, 0)
    out = np.zeros(391, np.uint8)
    out[:384] = np.concatenate([a_tab, c, s_tab])
    out[384:] = [
        ovf, e_end << 2 if half else e_end, codes[nan_bits], codes[inf_bits], step,
        e_lo1 << 2 if half else e_lo1, 0x80 if int(prm[_NEG_ZERO]) else 0,
    ]  # fmt: skip
    if not np.array_equal(_byte_codes(out, half), codes):
        return None
    out.flags.writeable = False
    return out


def _byte_codes(bp: np.ndarray, half: bool) -> np.ndarray:
    """:func:`_byte_body`'s codes for every 16-bit input, in numpy (the check of the
    tables)."""
    v = np.arange(1 << 16, dtype=np.int64)
    hi7, c_idx, step_at, exponent, s_low, mantissa = _byte_fields(v, half)
    a_tab, c_tab, s_tab = (bp[k : k + 128].astype(np.int64) for k in (0, 128, 256))
    ovf, e_end, nan_c, inf_c, step, e_lo1, neg_zero = (int(x) for x in bp[384:391])
    if half:  # (stored as limits of the high byte)
        e_end, e_lo1 = e_end >> 2, e_lo1 >> 2
    cc = np.minimum(c_tab[c_idx] + np.where(step_at, step, 0), 255)
    mag = np.minimum(np.minimum(a_tab[hi7] + cc, 255), ovf)
    idx = _s_index(hi7, exponent, s_low, e_lo1, half)
    mag = np.where(exponent < e_end, s_tab[idx & 0x7F], mag)
    special = _B_SOURCE[half][4]
    mag = np.where(exponent == special, np.where(mantissa, nan_c, inf_c), mag)
    sign = (v >> 8) & 0x80
    if neg_zero:
        res = mag ^ sign
    else:
        res = np.where((sign != 0) & (mag != 0), mag | 0x80, mag)
    return res.astype(np.uint8)


def _bytes_of(builder, v, picks):
    """The bytes ``picks`` (offsets within an element) of each element of the vector ``v``,
    as one ``<64 x i8>`` per offset (a byte shuffle: vpermt2b)."""
    n = v.type.count
    width = v.type.element.width // 8
    raw = builder.bitcast(v, ir.VectorType(ir.IntType(8), n * width))
    pick = ir.VectorType(ir.IntType(32), n)
    return [
        builder.shuffle_vector(raw, raw, ir.Constant(pick, [width * j + k for j in range(n)]))
        for k in picks
    ]


def _word_byte_indexes(builder, picks):
    """The vpermi2b indexes of :func:`_bytes_of_words` for the byte offsets ``picks``, made
    opaque to LLVM (an empty inline asm): given constant indexes it turns the permutes into
    a shuffle and lowers that as about 10 byte shuffles, ors and dword permutes per offset,
    where two permutes and a merge do it.  Built once, before the loop."""
    v8 = ir.VectorType(ir.IntType(8), BYTE_BLOCK)
    fnty = ir.FunctionType(v8, [v8])
    out = []
    for k in picks:
        idx = ir.Constant(v8, [(4 * (j % 32) + k) & 0x7F for j in range(BYTE_BLOCK)])
        out.append(builder.asm(fnty, "", "=v,0", [idx], side_effect=False))
    return out


def _bytes_of_words(builder, v, indexes):
    """The bytes of the 64 32-bit elements of ``v`` that :func:`_word_byte_indexes` built
    ``indexes`` for, as one ``<64 x i8>`` each: two vpermi2b, each over two of the four
    registers, and a merge of their halves."""
    i8, i32 = ir.IntType(8), ir.IntType(32)
    v8 = ir.VectorType(i8, BYTE_BLOCK)
    quarter = BYTE_BLOCK // 4
    pick = ir.VectorType(i32, quarter)
    regs = []
    for q in range(4):
        lanes = ir.Constant(pick, list(range(q * quarter, (q + 1) * quarter)))
        regs.append(builder.bitcast(builder.shuffle_vector(v, v, lanes), v8))
    perm = permute_bytes(builder)
    upper = ir.Constant(
        ir.VectorType(ir.IntType(1), BYTE_BLOCK), [j >= 32 for j in range(BYTE_BLOCK)]
    )
    out = []
    for idx in indexes:
        low = builder.call(perm, [regs[0], idx, regs[1]])
        high = builder.call(perm, [regs[2], idx, regs[3]])
        out.append(builder.select(upper, high, low))
    return out


def _fake_constants(builder, data, intp, vin):
    """:func:`fake_scalars`' words at the pointer ``data``, each splat over ``vin``, and
    whether there is a shift (an i1)."""
    words = [builder.load(builder.gep(data, [ir.Constant(intp, k)])) for k in range(_FK_N)]
    zero = ir.Constant(words[_FK_HAS_SHIFT].type, 0)
    has_shift = builder.icmp_unsigned("!=", words[_FK_HAS_SHIFT], zero)
    return [splat(builder, x, vin) for x in words], has_shift


def _fake_body(builder, v, w, scale, shift, has_shift, fix_nan=False):
    """FakeConvert's ``(round(x * scale - shift) + shift) / scale`` of the float32 bits
    ``v`` (``<N x i32>``) as float32 bits: ``w`` the constants of :func:`fake_scalars`
    splat over ``v``'s type, ``scale`` and ``shift`` float vectors, ``has_shift`` an i1 (no
    shift: no subtraction and no addition, which would turn -0 into +0); ``round`` as
    :func:`fp8kit._kernels.bits.round_in_place` (nearest-even on the bits, the FPU below
    the smallest normal, saturation, NaN); ``fix_nan``: for NaN scales or shifts
    (:func:`_x86_first_nan`)."""
    vin = v.type
    vf = ir.VectorType(ir.FloatType(), vin.count)
    y = builder.bitcast(v, vf)
    y = _x86_first_nan(builder, y, builder.fmul(y, scale), fix_nan)
    y = builder.select(has_shift, builder.fsub(y, shift), y)
    fq = builder.bitcast(_round_bits(builder, builder.bitcast(y, vin), w), vf)
    fq = builder.select(has_shift, _x86_first_nan(builder, fq, builder.fadd(fq, shift), fix_nan),
                        fq)  # fmt: skip
    return builder.bitcast(builder.fdiv(fq, scale), vin)


def _x86_first_nan(builder, a, result, fix_nan):
    """``result`` of a commutative operation (fmul, fadd) whose first operand is the float
    vector ``a``; with ``fix_nan``, ``a`` made quiet where it is NaN: the NaN x86 gives
    (:func:`fp8kit._kernels.bits.x86_nan`) where both operands are NaN, which LLVM's
    choice of operand order would otherwise decide.  Needed only where a scale or shift is
    NaN: where only the data can be, one operand at most is NaN, and the instruction gives
    its NaN in either order; the subtraction and division keep their operands' order."""
    if not fix_nan:
        return result
    vt = ir.VectorType(ir.IntType(32), a.type.count)
    quiet = builder.or_(builder.bitcast(a, vt), ir.Constant(vt, [0x400000] * vt.count))
    nan = builder.fcmp_unordered("uno", a, a)
    return builder.select(nan, builder.bitcast(quiet, a.type), result)


def _round_bits(builder, b, w):
    """:func:`fp8kit._kernels.bits.round_in_place` of the float32 bits ``b`` (``<N x
    i32>``) with :func:`fake_scalars`' constants ``w`` (splat over ``b``'s type)."""
    vin = b.type
    vf = ir.VectorType(ir.FloatType(), vin.count)

    def k32(value):
        return ir.Constant(vin, [value] * vin.count)

    magic = builder.bitcast(w[_FK_MAGIC], vf)
    a = builder.and_(b, k32(0x7FFFFFFF))
    odd = builder.and_(builder.lshr(a, w[_FK_KEEP_SH]), k32(1))
    r = builder.and_(builder.add(a, builder.add(w[_FK_HALF], odd)), w[_FK_KEEP])
    sub = builder.fsub(builder.fadd(builder.bitcast(a, vf), magic), magic)
    r = builder.select(
        builder.icmp_unsigned("<", a, w[_FK_MIN_NORMAL]), builder.bitcast(sub, vin), r
    )
    r = builder.select(builder.icmp_unsigned(">", r, w[_FK_MAX]), w[_FK_MAX], r)
    r = builder.select(builder.icmp_unsigned(">", a, k32(0x7F800000)), k32(0x7FC00000), r)
    sign_bit = builder.select(builder.icmp_unsigned("==", r, k32(0)), w[_FK_ZSIGN],
                              k32(0x80000000))  # fmt: skip
    return builder.or_(r, builder.and_(b, sign_bit))


def _fake16_body(builder, h, w, scale, shift, has_shift, half, fix_nan=False):
    """:func:`_fake_body` of bfloat16 or (``half``, an i1) float16 bits ``h``
    (``<N x i16>``), widened to float32 exactly, the result rounded once to the data's type
    (:func:`_narrow16`): computing both types' steps and selecting one costs a few
    instructions per element in a kernel bound by memory, and one compiled kernel serves
    both types."""
    r = _fake_body(builder, _widen16(builder, h, half), w, scale, shift, has_shift, fix_nan)
    return _narrow16(builder, r, half)


def _widen16(builder, h, half):
    """bfloat16 or (``half``, an i1) float16 bits ``h`` (``<N x i16>``) -> float32 bits,
    exact."""
    vt = ir.VectorType(ir.IntType(32), h.type.count)
    bf = builder.shl(builder.zext(h, vt), ir.Constant(vt, [16] * vt.count))
    return builder.select(half, widen_half(builder, h), bf)


def _narrow16(builder, r, half):
    """float32 bits ``r`` (``<N x i32>``) rounded once to bfloat16 or (``half``, an i1)
    float16 bits (``<N x i16>``): nearest-even, overflow to Inf, a NaN the type's NaN of
    its sign (the general kernel's :func:`fp8kit._kernels.bits.encode_fast` store)."""
    vt = r.type
    vf = ir.VectorType(ir.FloatType(), vt.count)

    def k(value):
        return ir.Constant(vt, [value] * vt.count)

    a = builder.and_(r, k(0x7FFFFFFF))
    nan = builder.icmp_unsigned(">", a, k(0x7F800000))
    sign = builder.and_(builder.lshr(r, k(16)), k(0x8000))
    # bfloat16: nearest-even on the top 16 bits (an overflow carries into Inf)
    odd = builder.and_(builder.lshr(r, k(16)), k(1))
    bf = builder.lshr(builder.add(r, builder.add(k(0x7FFF), odd)), k(16))
    bf = builder.select(nan, builder.or_(sign, k(0x7FC0)), bf)
    # float16: normal results rebiased (127 -> 15), nearest-even at 13 dropped bits, capped
    # at Inf; below 2**-14 the count of 2**-24 steps, by adding 0.5 in float32 (exact
    # nearest-even: the sum's step is 2**-24)
    t = builder.sub(a, k(112 << 23))
    odd = builder.and_(builder.lshr(t, k(13)), k(1))
    n = builder.lshr(builder.add(t, builder.add(k(0xFFF), odd)), k(13))
    n = builder.select(builder.icmp_unsigned(">", n, k(0x7C00)), k(0x7C00), n)
    point5 = ir.Constant(vf, [0.5] * vt.count)
    small = builder.fadd(builder.bitcast(a, vf), point5)
    small = builder.sub(builder.bitcast(small, vt), k(0x3F000000))
    hf = builder.select(builder.icmp_unsigned("<", a, k(0x38800000)), small, n)
    hf = builder.or_(builder.select(nan, k(0x7E00), hf), sign)
    return builder.trunc(builder.select(half, hf, bf), ir.VectorType(ir.IntType(16), vt.count))


def _pre_body(builder, v, w, scale, shift, has_shift, fix_nan=False):
    """The first step of FakeConvert in the other rounding modes: ``x * scale - shift``
    clamped to the format's range (a NaN stays NaN), float32 bits of float32 bits ``v``
    (``fix_nan``: :func:`_x86_first_nan`)."""
    vf = ir.VectorType(ir.FloatType(), v.type.count)
    mx = builder.bitcast(w[_FK_MAX], vf)
    neg_mx = builder.fsub(ir.Constant(vf, [0.0] * v.type.count), mx)
    y = builder.bitcast(v, vf)
    y = _x86_first_nan(builder, y, builder.fmul(y, scale), fix_nan)
    y = builder.select(has_shift, builder.fsub(y, shift), y)
    y = builder.select(builder.fcmp_ordered(">", y, mx), mx, y)
    y = builder.select(builder.fcmp_ordered("<", y, neg_mx), neg_mx, y)
    return builder.bitcast(y, v.type)


def _post_body(builder, q, scale, shift, has_shift, fix_nan=False):
    """The last step: ``(q + shift) / scale`` of the rounded values' float32 bits ``q``
    (``fix_nan``: :func:`_x86_first_nan`)."""
    vf = ir.VectorType(ir.FloatType(), q.type.count)
    fq = builder.bitcast(q, vf)
    fq = builder.select(has_shift, _x86_first_nan(builder, fq, builder.fadd(fq, shift), fix_nan),
                        fq)  # fmt: skip
    return builder.bitcast(builder.fdiv(fq, scale), q.type)


#: Elements per block of :func:`_emit_fake_walk` on float32 data: 16 lanes (block-scaling rows
#: are 32).
ROW_BLOCK = 16


def _byte_body(builder, hi, lo, t, c, half):
    """The codes (``<64 x i8>``) of the 16-bit inputs whose high and low bytes are ``hi``
    and ``lo`` (``<64 x i8>`` each) on byte lanes (float16 where ``half``, else bfloat16):
    ``t``: the three 128-byte tables, two registers each; ``c(k)``: scalar k splat.  A
    normal code is ``A[high byte] + C[low byte]`` (saturating; ``A`` the exponent's code
    base, ``C`` the rounded mantissa, plus one exponent step for bfloat16's low exponent
    bit); below the smallest normal, table
    ``S`` indexed by the exponent and the mantissa's top bits; then Inf, NaN and the sign
    (the fields: :func:`_byte_fields`)."""
    i8 = ir.IntType(8)
    v8 = ir.VectorType(i8, BYTE_BLOCK)
    module = builder.module

    def fn(name, nargs):
        return cgutils.get_or_insert_function(module, ir.FunctionType(v8, [v8] * nargs), name)

    perm = permute_bytes(builder)
    uadd, usub, umin = (
        fn("llvm.uadd.sat.v64i8", 2),
        fn("llvm.usub.sat.v64i8", 2),
        fn("llvm.umin.v64i8", 2),
    )

    def k8(value):
        return ir.Constant(v8, [value] * BYTE_BLOCK)

    def ne0(value, mask):
        return builder.icmp_unsigned("!=", builder.and_(value, k8(mask)), zero)

    zero = k8(0)
    if half:
        # (vpermi2b reads bits 0-6 of an index: no masks; the exponent compares are on the
        # high byte, less its sign)
        hi7 = builder.and_(hi, k8(0x7F))
        lo2 = builder.lshr(lo, k8(2))
        sticky = builder.call(umin, [builder.and_(lo, k8(3)), k8(1)])
        c_idx = builder.or_(builder.or_(builder.shl(hi, k8(6)), lo2), sticky)
        cc = builder.call(perm, [t[2], c_idx, t[3]])
        idx = builder.or_(builder.call(usub, [hi7, c(_B_E_LO1)]), builder.and_(lo2, k8(0x20)))
        mantissa = builder.icmp_unsigned("!=", builder.or_(builder.and_(hi, k8(3)), lo), zero)
        small = builder.icmp_unsigned("<", hi7, c(_B_E_END))
        special = builder.icmp_unsigned(">=", hi7, k8(0x7C))
    else:
        k7 = builder.icmp_signed("<", lo, zero)  # the exponent's low bit
        cc = builder.call(
            uadd, [builder.call(perm, [t[2], lo, t[3]]), builder.select(k7, c(_B_STEP), zero)]
        )
        exponent = builder.or_(builder.add(hi, hi), builder.zext(k7, v8))
        row = builder.call(usub, [exponent, c(_B_E_LO1)])
        idx = builder.or_(row, builder.and_(builder.lshr(lo, k8(1)), k8(0x38)))
        mantissa = ne0(lo, 0x7F)
        small = builder.icmp_unsigned("<", exponent, c(_B_E_END))
        special = builder.icmp_unsigned("==", exponent, k8(255))
    mag = builder.call(
        umin, [builder.call(uadd, [builder.call(perm, [t[0], hi, t[1]]), cc]), c(_B_OVF)]
    )
    idx = builder.select(ne0(lo, 0x7F if half else 15), builder.or_(idx, k8(0x40)), idx)
    mag = builder.select(small, builder.call(perm, [t[4], idx, t[5]]), mag)
    # Inf and NaN: their codes (a NaN code of a format without -0 is or-ed with the sign
    # below: _byte_params' check fails where that changes it)
    nan_or_inf = builder.select(mantissa, c(_B_NAN), c(_B_INF))
    mag = builder.select(special, nan_or_inf, mag)
    # the sign: or-ed in, but for a zero code only where the format has -0 (one variant
    # of the loop, not one per rule: each copy cost ~0.045 s of compiling on a first call,
    # this 2 operations a block more than the xor of formats with -0)
    sign_bit = builder.select(builder.icmp_unsigned("==", mag, zero), c(_B_NEG_ZERO), k8(0x80))
    return builder.or_(mag, builder.and_(hi, sign_bit))


#: Bits of an element read (and written, where not codes) by each source of
#: :func:`_byte_native`.
_SOURCE_BITS = {0: 16, 1: 16, 2: 32, 5: 64, 7: 16, 8: 16}


def _byte_native(kind: int, stream_min: int = STREAM_MIN):
    """The emitter of a native kernel (:func:`fp8kit._kernels.native.native_address`)
    encoding its elements with :func:`_byte_params`' constants ``prm``, 64 elements a block
    (:func:`_byte_body`; AVX512-VBMI); ``kind`` the source:
    0 bfloat16 bits, 1 float16 bits, 2 float32 bits (rounded as the bfloat16 of their top
    16 bits, the lowest of them or-ed with whether any of the others is set: see
    :func:`f32_byte_kernel`), 5 float64 bits (as float32 bits rounded to odd,
    :func:`f64_to_odd_f32`, then as 2), 7 bfloat16 and 8 float16 bits to the bits of the
    codes' values in the same type (round-to-format: looked up in the decode table's byte
    planes ``table``, :func:`fp8kit._kernels.bits.plane_values`; unused otherwise).
    Arrays of ``stream_min`` elements or more are written in whole cache lines with
    non-temporal stores (:func:`fp8kit._kernels.bits.vector_blocks`; not for sources 7 and
    8, measured no faster)."""

    def emit(context, builder, args):
        prm, _, table, x, out, first, stop, total = args
        intp = context.get_value_type(types.intp)
        i8 = ir.IntType(8)
        width = _SOURCE_BITS[kind]
        # (sources 7 and 8 not streamed)
        out_bits, stream_at = (width, None) if kind in (7, 8) else (8, stream_min)
        x_at, out_at, n, stream = element_range(builder, args, width, out_bits, stream_at)
        v8 = ir.VectorType(i8, BYTE_BLOCK)
        tables = builder.bitcast(prm, v8.as_pointer())
        t = [builder.load(builder.gep(tables, [ir.Constant(intp, k)]), align=1) for k in range(6)]
        splats = {}
        for k in range(_B_OVF, _B_NEG_ZERO + 1):
            x8 = builder.load(builder.gep(prm, [ir.Constant(intp, k)]))
            splats[k] = splat(builder, x8, v8)
        vin = ir.VectorType(ir.IntType(width), BYTE_BLOCK)
        word_indexes = _word_byte_indexes(builder, (3, 2)) if kind in (2, 5) else None
        value_planes = load_planes(builder, table, intp) if kind in (7, 8) else None

        def body(v):
            return codes_of(v, kind, t, splats)

        def codes_of(v, kind, t, splats):
            if kind in (0, 1, 7, 8):
                hi, lo = _bytes_of(builder, v, (1, 0))
            else:  # float32: its top 16 bits, whether any below is set or-ed into the lowest
                if kind == 5:
                    v = f64_to_odd_f32(builder, v)
                v32 = v.type
                hi, lo = _bytes_of_words(builder, v, word_indexes)
                low = builder.and_(v, ir.Constant(v32, [0xFFFF] * BYTE_BLOCK))
                sticky = builder.icmp_unsigned("!=", low, ir.Constant(v32, [0] * BYTE_BLOCK))
                lo = builder.select(sticky, builder.or_(lo, ir.Constant(v8, [1] * BYTE_BLOCK)), lo)
            codes = _byte_body(builder, hi, lo, t, splats.__getitem__, kind in (1, 8))
            if kind in (7, 8):
                return plane_values(builder, value_planes, codes, 16)
            return codes

        vout = vin if kind in (7, 8) else v8
        vector_blocks(builder, intp, n, x_at, out_at, vin, vout, body, stream=stream)
        return ir.Constant(ir.IntType(32), 0)

    return emit


# The byte-lane loops (numbers 0 and 1 were the Numba-called loops, now native kernels of
# their own: _words_native, _f16_to_bf16_native)
_BYTES, _HALF_BYTES, _F32_BYTES = 2, 3, 4
_F64_BYTES, _BF16_ROUND, _F16_ROUND = 7, 9, 10
#: The byte-lane loops, run as native kernels: (name, source of :func:`_byte_native`).
_NATIVE = {
    _BYTES: ("encode16_bytes", 0),
    _HALF_BYTES: ("encode16_half_bytes", 1),
    _F32_BYTES: ("encode32_bytes", 2),
    _F64_BYTES: ("encode64_bytes", 5),
    _BF16_ROUND: ("round16_bytes", 7),
    _F16_ROUND: ("round16_half_bytes", 8),
}


def byte_kernel(which: int, params: np.ndarray, stream_min: int = STREAM_MIN) -> NativeKernel:
    """The native kernel of the byte-lane loop ``which`` (:data:`_NATIVE`) with the
    parameter array ``params``; ``stream_min``: it writes with non-temporal stores from
    arrays of that many elements.  The loops' shared compiled trampoline calls it with
    any dtype: a further input dtype compiles only its native function."""
    name, source = _NATIVE[which]
    key = (name,) if stream_min == STREAM_MIN else (name, "stream_min", stream_min)
    kernel = NativeKernel(key, _byte_native(source, stream_min), params)
    kernel.xo = source in (0, 1, 2, 5)  # (the encodes read no lut or table)
    return kernel
