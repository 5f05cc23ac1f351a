"""Scalar bit helpers for the CPU kernels.

Numba promotes every integer operation to 64 bits.  Wrapping a 32-bit computation in
``cast_like(expr, ONE32)`` truncates it again, which lets LLVM narrow the whole expression to
32-bit lanes (16 per AVX-512 register instead of 8): measured 4x on float32 -> float8.
The bit casts are intrinsics because Numba has no scalar ``view``.
"""

from __future__ import annotations

import functools
import platform

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")

_FLOAT_OF_BITS = {types.uint32: types.float32, types.uint64: types.float64}
_BITS_OF_FLOAT = {types.float32: types.uint32, types.float64: types.uint64}


@intrinsic
def as_float(typingctx, bits):
    """Reinterpret uint32 as float32, or uint64 as float64 (no conversion)."""
    if bits not in _FLOAT_OF_BITS:
        return None
    result = _FLOAT_OF_BITS[bits]

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(result))

    return result(bits), codegen


@intrinsic
def as_bits(typingctx, value):
    """Reinterpret float32 as uint32, or float64 as uint64 (no conversion)."""
    if value not in _BITS_OF_FLOAT:
        return None
    result = _BITS_OF_FLOAT[value]

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(result))

    return result(value), codegen


@functools.cache  # (LLVM's host feature query takes ~0.3 ms)
def cpu_has(name: str) -> bool:
    """Whether the CPU Numba compiles for has the feature ``name`` (LLVM's spelling, e.g.
    ``"f16c"``).  A CPU name or feature list set for Numba (``NUMBA_CPU_NAME``,
    ``NUMBA_CPU_FEATURES``) is taken as is: a name alone counts as no."""
    from numba.core import config

    if config.CPU_FEATURES is not None:
        features = config.CPU_FEATURES
    elif config.CPU_NAME is not None:
        return False
    else:
        features = llvm.get_host_cpu_features().flatten()
    return f"+{name}" in features.split(",")


#: CPU names (LLVM's) of AMD's x86 cores, where :func:`vector_blocks` does not prefetch.
_AMD_CPUS = ("znver", "bdver", "btver", "amdfam", "barcelona", "athlon", "opteron", "k8")


@functools.cache
def prefetches() -> bool:
    """Whether :func:`vector_blocks` prefetches its input (:data:`PREFETCH_BYTES` ahead):
    on x86 CPUs other than AMD's.  Measured on an Intel Xeon (one thread, 16M float32 ->
    float8_e4m3fn, each call after a 20 ms pause): 6.5 -> 3.3-3.5 ms, the streaming
    kernel 3.9-4.4 ms; 160M elements (past the caches) 78 -> 54-62 ms, the streaming kernel
    47-50 ms; arrays in the caches unchanged.  On an AMD EPYC an earlier trial of software
    prefetching was slower, so there it stays off.  Decided by the CPU name Numba compiles
    for, which keys every cache of compiled code."""
    from numba.core import config

    name = config.CPU_NAME
    if name is None or name == "host":
        name = llvm.get_host_cpu_name()
    return _X86 and not name.startswith(_AMD_CPUS)


def _hardware_half() -> bool:
    """Whether LLVM converts float16 to float32 in hardware here: elsewhere it calls
    ``__extendhfsf2``, which Numba's JIT does not resolve (the call crashed the process on
    an x86 CPU without F16C, e.g. ``NUMBA_CPU_NAME=generic``)."""
    if _X86:
        return cpu_has("f16c")
    return platform.machine().lower() in ("aarch64", "arm64")


def widen_half(builder, h):
    """float16 bits (``i16`` or ``<N x i16>``) -> float32 bits (``i32`` or ``<N x i32>``),
    exact: one ``fpext``, which x86 CPUs with F16C run as a vector conversion
    (vcvtph2ps), or without hardware conversion the fields moved by integer operations
    (subnormals through an exact integer -> float32 conversion).  A NaN stays a NaN of the
    same sign (its payload may be made quiet: kernels canonicalize NaN anyway)."""
    vec = isinstance(h.type, ir.VectorType)
    n = h.type.count if vec else None

    def of(t):  # (t, or the vector of t with h's lanes)
        return ir.VectorType(t, n) if vec else t

    i32, f32 = of(ir.IntType(32)), of(ir.FloatType())
    if _hardware_half():
        single = builder.fpext(builder.bitcast(h, of(ir.HalfType())), f32)
        return builder.bitcast(single, i32)

    def k(v):
        return ir.Constant(i32, [v] * n if vec else v)

    w = builder.zext(h, i32)
    sign = builder.shl(builder.and_(w, k(0x8000)), k(16))
    a = builder.and_(w, k(0x7FFF))
    # normal, Inf and NaN: the exponent rebiased (15 -> 127), the mantissa moved up;
    # the top exponent field (Inf, NaN) goes to float32's
    normal = builder.add(builder.shl(a, k(13)), k(112 << 23))
    special = builder.or_(builder.shl(a, k(13)), k(0x7F800000))
    # subnormal (and zero): mantissa * 2**-24, exact in float32 (a normal there)
    tiny = ir.Constant(f32, [2.0**-24] * n if vec else 2.0**-24)
    sub = builder.bitcast(builder.fmul(builder.uitofp(a, f32), tiny), i32)
    mag = builder.select(builder.icmp_unsigned(">=", a, k(0x7C00)), special, normal)
    mag = builder.select(builder.icmp_unsigned("<", a, k(0x0400)), sub, mag)
    return builder.or_(mag, sign)


@intrinsic
def half_to_single_bits(typingctx, bits):
    """float16 bits (uint16) -> float32 bits (uint32), exact (:func:`widen_half`)."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        return widen_half(builder, args[0])

    return types.uint32(bits), codegen


#: Layout of a kernel's parameter array (the source's lane type: uint32 or uint64; see
#: codec.pack_params): where the tuples p and q of codec._params start, the overflow codes
#: of a rounding mode, the stochastic constants, the rounding mode, encode_lean's pair, and
#: the length.  Floats are stored as their bits, flags as 0 or 1.
PARAMS_LAYOUT = (0, 17, 29, 31, 36, 37, 39)


@intrinsic
def widen32(typingctx, value):
    """A float32 as is, or bfloat16 bits (uint16) as the float32 they stand for (exact: the
    bits shifted up by 16), so that one kernel body reads either."""
    if value == types.float32:

        def codegen(context, builder, signature, args):
            return args[0]

    elif value == types.uint16:

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            wide = builder.shl(builder.zext(args[0], i32), ir.Constant(i32, 16))
            return builder.bitcast(wide, ir.FloatType())

    else:
        return None
    return types.float32(value), codegen


@intrinsic
def to_unsigned_truncated(typingctx, value, like):
    """A float32 (float64) truncated toward zero to uint32 (uint64), the type of ``like``:
    one signed conversion (cvttps2dq), so exact only for values in [0, 2**31) ([0, 2**63));
    elsewhere the result is undefined, and a caller may only select it away."""
    if _BITS_OF_FLOAT.get(value) != like:
        return None

    def codegen(context, builder, signature, args):
        return builder.fptosi(args[0], context.get_value_type(like))

    return like(value, like), codegen


@intrinsic
def cast_like(typingctx, value, like):
    """Truncate or zero-extend an unsigned integer to the type of ``like``."""
    if not isinstance(value, types.Integer) or not isinstance(like, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        src, dst = args[0].type, context.get_value_type(like)
        if src.width == dst.width:
            return args[0]
        if src.width > dst.width:
            return builder.trunc(args[0], dst)
        return builder.zext(args[0], dst)

    return like(value, like), codegen


def _fit(builder, value, ty):
    if value.type.width == ty.width:
        return value
    if value.type.width > ty.width:
        return builder.trunc(value, ty)
    return builder.zext(value, ty)


def _shift(op):
    def shift(typingctx, x, s, like):
        if not all(isinstance(t, types.Integer) for t in (x, s, like)):
            return None

        def codegen(context, builder, signature, args):
            ty = context.get_value_type(like)
            return getattr(builder, op)(_fit(builder, args[0], ty), _fit(builder, args[1], ty))

        return like(x, s, like), codegen

    shift.__name__ = op
    shift.__doc__ = (
        f"``x {'>>' if op == 'lshr' else '<<'} s`` on unsigned integers of the type of "
        "``like`` (both truncated or zero-extended to it first); ``s`` must be below its "
        "width.  Numba widens ``>>`` and ``<<`` to 64 bits, and a shift by an amount known "
        "only at run time (a format's parameter) cannot be narrowed by LLVM afterwards: "
        "32-bit lanes keep twice as many elements per vector."
    )
    return intrinsic(shift)


shr = _shift("lshr")
shl = _shift("shl")


@njit(inline="always")
def _finish(v, a, code, p):
    """Apply overflow, Inf, NaN and sign rules to a rounded magnitude code."""
    return _finish_with(v, a, code, p, p[10])


@njit(inline="always")
def _finish_with(v, a, code, p, ovf):
    """:func:`_finish` with the overflow code given (rounding modes choose it by sign)."""
    (
        abs_mask,
        _,
        _,
        _,
        _,
        _,
        _,
        _,
        src_inf,
        max_mag,
        nominal_ovf,
        inf_res,
        nan_mag,
        sign_bit,
        sign_shift,
        neg_zero,
        zero,
    ) = p
    # (``ovf`` is ``max_mag`` or ``max_mag + 1`` for every format and mode, checked by
    # codec.pack_params, so this equals ``ovf if code > max_mag else code``; as an unsigned
    # min it is one vector instruction less: encode float32 -> e4m3fn 8% faster)
    mag = ovf if code > ovf else code
    mag = inf_res if a == src_inf else mag
    if neg_zero:
        mag = nan_mag if a > src_inf else mag
        # xor: formats without NaN give zero of the opposite sign for NaN (see _params)
        return mag ^ shr(v & sign_bit, sign_shift, zero)
    # fnuz and P3109: no -0, so a negative value that rounds to zero gives +0; the NaN code
    # already carries the sign bit.  Other negative values get ``s`` or-ed in: the sign bit,
    # or for the unsigned P3109 formats the NaN code (all ones), or 0 with ``keep`` 0 (the
    # result is then 0: saturation, inward directed rounding); see _params.
    s = shr(sign_bit, sign_shift, zero)
    keep = abs_mask if s != zero else zero  # (all the low bits, or none; loop-invariant)
    # (a name of its own: the or is 64-bit, and a variable keeps one type where Numba
    # types without SSA, see fp8kit._kernels.native._lean_pipeline)
    signed = ((mag & keep) | s) if (v > abs_mask and mag != zero) else mag
    # ... but -Inf, not saturating (the nominal overflow code is not max), is NaN in every
    # rounding mode (nearest-even's rule; pychop's too)
    neg_inf_nan = s == zero and nominal_ovf != max_mag
    return nan_mag if (a > src_inf or (neg_inf_nan and a == src_inf and v > abs_mask)) else signed


@njit(inline="always")
def encode_fast(v, p):
    """Round source bits ``v`` (an IEEE float's bits) to a format code, nearest-even.

    The normal range is one integer add and shift (the carry out of the mantissa bumps the
    exponent for free).  Below the format's smallest normal, adding a power of two whose ulp
    is the format's subnormal spacing lets the FPU do the rounding: hardware RNE, one
    rounding.  ``use_magic`` is false when the format and the source share their smallest
    normal, and then the integer formula is exact for subnormals too.
    """
    (
        abs_mask,
        one,
        sh,
        rb,
        min_normal,
        magic,
        magic_bits,
        use_magic,
        _,
        _,
        _,
        _,
        _,
        _,
        _,
        _,
        zero,
    ) = p
    a = cast_like(v & abs_mask, one)
    # rb holds the rebias as a negative number modulo 2**width: wrap before shifting.
    code = shr(cast_like(a + cast_like(rb + (shr(a, sh, one) & one), one), one), sh, one)
    if use_magic:
        sub = cast_like(as_bits(as_float(a) + magic) - magic_bits, one)
        code = sub if a < min_normal else code
    return _finish_with(v, a, code, p, p[10])  # (= _finish: one inlined call less)


@njit(inline="always")
def encode_lean(v, p, nan_thr, neg_thr):
    """:func:`encode_fast` in fewer vector operations, for the formats and options where
    :func:`fp8kit._kernels.codec.lean_params` gives the thresholds ``nan_thr`` and
    ``neg_thr`` (else None).  Only the result's low bits (the code's width) are the code:
    callers store it into a uint8/uint16 array, which truncates."""
    (abs_mask, one, sh, rb, min_normal, magic, _, use_magic, _, _, ovf, _, nan_mag, sign_bit,
     sign_shift, neg_zero, _) = p  # fmt: skip
    # (a zero LLVM can see, not p's run-time one: a test against it is one instruction)
    zero = cast_like(one - one, one)
    a = cast_like(v & abs_mask, one)
    r = cast_like(a + rb, one)
    # the ties-to-even bit: a test under mask and a masked add (2 vector operations, not 3)
    r = cast_like(r + one, one) if (a & shl(one, sh, one)) != zero else r
    code = shr(r, sh, one)
    # Inf and NaN round to codes above ``ovf``: when Inf gives ``ovf`` the min is its whole
    # rule, and NaN is one select whose threshold also takes Inf where Inf gives NaN
    mag = ovf if code > ovf else code
    mag = nan_mag if a > nan_thr else mag
    if use_magic:
        # the sum's low bits are the code (the magic number's mantissa bits are zero): no
        # subtraction of the magic number's bits
        mag = as_bits(as_float(a) + magic) if a < min_normal else mag
    s = shr(sign_bit, sign_shift, zero)  # (loop-invariant)
    if neg_zero:
        return mag ^ s if v > abs_mask else mag
    # no -0 (fnuz, P3109): the sign or-ed as in _finish_with (``s`` is never 0 here) unless
    # the code is 0, that is for the negative values above ``neg_thr``: one comparison of
    # the signed bits, not two
    return mag | s if v > neg_thr else mag


@njit(inline="always")
def encode_generic(v, p, q):
    """Integer-only rounding, valid for any format whose smallest normal is not below the
    source's.  Used where the FPU trick is unsafe (a flush-to-zero mode set by another
    library would change the result) or impossible.  Slower: variable shifts."""
    abs_mask, one = p[0], p[1]
    src_m, mant_mask, hidden, emin_field, cap, m_bits, base_sh = q
    a = v & abs_mask
    e = shr(a, src_m, one)
    m = (a & mant_mask) | (hidden if e != zero_of(one) else zero_of(one))
    ee = e if e > one else one
    extra = emin_field - ee if ee < emin_field else zero_of(one)
    # every shift from cap = src_m + 2 on drops all of m (< 2**(src_m + 1)); capping the
    # total keeps it below the lane width (a wider shift is undefined in LLVM)
    sh_full = base_sh + extra
    sh = sh_full if sh_full < cap else cap
    k = ee - emin_field if ee > emin_field else zero_of(one)
    # ties go to the even code: the lowest kept bit of m, or with no mantissa bits (P3109's
    # precision 1) the parity of the exponent field k + (m >> sh)
    kept = shr(m, sh, one)
    lsb = (shl(k, m_bits, one) + kept) & one
    r = shr(m + (shl(one, sh - one, one) - one) + lsb, sh, one)
    code = shl(k, m_bits, one) + r
    return _finish(v, a, code, p)


@njit(inline="always")
def encode_unsigned(v, q):
    """Code of an ``unsigned`` format (powers of two ``2**(c - bias)``, NaN all ones) for
    source bits ``v``, as ml_dtypes rounds to float8_e8m0fnu: nearest, ties up; below
    ``2**(1 - bias)``, code 1 for anything above ``2**-bias`` and code 0 (there is no zero)
    for the rest; negative numbers, zeros and NaN give NaN."""
    abs_mask, one, src_m, half, rebias, src_inf, max_code, ovf, inf_res, nan_code, c1, c0 = q
    zero = one - one
    a = v & abs_mask
    # (in the source's width: Numba types uint32 + uint32 as 64 bits, on half the lanes)
    e = shr(cast_like(a + half, one), src_m, one)
    code = cast_like(e - rebias, one) if e > rebias else zero
    code = (one if a > c0 else zero) if a < c1 else code
    code = ovf if code > max_code else code
    code = inf_res if a == src_inf else code
    bad = (v != a) | (a == zero) | (a > src_inf)
    return nan_code if bad else code


@njit(inline="always")
def zero_of(one):
    return one - one


@njit(inline="always")
def chunk_range(spec):
    """``(nchunks, first, stop)`` from a kernel's packed chunk argument: the kernel runs
    chunks ``first .. stop - 1`` of ``nchunks`` (see :func:`fp8kit._parallel.chunk_spec`;
    a plain ``n`` means all ``n`` chunks)."""
    n = spec & 0xFFFFF
    first = (spec >> 20) & 0xFFFFF
    stop = (spec >> 40) & 0xFFFFF  # (bit 62: fp8kit._parallel.NO_STREAM, for native kernels)
    return n, first, (stop if stop != 0 else n)


@njit(inline="always")
def chunk_items(c, step, total):
    """``(first, stop)``: items ``c * step`` up to ``(c + 1) * step`` (at most ``total``)
    of chunk ``c`` (``stop <= first`` for a chunk past the end)."""
    first = c * step
    return first, (first + step if first + step < total else total)


@njit(inline="always")
def block_items(c, nchunks, step, offset, end, block):
    """``(lo, hi)``: the global indices of chunk ``c`` of ``nchunks`` over the elements
    ``offset .. end - 1`` of an array, its inner bounds on multiples of ``block`` (``step``
    a multiple of ``block``): the first chunk starts at ``offset``, the last ends at
    ``end``."""
    lo = offset
    if c > 0:
        lo = (offset + c * step + block - 1) // block * block
        lo = lo if lo < end else end
    hi = end
    if c < nchunks - 1:
        hi = (offset + (c + 1) * step + block - 1) // block * block
        hi = hi if hi < end else end
    return lo, hi


@intrinsic
def span(typingctx, arr, lo, hi):
    """``arr[lo:hi]`` of a 1-D C-contiguous array, for ``0 <= lo`` (``hi`` beyond the end
    taken as the end; an empty view where ``hi <= lo``): the view built directly (data
    pointer, length, stride), without Numba's slicing, whose typing and lowering (slice
    objects, bounds fixing) cost ~0.01-0.03 s of a small kernel's cold compile (the decode
    kernel: 0.14 -> 0.13 s).  Kernels have no NRT: the view has no meminfo."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"):
        return None

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        lo, hi = args[1], args[2]
        size = ary.nitems
        hi = builder.select(builder.icmp_signed("<", hi, size), hi, size)
        count = builder.sub(hi, lo)
        count = builder.select(builder.icmp_signed("<", count, count.type(0)), count.type(0), count)
        view = context.make_array(aryty)(context, builder)
        itemsize = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
        intp = context.get_value_type(types.intp)
        context.populate_array(
            view,
            data=builder.gep(ary.data, [lo]),
            shape=[count],
            strides=[ir.Constant(intp, itemsize)],
            itemsize=ir.Constant(intp, itemsize),
            meminfo=None,
        )
        return view._getvalue()

    return arr(arr, types.intp, types.intp), codegen


@njit(inline="always")
def chunk(a, c, step):
    """Chunk ``c`` of a 1-D array split in pieces of ``step`` elements (the last shorter).

    Loops index the returned view from 0, which Numba knows is non-negative; indexing the
    whole array from ``c * step`` adds wraparound checks that stop vectorization.
    """
    hi = (c + 1) * step
    # (a comparison, not ``min``: each builtin overload compiles on first use in a
    # process, ~20 ms, on every cold first call)
    return span(a, c * step, hi if hi < a.size else a.size)


@njit(inline="always")
def chunks(x, out, c, step):
    """``(chunk(x, c, step), chunk(out, c, step))`` for arrays of one size, in one helper:
    every inlined helper call costs ~20 ms of compile time on a cold first call."""
    lo = c * step
    hi = lo + step
    hi = hi if hi < x.size else x.size
    return span(x, lo, hi), span(out, lo, hi)


@njit(inline="always")
def round_in_place(v, r):
    """Round float bits ``v`` to the nearest value of a format, returned as bits of the same
    float type (no code, no table: every step is a vector operation).  Overflow and Inf give
    +-max (FakeConvert's saturation); NaN gives a NaN."""
    (abs_mask, one, half, keep, min_normal, magic, use_magic, src_inf, max_bits, nan_bits,
     sign_bit, neg_zero, zero) = r  # fmt: skip
    a = cast_like(v & abs_mask, one)
    rounded = cast_like(cast_like(a + cast_like(half + (shr(a, keep[1], one) & one), one), one)
                        & keep[0], one)  # fmt: skip
    if use_magic:
        sub = as_bits((as_float(a) + magic) - magic)
        rounded = sub if a < min_normal else rounded
    rounded = max_bits if rounded > max_bits else rounded
    rounded = nan_bits if a > src_inf else rounded
    sign = cast_like(v & sign_bit, one)
    if neg_zero:
        return cast_like(rounded | sign, one)
    return cast_like(rounded | (sign if rounded != zero else zero), one)


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` rounded once (LLVM's ``llvm.fma``: a vector FMA instruction where the
    CPU has one, else a correctly rounded library call), for float64 or float32 arguments
    (all three of one type)."""
    if not (a == b == c and a in (types.float64, types.float32)):
        return None

    def codegen(context, builder, signature, args):
        d = ir.DoubleType() if a == types.float64 else ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [d], ir.FunctionType(d, [d, d, d]))
        return builder.call(fn, args)

    return a(a, b, c), codegen


def nvvm_rn(name):
    """An IEEE float32/float64 operation rounded to nearest-even, never contracted.

    On the CPU this is the plain LLVM instruction.  Compiled for CUDA it is NVVM's
    ``llvm.nvvm.<op>.rn`` intrinsic: PTX ``mul.f32``/``add.f32`` without a rounding modifier
    may be fused into an FMA by ptxas (a single rounding of ``x * s - h``), while
    ``mul.rn``/``add.rn`` never are.
    """

    @intrinsic
    def op(typingctx, a, b):
        if a != b or a not in (types.float32, types.float64):
            return None

        def codegen(context, builder, signature, args):
            x, y = args
            if builder.module.triple.startswith("nvptx"):
                if name == "sub":  # NVVM has no sub.rn: x - y == x + (-y) exactly (NaN aside)
                    y = builder.fsub(ir.Constant(y.type, -0.0), y)
                suffix = "f" if a == types.float32 else "d"
                nvvm = "mul" if name == "mul" else "add"
                fnty = ir.FunctionType(x.type, [x.type, x.type])
                fn = cgutils.get_or_insert_function(
                    builder.module, fnty, f"llvm.nvvm.{nvvm}.rn.{suffix}"
                )
                return builder.call(fn, [x, y])
            return {"mul": builder.fmul, "add": builder.fadd, "sub": builder.fsub}[name](x, y)

        return a(a, b), codegen

    return op


@intrinsic
def select(typingctx, cond, a, b):
    """``a if cond else b`` with both operands evaluated: one LLVM ``select``.

    :func:`fp8kit._kernels.flatten.flatten` writes it for conditional expressions whose
    operands are safe to evaluate either way.  Numba lowers a conditional expression into
    three blocks joined by a phi node, and its SSA and liveness passes cost grows with
    blocks times variables: a select is one call to type and lower (measured 2x faster to
    compile per expression, and more in long kernels).  LLVM turns such diamonds into the
    same ``select`` anyway.  The result type is the operands' unified type, as a
    conditional expression's is."""
    ty = typingctx.unify_pairs(a, b)
    if ty is None or not isinstance(cond, (types.Boolean, types.Number)):
        return None
    ty = types.unliteral(ty)

    def codegen(context, builder, signature, args):
        (ct, at, bt), (c, x, y) = signature.args, args
        c = context.cast(builder, c, ct, types.boolean)
        x = context.cast(builder, x, at, ty)
        y = context.cast(builder, y, bt, ty)
        return builder.select(c, x, y)

    return ty(cond, a, b), codegen


@intrinsic
def prefer_512(typingctx):
    """Let LLVM vectorize the calling function with 512-bit vectors where the CPU has them.

    LLVM's tuning for AVX-512 server CPUs prefers 256-bit vectors (to spare the clock on
    older parts); the fused FakeConvert loop measured 3-7% faster with 512-bit ones on this
    project's benchmark machine. Harmless on CPUs without AVX-512. llvmlite validates
    attribute names against a fixed list that lacks string attributes, so the attribute is
    added to the underlying set directly; should that ever fail, the default width is kept.
    """

    def codegen(context, builder, signature, args):
        try:
            set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        except Exception:  # pragma: no cover - performance hint only
            pass
        return context.get_dummy_value()

    return types.void(), codegen


_QUIET32 = np.uint32(0x00400000)
_INDEFINITE32 = np.uint32(0xFFC00000)


@njit(inline="always")
def x86_nan(r, a, b):
    """``r``, the float32 result of ``a op b``, with the NaN x86 SSE/AVX give: the first NaN
    operand made quiet, else (an invalid operation such as 0 * Inf) the default NaN
    0xFFC00000.  GPUs return one canonical NaN instead, and LLVM may swap the operands of a
    commutative x86 instruction; with this the NaN bits depend on neither."""
    quiet = cast_like((as_bits(a) if a != a else as_bits(b)) | _QUIET32, _QUIET32)
    nan = as_float(quiet)
    nan = nan if (a != a or b != b) else as_float(_INDEFINITE32)
    return r if r == r else nan


def array_value(context, builder, arrty, ptr, size):
    """The Numba array value of type ``arrty`` (1-D, C-contiguous) of ``size`` elements at
    the address ``ptr`` (LLVM values: a byte pointer and an intp): how a native kernel's
    C-callable adapter (:func:`fp8kit._kernels.native._adapter_emitter`) passes its
    arguments.  No memory owner, so no reference counting (``numba.carray`` needs Numba's
    runtime for that)."""
    llty = context.get_data_type(arrty.dtype)
    itemsize = ir.Constant(context.get_value_type(types.intp), context.get_abi_sizeof(llty))
    ary = context.make_array(arrty)(context, builder)
    data = builder.bitcast(ptr, llty.as_pointer())
    context.populate_array(ary, data=data, shape=[size], strides=[itemsize],
                           itemsize=itemsize, meminfo=None)  # fmt: skip
    return ary._getvalue()


@intrinsic
def stack_buffer(typingctx, size, dtype):
    """A 1-D C-contiguous array of ``size`` (a compile-time constant: a closure or global
    int) uninitialized elements of ``dtype`` (a numpy scalar type) on the calling function's
    stack, allocated once per call (in its entry block) and valid until it returns.

    Replaces ``np.empty`` for the small scratch buffers of kernels: ``np.empty`` is free at
    run time but its overloads compile on the first cold call of every process (~85 ms)."""
    if not isinstance(size, types.IntegerLiteral) or not isinstance(dtype, types.NumberClass):
        return None
    count = size.literal_value
    arrty = types.Array(dtype.dtype, 1, "C")

    def codegen(context, builder, signature, args):
        llty = context.get_data_type(arrty.dtype)
        itemsize = context.get_abi_sizeof(llty)
        data = cgutils.alloca_once(builder, llty, size=count)
        data.align = 64  # (element-aligned buffers slowed the fused study loop by 3-8%)
        ary = context.make_array(arrty)(context, builder)
        intp = context.get_value_type(types.intp)
        context.populate_array(
            ary,
            data=data,
            shape=[ir.Constant(intp, count)],
            strides=[ir.Constant(intp, itemsize)],
            itemsize=ir.Constant(intp, itemsize),
            meminfo=None,
        )
        return ary._getvalue()

    return arrty(size, dtype), codegen


@njit(inline="always")
def grid(arr, rows, cols):
    """The 1-D C-contiguous array ``arr`` seen as a ``rows`` x ``cols`` C-contiguous one (a
    view, no memory owner): how a kernel on the checked entry, which passes 1-D arrays,
    indexes a matrix.  The caller checks ``rows * cols == arr.size`` (see
    :func:`fp8kit._kernels.mma.fits`).  Not ``arr.reshape``: Numba compiles its check
    of the shape as a function of its own on every cold first call."""
    return _matrix_view(arr, rows, cols, cols * arr.itemsize)


@intrinsic
def _matrix_view(typingctx, arr, rows, cols, row_bytes):
    """:func:`grid`, its row stride in bytes computed by the caller."""
    ok = isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"
    if not ok or not all(isinstance(t, types.Integer) for t in (rows, cols, row_bytes)):
        return None
    retty = arr.copy(ndim=2)

    def codegen(context, builder, signature, args):
        src = context.make_array(signature.args[0])(context, builder, args[0])
        rows, cols, row_bytes = (
            context.cast(builder, v, t, types.intp)
            for v, t in zip(args[1:], signature.args[1:], strict=True)
        )
        ary = context.make_array(retty)(context, builder)
        context.populate_array(ary, data=src.data, shape=[rows, cols], itemsize=src.itemsize,
                               strides=[row_bytes, src.itemsize], meminfo=None)  # fmt: skip
        return ary._getvalue()

    return retty(arr, rows, cols, row_bytes), codegen


@njit(inline="always")
def smaller(a, b):
    """The smaller of two numbers as a select (NaN not considered): it vectorizes, and
    unlike Numba's ``min`` it is not a function of its own that a kernel links (0.015 s
    each on a cold first call, and the kernel's machine code then made on the calling
    thread)."""
    return a if a < b else b


@njit(inline="always")
def larger(a, b):
    """The larger of two numbers as a select (see :func:`smaller`)."""
    return a if a > b else b


#: Bytes per streaming store: one AVX-512 register, one cache line.
STREAM_BYTES = 64
#: How far ahead of its input :func:`vector_blocks` prefetches (bytes; where
#: :func:`prefetches`): 1-4 KiB measured alike on the Intel Xeon.
PREFETCH_BYTES = 2048


@intrinsic
def byte_address(typingctx, arr, index):
    """The address of ``arr[index]`` as an integer (for alignment arithmetic)."""

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        return builder.ptrtoint(ptr, context.get_value_type(types.uintp))

    return types.uintp(arr, index), codegen


@intrinsic
def stream_line(typingctx, dst, dst_index, src, src_index):
    """Copy one cache line (64 bytes) from ``src[src_index:]`` to ``dst[dst_index:]`` with a
    non-temporal store: the line goes to memory without first being read into the cache.
    ``dst[dst_index]`` must be 64-byte aligned (the instruction faults otherwise)."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array)):
        return None
    if dst.dtype != src.dtype or not isinstance(dst.dtype, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        dty, _, sty, _ = signature.args
        width = dty.dtype.bitwidth
        vec = ir.VectorType(ir.IntType(width), STREAM_BYTES * 8 // width)
        d = context.make_array(dty)(context, builder, args[0])
        s = context.make_array(sty)(context, builder, args[2])
        sp = builder.bitcast(builder.gep(s.data, [args[3]]), vec.as_pointer())
        dp = builder.bitcast(builder.gep(d.data, [args[1]]), vec.as_pointer())
        value = builder.load(sp, align=width // 8)
        store = builder.store(value, dp, align=STREAM_BYTES)
        store.set_metadata(
            "nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        )
        return context.get_dummy_value()

    return types.void(dst, dst_index, src, src_index), codegen


@njit(inline="always")
def block_end(out, b0, hi, stream, block):
    """End of the block from ``b0`` of a chunk ``b0 .. hi`` written to ``out``: the whole
    chunk, or where large outputs are streamed (``stream``) up to ``out``'s next cache-line
    boundary, then ``block`` elements (a whole number of lines) at a time; the partial
    blocks at both ends are written in place, the whole ones through a stack buffer
    (:func:`stream_block`).  How every streaming kernel walks its chunk."""
    if not stream:
        return hi
    head = (-byte_address(out, b0) % STREAM_BYTES) // out.itemsize
    end = b0 + (head if head != 0 else block)
    return end if end < hi else hi


@njit(inline="always")
def stream_block(out, b0, sbuf, block):
    """``sbuf[:block]`` (whole cache lines) to ``out[b0:]`` with non-temporal stores
    (:func:`stream_line`)."""
    for k in range(0, block, STREAM_BYTES // out.itemsize):
        stream_line(out, b0 + k, sbuf, k)


@intrinsic
def store_fence(typingctx):
    """``sfence`` on x86 (non-temporal stores are weakly ordered: make them visible before
    the chunk's thread reports done); nothing elsewhere."""

    def codegen(context, builder, signature, args):
        if _X86:
            fn = builder.module.declare_intrinsic(
                "llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), [])
            )
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


@njit(inline="always")
def stream_copy(dst, start, src, count):
    """``dst[start:start + count] = src[:count]``, whole aligned cache lines with streaming
    stores (the head and tail outside them with plain ones)."""
    size = src.itemsize
    per_line = STREAM_BYTES // size
    addr = byte_address(dst, start)
    head = count
    if addr % size == 0:  # (always, for arrays numpy allocates)
        head = ((STREAM_BYTES - addr % STREAM_BYTES) % STREAM_BYTES) // size
        head = count if count < head else head  # (not min: see chunk)
    for j in range(head):
        dst[start + j] = src[j]
    k = head
    while k + per_line <= count:
        stream_line(dst, start + k, src, k)
        k += per_line
    for j in range(k, count):
        dst[start + j] = src[j]


def array_args(context, builder, signature, args, count):
    """The first ``count`` arguments of an intrinsic's codegen, arrays, as Numba's array
    structs (``.data``, ``.shape``, ...)."""
    return [
        context.make_array(ty)(context, builder, value)
        for ty, value in zip(signature.args[:count], args[:count], strict=True)
    ]


def splat(builder, value, vec_type):
    """The scalar ``value`` in every lane of a ``vec_type`` vector (LLVM IR)."""
    i32 = ir.IntType(32)
    vec = builder.insert_element(ir.Constant(vec_type, ir.Undefined), value, ir.Constant(i32, 0))
    zeros = ir.Constant(ir.VectorType(i32, vec_type.count), [0] * vec_type.count)
    return builder.shuffle_vector(vec, vec, zeros)


def masked_access(builder, name, vec_ty, args):
    """A call of LLVM's ``llvm.masked.load`` (``name`` "load": args pointer, alignment,
    mask, pass-through) or ``llvm.masked.store`` ("store": value, pointer, alignment,
    mask) of vectors of type ``vec_ty`` (AVX-512 masks them natively; other targets split
    them into scalar accesses)."""
    ret = vec_ty if name == "load" else ir.VoidType()
    fnty = ir.FunctionType(ret, [a.type for a in args])
    vec = f"v{vec_ty.count}i{vec_ty.element.width}"
    # the intrinsic's name carries the pointer type: "p0" where LLVM's pointers are opaque
    # (llvmlite 0.45 on), "p0" and the vector type where they are typed
    ptr = args[1 if name == "store" else 0].type
    suffix = "p0" if str(ptr) == "ptr" else f"p0{vec}"
    fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.masked.{name}.{vec}.{suffix}")
    return builder.call(fn, args)


def first_lanes(builder, count, lanes):
    """The mask (``<lanes x i1>``) of the first ``count`` (an i32) of ``lanes`` lanes."""
    i32 = ir.IntType(32)
    vt = ir.VectorType(i32, lanes)
    return builder.icmp_signed("<", ir.Constant(vt, list(range(lanes))), splat(builder, count, vt))


def permute_bytes(builder):
    """AVX512-VBMI's two-table byte permute, ``vpermi2b``: called with (table low half,
    indexes, table high half), ``<64 x i8>`` each (index bits 0-6 pick one of the 128
    bytes)."""
    v8 = ir.VectorType(ir.IntType(8), 64)
    return cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(v8, [v8, v8, v8]), "llvm.x86.avx512.vpermi2var.qi.512"
    )


def vector_blocks(builder, intp, n, src, dst, in_ty, out_ty, body, stream=None):
    """``dst[j] = body(src[j])`` for the elements ``[0, n)`` of the arrays at the pointers
    ``src`` and ``dst``, one vector of ``in_ty.count`` elements at a time (``in_ty`` and
    ``out_ty``: vector types with that many lanes), the last partial block with masked
    loads and stores (AVX-512 masks them natively; other targets split the tail into scalar
    accesses, once per call): no scalar copy of the kernel's formula.

    ``stream``: an LLVM ``i1``; where true (at run time) the whole blocks are written with
    non-temporal stores, from the first block whose output starts a cache line (the
    elements before it take a masked block), and an ``sfence`` follows: the lines go to
    memory without first being read into the cache (a quarter of the traffic of 16-bit ->
    8-bit), for arrays larger than the caches.  ``out_ty`` must then be whole cache lines
    and ``dst`` aligned to its elements."""
    block = in_ty.count
    i32 = ir.IntType(32)
    i8p = ir.IntType(8).as_pointer()

    def src_of(j):
        return builder.bitcast(builder.gep(src, [j]), in_ty.as_pointer())

    def dst_of(j):
        return builder.bitcast(builder.gep(dst, [j]), out_ty.as_pointer())

    def partial(start, count):  # elements [start, start + count), 0 < count < block
        mask = first_lanes(builder, count, block)
        zero = ir.Constant(in_ty, [0] * block)
        align_in = ir.Constant(i32, in_ty.element.width // 8)
        value = body(masked_access(builder, "load", in_ty, [src_of(start), align_in, mask, zero]))
        align_out = ir.Constant(i32, out_ty.element.width // 8)
        masked_access(builder, "store", out_ty, [value, dst_of(start), align_out, mask])

    zero = ir.Constant(intp, 0)
    head = zero
    if stream is not None:
        assert out_ty.count * out_ty.element.width % (STREAM_BYTES * 8) == 0
        # (a cache line boundary falls on an element only where dst is aligned to its
        # elements: numpy allows other arrays, and a non-temporal store there faults)
        size = out_ty.element.width // 8
        if size > 1:
            off = builder.and_(builder.ptrtoint(dst, intp), ir.Constant(intp, size - 1))
            stream = builder.and_(stream, builder.icmp_unsigned("==", off, zero))
        # (one loop for both kinds of store, a branch per block, and one head block: each
        # further copy of the body cost ~0.03 s of LLVM's time on a cold first call)
        out_bytes = ir.Constant(intp, out_ty.element.width // 8)
        lead = builder.udiv(
            builder.and_(builder.neg(builder.ptrtoint(dst, intp)), ir.Constant(intp, 63)),
            out_bytes,
        )
        lead = builder.select(builder.icmp_signed("<", lead, n), lead, n)
        head = builder.select(stream, lead, zero)
        with builder.if_then(builder.icmp_signed(">", head, zero), likely=False):
            partial(zero, builder.trunc(head, i32))
    step = ir.Constant(intp, block)
    rem = builder.srem(builder.sub(n, head), step)
    whole = builder.sub(n, rem)
    fetch = None
    if prefetches():  # (a hint: it never faults, past the array's end too)
        fetch = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        )
    with cgutils.for_range_slice(builder, head, whole, step, intp) as (j, _):
        if fetch is not None:  # (each cache line of the block's input, read, kept)
            ahead = builder.gep(
                builder.bitcast(src_of(j), i8p), [ir.Constant(intp, PREFETCH_BYTES)]
            )
            for line in range(0, in_ty.count * in_ty.element.width // 8, STREAM_BYTES):
                at = builder.gep(ahead, [ir.Constant(intp, line)])
                builder.call(fetch, [at] + [ir.Constant(i32, k) for k in (0, 3, 1)])
        value = body(builder.load(src_of(j), align=in_ty.element.width // 8))
        if stream is None:
            builder.store(value, dst_of(j), align=out_ty.element.width // 8)
        else:
            with builder.if_else(stream, likely=True) as (yes, no):
                with yes:
                    store = builder.store(value, dst_of(j), align=STREAM_BYTES)
                    store.set_metadata(
                        "nontemporal", builder.module.add_metadata([ir.Constant(i32, 1)])
                    )
                with no:
                    builder.store(value, dst_of(j), align=out_ty.element.width // 8)
    with builder.if_then(builder.icmp_signed(">", rem, zero), likely=False):
        partial(whole, builder.trunc(rem, i32))
    if stream is not None and _X86:
        with builder.if_then(stream):
            fence = builder.module.declare_intrinsic(
                "llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), [])
            )
            builder.call(fence, [])


# ---------------------------------------------------------------- table in byte planes

#: Codes per block of :func:`plane_lookup`: one 512-bit vector of uint8 codes.
PLANE_BLOCK = 64


def table_planes(table: np.ndarray) -> np.ndarray | None:
    """The constants of :func:`plane_lookup` for a decode table (uint16, uint32 or uint64
    entries): the entries' top 16 bits as two byte planes (512 bytes: the high bytes for
    codes 0..255, then the low bytes), codes past the table's end (above a sub-byte
    format's width, reported by the caller) taking the entry of their low bits; None when
    an entry has a bit below its top 16: float32 holds 7 mantissa bits there (every format
    up to 8 bits), float64 4 (the float8 formats of ml_dtypes, float6, float4; not the
    P3109 formats with 5 to 7)."""
    width = table.dtype.itemsize * 8
    bits = table.astype(np.uint64)[np.arange(256) % table.size]
    shift = np.uint64(width - 16)
    if width > 16 and (bits & ((np.uint64(1) << shift) - np.uint64(1))).any():
        return None
    top = bits >> shift
    prm = np.concatenate([top >> np.uint64(8), top & np.uint64(0xFF)]).astype(np.uint8)
    prm.flags.writeable = False
    return prm


def load_planes(builder, data, intp):
    """The byte planes of :func:`table_planes` at the pointer ``data`` (uint8) as eight
    ``<64 x i8>`` registers: high bytes [0:256], low bytes [256:512]."""
    v8 = ir.VectorType(ir.IntType(8), PLANE_BLOCK)
    tables = builder.bitcast(data, v8.as_pointer())
    return [builder.load(builder.gep(tables, [ir.Constant(intp, k)]), align=1) for k in range(8)]


def plane_values(builder, t, v, width):
    """The table entries (``<64 x iW>``, ``width`` W) of the codes ``v`` (``<64 x i8>``)
    from the planes ``t`` (:func:`load_planes`): four vpermi2b and two merges per plane
    pair, then the two planes interleaved into the entries' top 16 bits."""
    i8, i32 = ir.IntType(8), ir.IntType(32)
    v8 = ir.VectorType(i8, PLANE_BLOCK)
    perm = permute_bytes(builder)
    upper = builder.icmp_signed("<", v, ir.Constant(v8, [0] * PLANE_BLOCK))  # codes 128..255

    def lookup(lo):
        first = builder.call(perm, [t[lo], v, t[lo + 1]])
        return builder.select(upper, builder.call(perm, [t[lo + 2], v, t[lo + 3]]), first)

    # byte i of the high plane then of the low plane -> little-endian word i
    interleave = ir.Constant(
        ir.VectorType(i32, 2 * PLANE_BLOCK),
        [k for i in range(PLANE_BLOCK) for k in (i + PLANE_BLOCK, i)],
    )
    v16 = ir.VectorType(ir.IntType(16), PLANE_BLOCK)
    words = builder.bitcast(builder.shuffle_vector(lookup(0), lookup(4), interleave), v16)
    if width == 16:
        return words
    vout = ir.VectorType(ir.IntType(width), PLANE_BLOCK)
    wide = builder.zext(words, vout)
    return builder.shl(wide, ir.Constant(vout, [width - 16] * PLANE_BLOCK))


@intrinsic
def plane_lookup(typingctx, prm, x, out, n):
    """``out[:n]`` = the table entries of the uint8 codes ``x[:n]`` (``prm``: the table's
    :func:`table_planes`), one block of PLANE_BLOCK codes at a time, by AVX512-VBMI byte
    permutes of the planes held in eight registers (only where :func:`cpu_has`
    ``"avx512vbmi"``); returns the or of the codes (uint32).  (Plain stores: non-temporal
    ones, 4M-16M codes to float32, measured no faster here.)"""
    if not (isinstance(prm, types.Array) and isinstance(out, types.Array)):
        return None
    width = out.dtype.bitwidth

    def codegen(context, builder, signature, args):
        pa, xa, oa = array_args(context, builder, signature, args, 3)
        intp = context.get_value_type(types.intp)
        return emit_plane_lookup(builder, intp, width, pa.data, xa.data, oa.data, args[3])

    return types.uint32(prm, x, out, n), codegen


def emit_plane_lookup(builder, intp, width, prm, x, out, n, stream=None):
    """The LLVM IR of :func:`plane_lookup` (``prm``: an i8 pointer to the planes, ``x``
    to the codes, ``out`` to ``width``-bit integers; ``n`` elements); the or of the codes
    (i32).  ``stream``: as :func:`vector_blocks`'."""
    i8, i32 = ir.IntType(8), ir.IntType(32)
    v8 = ir.VectorType(i8, PLANE_BLOCK)
    vout = ir.VectorType(ir.IntType(width), PLANE_BLOCK)
    t = load_planes(builder, prm, intp)
    zero8 = ir.Constant(v8, [0] * PLANE_BLOCK)
    seen = cgutils.alloca_once_value(builder, zero8)

    def body(v):
        builder.store(builder.or_(builder.load(seen), v), seen)
        return plane_values(builder, t, v, width)

    vector_blocks(builder, intp, n, x, out, v8, vout, body, stream=stream)
    acc = builder.load(seen)
    red = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(i8, [v8]), "llvm.vector.reduce.or.v64i8"
    )
    return builder.zext(builder.call(red, [acc]), i32)


def f64_to_odd_f32(builder, v, odd=True, subnormals=False):
    """float32 bits (``<N x i32>``) of the float64 bits ``v`` (``<N x i64>``, N a multiple
    of 8; AVX-512) rounded to odd: vcvtpd2ps toward zero, then the lowest bit set where
    that was inexact (converted back, it differs; a NaN never compares equal and stays a
    NaN).  Toward zero, a finite float64 beyond float32's range gives its largest finite
    (odd), one below its smallest subnormal a zero, made the smallest subnormal by the
    inexact bit (see :func:`fp8kit._kernels.encode16.f64_byte_kernel`); Inf stays Inf, a
    NaN a NaN of its sign.  ``odd=False``: toward zero alone (truncated: every floor of
    the value at a coarser bit is the truncated bits' own).  (The integer formula on 64-bit
    lanes took 0.05 s longer to compile.)  ``subnormals``: results below float32's smallest
    normal by that integer formula (the float64 significand shifted), which a flush-to-zero
    or denormals-are-zero mode set by another library cannot change (the conversion, and
    the exactness test through float32, can): for formats whose values reach them."""
    i8, i32 = ir.IntType(8), ir.IntType(32)
    f32, f64 = ir.FloatType(), ir.DoubleType()
    d8, s8, i8x = ir.VectorType(f64, 8), ir.VectorType(f32, 8), ir.VectorType(i32, 8)
    cvt = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(s8, [d8, s8, i8, i32]),
        "llvm.x86.avx512.mask.cvtpd2ps.512",
    )
    x = builder.bitcast(v, ir.VectorType(f64, v.type.count))
    one = ir.Constant(i8x, [1] * 8)
    zero = ir.Constant(i8x, [0] * 8)
    parts = []
    for g in range(v.type.count // 8):
        d = builder.shuffle_vector(x, x, ir.Constant(i8x, list(range(8 * g, 8 * g + 8))))
        # rounding operand 11: toward zero (3), exceptions suppressed (8)
        t = builder.call(
            cvt, [d, ir.Constant(s8, None), ir.Constant(i8, 0xFF), ir.Constant(i32, 11)]
        )
        t = builder.bitcast(t, i8x)
        if odd:
            inexact = builder.fcmp_unordered("!=", builder.fpext(builder.bitcast(t, s8), d8), d)
            t = builder.or_(t, builder.select(inexact, one, zero))
        if subnormals:
            d_bits = builder.bitcast(d, ir.VectorType(ir.IntType(64), 8))
            t = _f32_subnormal_bits(builder, d_bits, t, odd)
        parts.append(t)
    while len(parts) > 1:  # concatenate: 8 x 8 -> 4 x 16 -> 2 x 32 -> 64 lanes
        width = parts[0].type.count
        both = ir.Constant(ir.VectorType(i32, 2 * width), list(range(2 * width)))
        parts = [
            builder.shuffle_vector(a, b, both) for a, b in zip(parts[::2], parts[1::2], strict=True)
        ]
    return parts[0]


def _f64_fields(builder, bits):
    """(biased exponent, significand with its implicit bit where normal) of float64 ``bits``
    (``<N x i64>``)."""
    vt = bits.type

    def c(value):
        return ir.Constant(vt, [value] * vt.count)

    e = builder.and_(builder.lshr(bits, c(52)), c(0x7FF))
    frac = builder.and_(bits, c((1 << 52) - 1))
    m = builder.select(builder.icmp_unsigned("!=", e, c(0)), builder.or_(frac, c(1 << 52)), frac)
    return e, m


def _f32_subnormal_bits(builder, bits, t, odd):
    """``t`` (``<8 x i32>``, float64 ``bits`` converted to float32) where the value is below
    float32's smallest normal replaced by its float32 subnormal, truncated (rounded to odd
    with ``odd``), by integer operations: the significand ``m`` shifted right by
    ``926 - E`` (E its biased exponent; 63 at most, where nothing of ``m`` remains)."""
    i64v = bits.type
    i32v = t.type

    def c(value):
        return ir.Constant(i64v, [value] * 8)

    e, m = _f64_fields(builder, bits)
    sh = builder.sub(c(926), e)
    sh = builder.select(builder.icmp_unsigned(">", sh, c(63)), c(63), sh)
    sub = builder.trunc(builder.lshr(m, sh), i32v)
    if odd:
        lost = builder.and_(m, builder.sub(builder.shl(c(1), sh), c(1)))
        sub = builder.or_(sub, builder.zext(builder.icmp_unsigned("!=", lost, c(0)), i32v))
    sign = builder.trunc(builder.lshr(bits, c(32)), i32v)
    sub = builder.or_(sub, builder.and_(sign, ir.Constant(i32v, [-(1 << 31)] * 8)))
    return builder.select(builder.icmp_unsigned("<=", e, c(896)), sub, t)


def nonzero(builder, n):
    """``n``, or 1 where it is 0: a divisor that cannot trap (no rows, no walk, then)."""
    one = ir.Constant(n.type, 1)
    return builder.select(builder.icmp_signed("==", n, ir.Constant(n.type, 0)), one, n)


def walk_rows(builder, r, n1, n2, extra=()):
    """Allocas ``{"a", "b", "d", *extra}`` holding the indices of row ``r`` of rows walked
    in C order over dimensions ``(n0, n1, n2)`` (``extra``: (name, first value) pairs),
    carried on by :func:`next_row`: divisions once per walk, not per row."""
    n1s, n2s = nonzero(builder, n1), nonzero(builder, n2)
    firsts = {
        "a": builder.sdiv(r, builder.mul(n1s, n2s)),
        "b": builder.srem(builder.sdiv(r, n2s), n1s),
        "d": builder.srem(r, n2s),
        **dict(extra),
    }
    return {k: cgutils.alloca_once_value(builder, v) for k, v in firsts.items()}


def next_row(builder, var, a, b, d1, n1, n2):
    """Store the next row's indices into :func:`walk_rows`' allocas: ``d1`` the next ``d``
    (``a``, ``b`` the current ones), which wraps at ``n2`` into ``b``, and ``b`` at ``n1``
    into ``a``."""
    one, zero = ir.Constant(d1.type, 1), ir.Constant(d1.type, 0)
    wrap_d = builder.icmp_signed("==", d1, n2)
    b1 = builder.select(wrap_d, builder.add(b, one), b)
    wrap_b = builder.icmp_signed("==", b1, n1)
    builder.store(builder.select(wrap_d, zero, d1), var["d"])
    builder.store(builder.select(wrap_b, zero, b1), var["b"])
    builder.store(builder.select(wrap_b, builder.add(a, one), a), var["a"])


def block_mask(builder, n, t, lanes):
    """``(mask, full)`` of the block of ``lanes`` elements at ``t`` of ``n``: its lanes
    inside ``[0, n)`` (``<lanes x i1>``) and whether that is all of them."""
    step = ir.Constant(n.type, lanes)
    left = builder.sub(n, t)
    left = builder.select(builder.icmp_signed("<", left, step), left, step)
    mask = first_lanes(builder, builder.trunc(left, ir.IntType(32)), lanes)
    return mask, builder.icmp_signed("==", left, step)


def block_load(builder, ptr, vt, full, mask):
    """The vector ``vt`` at ``ptr``: a plain load where ``full`` (an i1), else the lanes of
    ``mask()`` (a callable, emitted in that branch only) masked, the others zero."""
    ptr = builder.bitcast(ptr, vt.as_pointer())
    size = vt.element.width // 8
    with builder.if_else(full, likely=True) as (whole, part_):
        with whole:
            v_whole = builder.load(ptr, align=size)
            b_whole = builder.block
        with part_:
            args = [ptr, ir.Constant(ir.IntType(32), size), mask(), ir.Constant(vt, [0] * vt.count)]
            v_part = masked_access(builder, "load", vt, args)
            b_part = builder.block
    v = builder.phi(vt)
    v.add_incoming(v_whole, b_whole)
    v.add_incoming(v_part, b_part)
    return v


def block_store(builder, value, ptr, full, mask):
    """Store ``value`` at ``ptr``: all lanes where ``full``, else those of ``mask()``."""
    ptr = builder.bitcast(ptr, value.type.as_pointer())
    size = value.type.element.width // 8
    with builder.if_else(full, likely=True) as (whole, part_):
        with whole:
            builder.store(value, ptr, align=size)
        with part_:
            args = [value, ptr, ir.Constant(ir.IntType(32), size), mask()]
            masked_access(builder, "store", value.type, args)


# ---------------------------------------------------------------- kernel parameters

LOAD_DIRECT = 0  # the input's own bits (float32 or float64)
LOAD_BF16 = 1  # bfloat16 bits, widened exactly to float32 bits by a shift
LOAD_LUT = 2  # float16 bits, widened exactly to float32 bits (hardware conversion)


@njit(inline="always")
def load_p(prm, use_magic, neg_zero):
    """The tuple ``p`` of :func:`_params` from a parameter array (see :func:`pack_params`),
    with its two flags given.  ``use_magic`` chooses a code path, so kernels pass a
    compile-time constant (read at run time, with ``neg_zero``, it measured 1.3-1.9x
    slower); kernels pass ``prm[15] != 0`` for ``neg_zero`` (-0 or not: one select, no
    measurable cost), so the fnuz formats share the kernels of the others."""
    return (
        prm[0], prm[1], prm[2], prm[3], prm[4], as_float(prm[5]), prm[6], use_magic,
        prm[8], prm[9], prm[10], prm[11], prm[12], prm[13], prm[14], neg_zero, prm[16],
    )  # fmt: skip


@njit(inline="always")
def load_q(prm):
    """The tuple ``q`` of :func:`_params` (formats with a sign)."""
    return (prm[17], prm[18], prm[19], prm[20], prm[21], prm[22], prm[23])


@njit(inline="always")
def load_qu(prm):
    """The tuple ``q`` of :func:`_params` (unsigned formats)."""
    return (
        prm[17], prm[18], prm[19], prm[20], prm[21], prm[22], prm[23], prm[24], prm[25],
        prm[26], prm[27], prm[28],
    )  # fmt: skip


@njit(inline="always")
def load_o(prm):
    """The overflow codes of :func:`mode_overflow`."""
    return (prm[29], prm[30])


@njit(inline="always")
def load_sp(prm, use_magic):
    """The constants of :func:`stochastic_params` (the flag given, as in :func:`load_p`)."""
    return (use_magic, as_float(prm[32]), prm[33], prm[34], prm[35])


@njit(inline="always")
def load_bits(xs, j, lut, load, one):
    """Element ``j`` of ``xs`` as the source float's bits, by the kernel's ``load`` rule."""
    if load == LOAD_BF16:
        return shl(xs[j], 16, one)  # (in the word's width: Numba's << gives 64 bits)
    if load == LOAD_LUT:
        # (in hardware: the 256 KiB table measured 0.03-0.08 of the streaming limit, its
        # lookups a gather that misses L1; ``lut`` stays an argument, unused here)
        return half_to_single_bits(xs[j])
    return xs[j]
