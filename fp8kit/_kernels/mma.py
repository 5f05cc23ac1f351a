"""Tensor-core matrix products: the fused dot-add models of :mod:`fp8kit.mma` as Numba code.

One source serves both targets: the ``@njit`` scalar functions below are what the CPU
kernels call and what :mod:`fp8kit.cuda._mma` compiles for the GPU (numba.cuda compiles
``@njit`` functions it calls as device functions), so the two give the same bits.

The CPU kernels (:func:`kernel`) are fp8kit kernels like the others: compiled once per
machine to object code in fp8kit's cache, called through the checked entry, with their
matrices 1-D and the shapes beside them (:func:`fits`, :func:`matrix`).  Each model is a
kernel of its own: the model is a constant there, and the flattener
(:mod:`fp8kit._kernels.flatten`) writes every helper into the kernel (``@written_in``
ones too), so it holds the model's code alone, in one function.  On the GPU the model is
read from the parameters and the ``@written_in`` steps are device functions, called.

Every step is exact in float64 until the step's own rounding (:func:`round_out`):

* operands arrive as (significand, exponent) pairs, ``x = s * 2**e`` with ``1 <= |s| < 2``
  or, below the type's smallest normal, ``e`` clamped there and ``|s| < 1`` (MMA-Sim's
  normalisation); the product of two significands has at most 2 * 24 bits;
* a term aligned to the step's largest exponent and truncated to ``F`` fractional bits is
  an integer times ``2**-F`` below ``2**(F + 3)``; a sum of up to 65 such integers stays
  below 2**53 for ``F <= 43``, so the sum is exact;
* ``v = S * 2**(emax - F)`` is exact (a power-of-two scaling in float64's range).

NaN and Inf need no branch: they flow through the same float64 arithmetic as in the
published model (``trunc(inf) = inf``, ``inf * 0 = nan``, ``inf - inf = nan``), and the
caller writes NaN results as the canonical NaN of the output type.

The fast path (``kernel("fast")``) is the same rule for 8-bit (and narrower) operands,
proven exact in float32 instead: a product of two such values has at most 8 significant
bits, scaled by a power of two and truncated to ``F <= 13`` fractional bits it is an
integer below ``2**(F + 2)``, and ``products`` of them (at most 32) sum below ``2**20``.
Lanes whose step holds a non-finite operand or accumulator take the scalar step instead.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit, types

from .bits import (
    as_bits,
    as_float,
    chunk_range,
    fma,
    grid,
    larger,
    nvvm_rn,
    smaller,
    stack_buffer,
)
from .codec import Kernel, _array
from .flatten import written_in
from .registry import source_version


@njit(inline="always")
def ftrunc(x):
    """trunc(x) of a float64, exactly, in plain Numba for both targets (numba.cuda has no
    ``np.trunc``, and ``math.trunc`` gives an int on the CPU): below 2**52 through int64,
    the sign kept (-0.3 -> -0.0); above it every float64 is integral (Inf and NaN too)."""
    if abs(x) < 4503599627370496.0:
        return math.copysign(np.float64(np.int64(x)), x)
    return x


@njit(inline="always")
def ffloor(x):
    """floor(x) of a float64, exactly (from :func:`ftrunc`)."""
    t = ftrunc(x)
    return t - 1.0 if t > x else t


@njit(inline="always")
def frint(x):
    """x rounded to an integer, ties to even, exactly: adding and subtracting 2**52 rounds
    away the fraction in the default rounding mode (no multiply: nothing to contract)."""
    if abs(x) < 4503599627370496.0:
        c = math.copysign(4503599627370496.0, x)
        return math.copysign((x + c) - c, x)
    return x


#: ``a * b`` rounded on its own, never contracted into an FMA on a GPU (``mul.rn``, as
#: :mod:`fp8kit.cuda._scalar`'s ``fmul_rn``; a plain multiply on the CPU).  The models'
#: other multiplications are exact (powers of two, products of short significands), so
#: fusing one with an addition cannot change a bit; the products of the exact sum and of
#: the fp32 accumulators are not.
mul_rn = nvvm_rn("mul")


# -- model and rounding codes (fp8kit.mma.Instruction names them) ------------------------
FUSED = 0  # MMA-Sim's T-FDPA: products and c aligned, truncated, summed, rounded once
FUSED_SCALED = 1  # ST-FDPA: block-scaled, each product times its two scales
GROUPED = 2  # GST-FDPA: groups of products summed first, then scaled and aligned
TWO_STAGE = 3  # TR-FDPA (CDNA3 16-bit): products fused, then c at another precision
PAIRS = 4  # GTR-FDPA (CDNA3 fp8): even and odd products fused apart, then c
EXACT_SUM = 5  # E-FDPA (CDNA1): the exact sum rounded to fp32
FTZ_ADD = 6  # CDNA2: fp32 products and additions flushing subnormals
FMA = 7  # a chain of fused multiply-adds (fp64 units, AMD fp32/fp64)
EXACT = 8  # not hardware: every product and c summed exactly, rounded once to fp32
SEQUENTIAL = 9  # not hardware: fp32 fma chain in K order
PAIRWISE = 10  # not hardware: fp32 products summed by a balanced tree, then c

MODELS = {
    "fused": FUSED,
    "fused_scaled": FUSED_SCALED,
    "grouped": GROUPED,
    "two_stage": TWO_STAGE,
    "pairs": PAIRS,
    "exact_sum": EXACT_SUM,
    "ftz_add": FTZ_ADD,
    "fma": FMA,
    "exact": EXACT,
    "sequential": SEQUENTIAL,
    "pairwise": PAIRWISE,
}

RZ_F32 = 0  # truncate to float32's 23 fractional bits (exponent floor -126)
RZ_E8M13 = 1  # truncate to 13 fractional bits, float32's exponent range
RNE_F16 = 2  # nearest-even to float16
RNE_F32 = 3  # nearest-even to float32
ROUNDINGS = {"rz_f32": RZ_F32, "rz_e8m13": RZ_E8M13, "rne_f16": RNE_F16, "rne_f32": RNE_F32}

#: The canonical NaN of a result type by its size, as the GPU writes it: float32
#: 0x7FFFFFFF, float16 and bfloat16 0x7FFF, float8 0x7F.
CANONICAL_NAN = {4: np.uint32(0x7FFFFFFF), 2: np.uint16(0x7FFF), 1: np.uint8(0x7F)}

#: Exponent of zero terms where the model takes them out of every maximum.
NO_EXP = -999

# Layout of the int64 parameter vector the kernels read (one compiled kernel serves every
# instruction: the model is data read at run time).
P_MODEL, P_L, P_F, P_F2, P_RHO, P_EZERO, P_GROUP, P_NC, P_BLOCK, P_ESC, P_KINST = range(11)
P_FLUSH_A, P_FLUSH_B, P_SCALED, P_F32OPS, P_PAIRW, P_ESS, P_LEN = 11, 12, 13, 14, 15, 16, 17

SCRATCH = 80  # doubles of scratch per thread (the exact sum's expansion, the pairwise tree)


@njit(inline="always")
def pow2(k):
    """``2.0**k`` for an integer ``k`` in float64's normal range, from the bits."""
    return as_float(np.uint64((k + 1023) & 0x7FF) << np.uint64(52))


@njit(inline="always")
def exponent_of(x):
    """floor(log2|x|) of a finite nonzero float64 (normal or subnormal)."""
    e = np.int64((as_bits(x) >> np.uint64(52)) & np.uint64(0x7FF))
    if e == 0:  # subnormal: scale into the normal range first
        return (
            np.int64((as_bits(x * 18014398509481984.0) >> np.uint64(52)) & np.uint64(0x7FF)) - 1077
        )
    return e - 1023


@njit(inline="always")
def normalize(x, esub):
    """MMA-Sim's (s, e): ``x = s * 2**e``, ``1 <= |s| < 2``, or ``e = esub`` and ``|s| < 1``
    below the smallest normal; zero gives ``(0, esub)``; Inf and NaN give ``(x, -1)`` as C's
    frexp does."""
    if x == 0.0:
        return x, esub
    if x != x or x - x != 0.0:
        return x, np.int64(-1)
    e = exponent_of(x)
    if e < esub:
        e = esub
    return x * pow2(-e), e


@njit(inline="always")
def round_out(v, rho):
    """A step's exact float64 result rounded to its output: float64 holding a float32 or
    float16 value (Inf where it overflows, NaN kept)."""
    if v != v or v == 0.0 or v - v != 0.0:
        return v
    a = abs(v)
    if rho == RNE_F32:
        return np.float64(np.float32(v))
    if rho == RNE_F16:
        e = exponent_of(a)
        q = pow2((e if e > -14 else -14) - 10)
        r = frint(v / q) * q
        if abs(r) >= 65536.0:
            return math.copysign(math.inf, v)
        return r
    mbits = 23 if rho == RZ_F32 else 13
    e = exponent_of(a)
    q = pow2((e if e > -126 else -126) - mbits)
    r = ftrunc(v / q) * q
    return np.float64(np.float32(r))


@njit(inline="always")
def quiet(x):
    """``x``, or float64's quiet NaN (0x7FF8000000000000) where ``x`` is a NaN.  Which NaN
    an invalid operation leaves (x86's default NaN is negative; of two NaN operands,
    either) depends on how a compiler orders the operations: the CPU kernel of a model and
    its GPU twin, compiled apart, differed in the sign.  The models whose output is the
    canonical NaN anyway (the fused, block-scaled and CDNA3 steps) return this one."""
    return x if x == x else math.nan


@njit(inline="always")
def aligned(s, e, emax, f):
    """One term aligned to ``emax`` and truncated to ``f`` fractional bits, times 2**f."""
    d = e - emax + f
    if d < -1000:  # (2**d underflows; the term truncates to zero anyway, Inf and NaN kept)
        return ftrunc(s * pow2(-1000))
    return ftrunc(s * pow2(d))


@written_in
def step_fused(sa, ea, sb, eb, m, n, k0, length, c, p, ssa, esa, ssb, esb):
    """T-FDPA / ST-FDPA: ``length`` products of row m of A and row n of B^T from k0, and c,
    aligned to their largest exponent (zero terms take ``p[P_EZERO]``), truncated to F
    fractional bits, summed exactly and rounded once.  (ssa, esa), (ssb, esb): the two
    block scales' (s, e), (1, 0) where there are none."""
    f = p[P_F]
    ezero = p[P_EZERO]
    cs, ce = normalize(c, p[P_ESC])
    if cs == 0.0:
        ce = ezero
    emax = ce
    for i in range(length):
        s = sa[m, k0 + i] * sb[n, k0 + i] * ssa * ssb
        e = ea[m, k0 + i] + eb[n, k0 + i] + esa + esb
        if s == 0.0:
            e = ezero
        if e > emax:
            emax = e
    total = aligned(cs, ce, emax, f)
    for i in range(length):
        s = sa[m, k0 + i] * sb[n, k0 + i] * ssa * ssb
        e = ea[m, k0 + i] + eb[n, k0 + i] + esa + esb
        if s == 0.0:
            e = ezero
        total += aligned(s, e, emax, f)
    return quiet(round_out(total * pow2(emax - f), p[P_RHO]) + 0.0)


@written_in
def step_grouped(va, vb, m, n, k0, length, c, p, scale_a, scale_b):
    """GST-FDPA: groups of ``p[P_GROUP]`` products summed in float32 (exact for fp4), each
    group times its block's two scales with the scales' exponent as the group's, then
    aligned with c, truncated to F fractional bits, summed, rounded once.  A group whose
    products are all zero, or whose scale is zero, takes ``p[P_EZERO]``."""
    f = p[P_F]
    ezero = p[P_EZERO]
    g = p[P_GROUP]
    block = p[P_BLOCK]
    cs, ce = normalize(c, -126)
    if cs == 0.0:
        ce = ezero
    emax = ce
    for pass_ in range(2):
        total = 0.0 if pass_ == 0 else aligned(cs, ce, emax, f)
        for j in range(0, length, g):
            acc = np.float32(0.0)
            allzero = True
            for i in range(g):
                prod = np.float32(va[m, k0 + j + i]) * np.float32(vb[n, k0 + j + i])
                allzero = allzero and prod == 0.0
                acc += prod
            kb = (k0 + j) // block
            s1, e1 = normalize(scale_a[m, kb], p[P_ESS])
            s2, e2 = normalize(scale_b[n, kb], p[P_ESS])
            ss = s1 * s2
            es = e1 + e2
            if allzero or ss == 0.0:
                es = ezero
            if pass_ == 0:
                if es > emax:
                    emax = es
            else:
                total += aligned(np.float64(acc) * ss, es, emax, f)
    return quiet(round_out(total * pow2(emax - f), p[P_RHO]) + 0.0)


@njit(inline="always")
def fused_sum(sa, ea, sb, eb, m, n, k0, length, stride, f, overflow_inf):
    """MMA-Sim's truncated fused sum of products k0, k0+stride, ...: (S, emax) with the sum
    ``S * 2**-f`` relative to ``2**emax``; zero products take NO_EXP."""
    emax = np.int64(NO_EXP)
    for i in range(0, length, stride):
        s = sa[m, k0 + i] * sb[n, k0 + i]
        e = ea[m, k0 + i] + eb[n, k0 + i]
        if overflow_inf and (e + (1 if abs(s) >= 2.0 else 0)) >= 128:
            s = s * math.inf
        if s == 0.0:
            e = np.int64(NO_EXP)
        if e > emax:
            emax = e
    total = 0.0
    for i in range(0, length, stride):
        s = sa[m, k0 + i] * sb[n, k0 + i]
        e = ea[m, k0 + i] + eb[n, k0 + i]
        if overflow_inf and (e + (1 if abs(s) >= 2.0 else 0)) >= 128:
            s = s * math.inf
        if s == 0.0:
            e = np.int64(NO_EXP)
        total += aligned(s, e, emax, f)
    return total * pow2(-f), emax


@njit(inline="always")
def scaled_floor(x, k, bits):
    """floor(x * 2**k) at ``bits`` fractional bits: floor(x * 2**(k + bits)) * 2**-bits."""
    d = k + bits
    if d < -1000:
        return ffloor(x * pow2(-1000)) * pow2(-bits)
    return ffloor(x * pow2(d)) * pow2(-bits)


@written_in
def step_two_stage(sa, ea, sb, eb, m, n, k0, length, c, p, model):
    """TR-FDPA (CDNA3 16-bit and xf32) and GTR-FDPA (CDNA3 fp8, even and odd products
    apart): the products fused at F bits, then c and the dot product aligned, rounded
    down to F2 + 1 and F bits, summed and rounded down to F2 bits, then to fp32."""
    f = p[P_F]
    f2 = p[P_F2]
    if model == PAIRS:
        s_even, e_even = fused_sum(sa, ea, sb, eb, m, n, k0, length, 2, f, False)
        s_odd, e_odd = fused_sum(sa, ea, sb, eb, m, n, k0 + 1, length - 1, 2, f, False)
        e_dot = e_even if e_even > e_odd else e_odd
        s_dot = scaled_floor(s_even, e_even - e_dot, f) + scaled_floor(s_odd, e_odd - e_dot, f)
    else:
        s_dot, e_dot = fused_sum(sa, ea, sb, eb, m, n, k0, length, 1, f, True)
    cs, ce = normalize(c, -126)
    emax = e_dot if e_dot > ce else ce
    s_dot = scaled_floor(s_dot, e_dot - emax, f2 + 1)
    cs = scaled_floor(cs, ce - emax, f)
    if model == PAIRS and ce < emax - f - 1:
        cs = 0.0
    s, e = normalize((s_dot + cs) * pow2(emax), -126)
    s = ffloor(s * pow2(f2)) * pow2(-f2)
    if s != s or s - s != 0.0:
        return quiet(np.float64(np.float32(s)))
    return np.float64(np.float32(s * pow2(e)))


# -- exact sums: Shewchuk's nonoverlapping expansions ------------------------------------
@njit(inline="always")
def two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@written_in
def expansion_add(x, buf, count):
    """Add x to the expansion buf[:count] (increasing magnitude, nonoverlapping) exactly;
    returns the new count (zero components dropped)."""
    q = x
    j = 0
    for i in range(count):
        q, h = two_sum(q, buf[i])
        if h != 0.0:
            buf[j] = h
            j += 1
    if q != 0.0 or j == 0:
        buf[j] = q
        j += 1
    return j


@written_in
def expansion_to_f32(buf, count):
    """The expansion's exact value rounded once to float32 (nearest-even), as float64."""
    x = buf[count - 1]
    if count == 1 or x != x or x - x != 0.0:
        return np.float64(np.float32(x))
    r = np.float64(np.float32(x))
    if r == x:
        return r  # exactly representable: the rest is below half its ulp
    if r - r != 0.0:
        # overflow: only x exactly at the threshold (float32's max plus half its ulp, a
        # tie rounded to even, up) comes back below it with a rest of the other sign
        if abs(x) != 3.4028235677973366e38 or (buf[count - 2] > 0.0) == (x > 0.0):
            return r
        return math.copysign(3.4028234663852886e38, x)
    # x lies between two float32 values; only a tie needs the rest's sign to decide
    other = np.float64(np.float32(x + (x - r)))  # the float32 on the other side of x
    # (not a tie: either the neighbour on the other side or r itself, then harmless)
    if abs(x - r) != abs(other - x):
        return r
    rest = buf[count - 2]
    up = r if abs(r) > abs(other) else other  # away from zero
    down = other if up == r else r
    if (rest > 0.0) == (x > 0.0):
        return up
    return down


@written_in
def exact_dot(va, vb, m, n, k0, length, c, buf):
    """c plus every product of the slice, summed exactly (products split by fma), rounded
    once to float32; NaN/Inf as IEEE arithmetic gives them."""
    special = c
    count = 0
    if c != 0.0:
        count = expansion_add(c, buf, count)
    for i in range(length):
        a = va[m, k0 + i]
        b = vb[n, k0 + i]
        prod = mul_rn(a, b)  # (inexact: never fused with the sums below)
        special += prod
        if prod != 0.0:
            err = fma(a, b, -prod)
            count = expansion_add(prod, buf, count)
            if err != 0.0:
                count = expansion_add(err, buf, count)
        if count > SCRATCH - 4:  # (never reached for float32 data: 2**8 bits of range)
            count = compress(buf, count)
    if special != special or special - special != 0.0:
        return np.float64(np.float32(special))
    if count == 0:
        return 0.0
    return expansion_to_f32(buf, compress(buf, count))


@written_in
def compress(buf, count):
    """Shewchuk's Compress (both sweeps): the same value as buf[:count] in nonadjacent
    components of increasing magnitude, the largest within one ulp of the whole sum (which
    :func:`expansion_to_f32` needs: a nonoverlapping expansion alone can hold a rest as
    large as its top component's lowest set bit)."""
    if count <= 1:
        return count
    q = buf[count - 1]
    bottom = count - 1
    for i in range(count - 2, -1, -1):
        s, h = two_sum(q, buf[i])
        if h != 0.0:
            buf[bottom] = s
            bottom -= 1
            q = h
        else:
            q = s
    buf[bottom] = q
    top = 0
    for i in range(bottom + 1, count):
        s, h = two_sum(buf[i], q)
        if h != 0.0:
            buf[top] = h
            top += 1
        q = s
    buf[top] = q
    return top + 1


@njit(inline="always")
def flush32(x, keep_sign):
    """x with float32 subnormals (|x| < 2**-126) replaced by zero."""
    if abs(x) < 1.1754943508222875e-38:
        return x * 0.0 if keep_sign else 0.0
    return x


@njit(inline="always")
def ftz_product(va, vb, m, n, k, p):
    """CDNA2's product: inputs below their smallest normal flushed to +0, the fp32 product
    flushed likewise keeping its sign."""
    x = va[m, k]
    y = vb[n, k]
    x = 0.0 if abs(x) < pow2(p[P_FLUSH_A]) else x
    y = 0.0 if abs(y) < pow2(p[P_FLUSH_B]) else y
    return np.float32(flush32(np.float64(np.float32(x) * np.float32(y)), True))


@njit(inline="always")
def ftz_add(x, y):
    return np.float32(flush32(np.float64(x + y), True))


@written_in
def step_ftz(va, vb, m, n, k0, length, c, p):
    """CDNA2: products in fp32 from inputs with subnormals flushed, added by pairs (P = 2)
    or pairs of pairs (P = 4) into c with fp32 additions flushing subnormal results; c is
    flushed to +0 once, at the instruction's start."""
    width = p[P_PAIRW]
    acc = np.float32(flush32(c, False))
    for j in range(0, length, width):
        s = ftz_add(ftz_product(va, vb, m, n, k0 + j, p), ftz_product(va, vb, m, n, k0 + j + 1, p))
        if width == 4:
            s2 = ftz_add(
                ftz_product(va, vb, m, n, k0 + j + 2, p), ftz_product(va, vb, m, n, k0 + j + 3, p)
            )
            s = ftz_add(s, s2)
        acc = ftz_add(acc, s)
    return np.float64(acc)


@written_in
def step_fma(va, vb, m, n, k0, length, c, p):
    """A chain of fused multiply-adds in float64 (or float32 where p[P_F32OPS])."""
    if p[P_F32OPS]:  # (a variable of its own: one type per variable, see native.py)
        acc32 = np.float32(c)
        for i in range(length):
            acc32 = fma(np.float32(va[m, k0 + i]), np.float32(vb[n, k0 + i]), acc32)
        return np.float64(acc32)
    acc = c
    for i in range(length):
        acc = fma(va[m, k0 + i], vb[n, k0 + i], acc)
    return acc


@written_in
def pairwise_dot(va, vb, m, n, k0, length, c, buf):
    """fp32 products summed by a balanced binary tree (a binary counter: partial sums of
    2**j products meet their equal), the tree's roots from the smallest, then c."""
    count = 0
    for i in range(length):
        v = mul_rn(np.float32(va[m, k0 + i]), np.float32(vb[n, k0 + i]))  # (not fused)
        j = i
        # the lowest set bits of i + 1 say how many equal-sized sums this one completes
        while j & 1:
            count -= 1
            v = np.float32(np.float32(buf[count]) + v)
            j >>= 1
        buf[count] = v
        count += 1
    total = np.float32(0.0)
    first = True
    for i in range(count - 1, -1, -1):
        if first:
            total = np.float32(buf[i])
            first = False
        else:
            total = np.float32(np.float32(buf[i]) + total)
    if first:
        return np.float64(np.float32(c))
    return np.float64(np.float32(np.float32(c) + total))


@written_in
def step(sa, ea, sb, eb, va, vb, m, n, k0, length, c, p, scale_a, scale_b, buf, model):
    """One instruction step (one fused dot-add of the model ``model``, ``p[P_MODEL]``) for
    output (m, n).  The CPU kernels pass the model as a constant (one kernel per model,
    :func:`kernel`): written into a kernel (:mod:`fp8kit._kernels.flatten`), only its
    branch is compiled."""
    if model == FUSED:
        return step_fused(sa, ea, sb, eb, m, n, k0, length, c, p, 1.0, 0, 1.0, 0)
    if model == FUSED_SCALED:
        kb = k0 // p[P_BLOCK]
        s1, e1 = normalize(scale_a[m, kb], p[P_ESS])
        s2, e2 = normalize(scale_b[n, kb], p[P_ESS])
        return step_fused(sa, ea, sb, eb, m, n, k0, length, c, p, s1, e1, s2, e2)
    if model == GROUPED:
        return step_grouped(va, vb, m, n, k0, length, c, p, scale_a, scale_b)
    if model == TWO_STAGE or model == PAIRS:
        return step_two_stage(sa, ea, sb, eb, m, n, k0, length, c, p, model)
    if model == FTZ_ADD:
        return step_ftz(va, vb, m, n, k0, length, c, p)
    if model == FMA or model == SEQUENTIAL:
        return step_fma(va, vb, m, n, k0, length, c, p)
    if model == PAIRWISE:
        return pairwise_dot(va, vb, m, n, k0, length, c, buf)
    return exact_dot(va, vb, m, n, k0, length, c, buf)  # EXACT_SUM, EXACT


@written_in
def output(sa, ea, sb, eb, va, vb, m, n, k, c, p, scale_a, scale_b, gscale_a, gscale_b, buf,
           model):  # fmt: skip
    """One output of the chained product: the instruction over K in steps of L, its result
    fed back as c; with promotion (p[P_NC] > 0) the instruction's accumulator restarts at
    +0 every NC elements and is added into an fp32 accumulator (``fma(sa * sb, partial,
    acc)``, sa * sb rounded to fp32: the group's scales, 1 where there are none)."""
    length = p[P_L]
    nc = p[P_NC]
    # (one loop for both, so that a kernel holds the model's step once: without promotion
    # one group of all of K, fed c)
    span = nc if nc else k
    acc = c
    acc32 = np.float32(c)
    for g in range(k // nc if nc else 1):
        part = acc if nc == 0 else 0.0
        for k0 in range(g * span, (g + 1) * span, length):
            part = step(sa, ea, sb, eb, va, vb, m, n, k0, length, part, p, scale_a, scale_b,
                        buf, model)  # fmt: skip
        if nc == 0:
            acc = part
        else:
            # (a single column holds every group's scales: prepare's default without them)
            ga = gscale_a[m, g if gscale_a.shape[1] > 1 else 0]
            gb = gscale_b[n, g if gscale_b.shape[1] > 1 else 0]
            s = np.float32(np.float32(ga) * np.float32(gb))
            acc32 = fma(s, np.float32(part), acc32)
    return acc if nc == 0 else np.float64(acc32)


@njit(inline="always")
def fits(a, dims, i):
    """Whether ``dims[2 i], dims[2 i + 1]`` (the ``i``-th matrix's shape, see
    :func:`fp8kit.mma._engine.shapes`) holds as many elements as the 1-D array ``a``."""
    return dims[2 * i] >= 0 and dims[2 * i + 1] >= 0 and dims[2 * i] * dims[2 * i + 1] == a.size


@njit(inline="always")
def matrix(a, dims, i):
    """The 1-D array ``a`` as the ``i``-th matrix of ``dims`` (checked by :func:`fits`)."""
    return grid(a, dims[2 * i], dims[2 * i + 1])


#: What a kernel returns where its shapes do not fit its arrays (it writes nothing).
BAD_SHAPES = 1


def _generic(parallel, model):
    # (closed over: Numba's own cache, where the kernel runs by its dispatcher, then keys
    # it by every kernel source; parallel is ignored, see fp8kit._kernels.codec.Kernel)
    version = source_version()

    def gemm_generic(sa1, ea1, sb1, eb1, va1, vb1, c1, p, scale_a1, scale_b1, gscale_a1,
                     gscale_b1, out1, dims, spec):  # fmt: skip
        """Every output of rows of chunk range ``spec`` (see
        :func:`fp8kit._parallel.chunk_spec`) by the scalar model: out[m, n] for A rows m,
        B^T rows n (the arrays 1-D, ``dims`` their shapes)."""
        if version == 0 or parallel is None:  # never true (see above)
            return BAD_SHAPES
        if not (fits(sa1, dims, 0) & fits(ea1, dims, 1) & fits(sb1, dims, 2)
                & fits(eb1, dims, 3) & fits(va1, dims, 4) & fits(vb1, dims, 5)
                & fits(c1, dims, 6) & fits(scale_a1, dims, 7) & fits(scale_b1, dims, 8)
                & fits(gscale_a1, dims, 9) & fits(gscale_b1, dims, 10)
                & fits(out1, dims, 11)):  # fmt: skip
            return BAD_SHAPES
        sa, ea, sb, eb = matrix(sa1, dims, 0), matrix(ea1, dims, 1), matrix(sb1, dims, 2), \
            matrix(eb1, dims, 3)  # fmt: skip
        va, vb, c = matrix(va1, dims, 4), matrix(vb1, dims, 5), matrix(c1, dims, 6)
        scale_a, scale_b = matrix(scale_a1, dims, 7), matrix(scale_b1, dims, 8)
        gscale_a, gscale_b = matrix(gscale_a1, dims, 9), matrix(gscale_b1, dims, 10)
        out = matrix(out1, dims, 11)
        nchunks, first, stop = chunk_range(spec)
        rows = out.shape[0]
        buf = stack_buffer(SCRATCH, np.float64)
        for m in range(rows * first // nchunks, rows * stop // nchunks):
            for n in range(out.shape[1]):
                out[m, n] = output(
                    sa, ea, sb, eb, va, vb, m, n, va.shape[1], c[m, n], p,
                    scale_a, scale_b, gscale_a, gscale_b, buf, model,
                )  # fmt: skip
        return 0

    return gemm_generic


def _accumulate(parallel, model):
    # (closed over: Numba's own cache, where the kernel runs by its dispatcher, then keys
    # it by every kernel source; parallel is ignored, see fp8kit._kernels.codec.Kernel)
    version = source_version()

    def gemm_accumulate(va1, vb1, c1, p, out1, dims, spec):
        """The accumulators that are not hardware (EXACT, SEQUENTIAL, PAIRWISE: one step
        over all of K) for rows of chunk range ``spec``: a kernel of their own, so that
        using them compiles none of the instruction models."""
        if version == 0 or parallel is None:  # never true (see above)
            return BAD_SHAPES
        if not (fits(va1, dims, 0) & fits(vb1, dims, 1) & fits(c1, dims, 2)
                & fits(out1, dims, 3)):  # fmt: skip
            return BAD_SHAPES
        va, vb, c, out = matrix(va1, dims, 0), matrix(vb1, dims, 1), matrix(c1, dims, 2), \
            matrix(out1, dims, 3)  # fmt: skip
        nchunks, first, stop = chunk_range(spec)
        rows = out.shape[0]
        k = va.shape[1]
        buf = stack_buffer(SCRATCH, np.float64)
        for m in range(rows * first // nchunks, rows * stop // nchunks):
            for n in range(out.shape[1]):
                x = c[m, n]
                if model == EXACT:
                    out[m, n] = exact_dot(va, vb, m, n, 0, k, x, buf)
                elif model == SEQUENTIAL:
                    out[m, n] = step_fma(va, vb, m, n, 0, k, x, p)
                else:
                    out[m, n] = pairwise_dot(va, vb, m, n, 0, k, x, buf)
        return 0

    return gemm_accumulate


def _normalize_all(parallel):
    # (closed over: Numba's own cache, where the kernel runs by its dispatcher, then keys
    # it by every kernel source; parallel is ignored, see fp8kit._kernels.codec.Kernel)
    version = source_version()

    def normalize_all(v, esub, s, e):
        """:func:`normalize` of every element of the 1-D float64 array ``v`` into ``s`` and
        ``e``: the operands' (s, e) arrays and per-code tables take the kernels' own rule."""
        if not (version != 0 and parallel is not None and s.size == v.size and e.size == v.size):
            return BAD_SHAPES
        for i in range(v.size):
            s[i], e[i] = normalize(v[i], esub)
        return 0

    return normalize_all


#: Columns of B one pass of the fast kernel keeps in its lane arrays (five arrays of 128
#: float32/float64 stay in L1 with the rows of B they read).
LANES = 128
#: Rows of A one pass of the fast kernel computes together (each load of B serves them
#: all: one thread 20 -> 12.5 ms from 4 rows to 8 on 64x512x2048, 16 rows 11.4 ms).  Rows
#: past the end of a chunk are computed on its last row's data and dropped, so a product
#: of fewer rows costs as much as one of 8.
ROWS = 8
LANE_BUFFER = ROWS * LANES  # (elements of each lane array, on the kernel's stack)
TINY32 = 1.1754943508222875e-38  # float32's smallest normal, 2**-126
HUGE32 = 3.402823669209385e38  # 2**128, float32's overflow for a truncated result


def _fast(parallel, lanes):
    # (closed over: Numba's own cache, where the kernel runs by its dispatcher, then keys
    # it by every kernel source; parallel is ignored, see fp8kit._kernels.codec.Kernel)
    version = source_version()

    def gemm_fast(va1, ea1, vb1, eb1, bad_a1, bad_b1, zero_a1, zero_b1, sa1, esa1, sb1, esb1,
                  c1, p, gscale_a1, gscale_b1, out1, dims, spec):  # fmt: skip
        """The fused model (T-FDPA) for rows of chunk range ``spec``, lanes across columns
        of B, in float32 lanes (8-bit operands, F <= 13, <= 32 products: every term and sum
        exact in float32) or float64 lanes (operands of at most 26 significant bits, sums
        below 2**53): ``lanes``, the type of va, vb and the lane sums.

        va, ea: A's values and exponents (M, K) in the lanes' type: non-finite values as 0,
        zero values with exponent -1000 (below every maximum); vb, eb: the same of B (K, N).
        bad_a (M, S), bad_b (S, N): whether step s of that row / column holds a non-finite
        operand; those lanes, and lanes whose accumulator is not finite, take the scalar
        step on the (significand, exponent) arrays sa, esa (M, K), sb, esb (N, K).  zero_a
        (M, S), zero_b (S, N): whether step s of the row / column holds a zero, that is
        whether a product of the step is zero: zero terms take the exponent p[P_EZERO] in
        the maximum.  gscale_a (M, G), gscale_b (N, G): the promotion's per-group scales
        (one column: the same for every group).  Every array 1-D, ``dims`` their shapes.
        """
        if version == 0 or parallel is None:  # never true (see above)
            return BAD_SHAPES
        if not (fits(va1, dims, 0) & fits(ea1, dims, 1) & fits(vb1, dims, 2)
                & fits(eb1, dims, 3) & fits(bad_a1, dims, 4) & fits(bad_b1, dims, 5)
                & fits(zero_a1, dims, 6) & fits(zero_b1, dims, 7)
                & fits(sa1, dims, 8) & fits(esa1, dims, 9) & fits(sb1, dims, 10)
                & fits(esb1, dims, 11) & fits(c1, dims, 12)
                & fits(gscale_a1, dims, 13) & fits(gscale_b1, dims, 14)
                & fits(out1, dims, 15)):  # fmt: skip
            return BAD_SHAPES
        va, ea, vb, eb = matrix(va1, dims, 0), matrix(ea1, dims, 1), matrix(vb1, dims, 2), \
            matrix(eb1, dims, 3)  # fmt: skip
        bad_a, bad_b = matrix(bad_a1, dims, 4), matrix(bad_b1, dims, 5)
        zero_a, zero_b = matrix(zero_a1, dims, 6), matrix(zero_b1, dims, 7)
        sa, esa, sb, esb = matrix(sa1, dims, 8), matrix(esa1, dims, 9), \
            matrix(sb1, dims, 10), matrix(esb1, dims, 11)  # fmt: skip
        c, gscale_a, gscale_b = matrix(c1, dims, 12), matrix(gscale_a1, dims, 13), \
            matrix(gscale_b1, dims, 14)  # fmt: skip
        out = matrix(out1, dims, 15)
        (nchunks, first, stop), rows, cols = chunk_range(spec), out.shape[0], out.shape[1]
        k = va.shape[1]
        length = p[P_L]
        f = p[P_F]
        nc = p[P_NC]
        ezero = p[P_EZERO]
        # ROWS rows of A at a time share each load of B (ROWS x LANES lane arrays)
        emax = grid(stack_buffer(LANE_BUFFER, np.int16), ROWS, LANES)
        scale = grid(stack_buffer(LANE_BUFFER, lanes), ROWS, LANES)
        total = grid(stack_buffer(LANE_BUFFER, lanes), ROWS, LANES)
        acc = grid(stack_buffer(LANE_BUFFER, np.float64), ROWS, LANES)
        prev = grid(stack_buffer(LANE_BUFFER, np.float64), ROWS, LANES)
        ei = grid(stack_buffer(LANE_BUFFER, np.int64), ROWS, LANES)
        scalar = grid(stack_buffer(LANE_BUFFER, np.bool_), ROWS, LANES)
        acc32 = grid(stack_buffer(LANE_BUFFER, np.float32), ROWS, LANES)
        esc = p[P_ESC]
        rho = p[P_RHO]
        rz = rho == RZ_F32 or rho == RZ_E8M13
        keep = ~np.uint64((1 << (52 - (23 if rho == RZ_F32 else 13))) - 1)
        # products of 8-bit values lie at or above 2**-28, of 16-bit ones at or above 2**-300
        low = -60 if lanes is np.float32 else -400
        r_first = rows * first // nchunks
        r_stop = rows * stop // nchunks
        for m0 in range(r_first, r_stop, ROWS):
            # rows past the chunk's end repeat its last row (computed, never stored)
            m1 = smaller(m0 + 1, r_stop - 1)
            m2 = smaller(m0 + 2, r_stop - 1)
            m3 = smaller(m0 + 3, r_stop - 1)
            m4 = smaller(m0 + 4, r_stop - 1)
            m5 = smaller(m0 + 5, r_stop - 1)
            m6 = smaller(m0 + 6, r_stop - 1)
            m7 = smaller(m0 + 7, r_stop - 1)
            for n0 in range(0, cols, LANES):
                nb = smaller(LANES, cols - n0)
                for r in range(ROWS):
                    mr = smaller(m0 + r, r_stop - 1)
                    for v in range(nb):
                        acc[r, v] = 0.0 if nc else c[mr, n0 + v]
                        acc32[r, v] = np.float32(c[mr, n0 + v])
                for s in range(k // length):
                    k0 = s * length
                    emax[:, :nb] = -1000.0
                    for i in range(length):
                        e0 = ea[m0, k0 + i]
                        e1 = ea[m1, k0 + i]
                        e2 = ea[m2, k0 + i]
                        e3 = ea[m3, k0 + i]
                        e4 = ea[m4, k0 + i]
                        e5 = ea[m5, k0 + i]
                        e6 = ea[m6, k0 + i]
                        e7 = ea[m7, k0 + i]
                        for v in range(nb):
                            # (int16 exponents: twice the lanes of float32 per instruction)
                            eb_ = eb[k0 + i, n0 + v]
                            emax[0, v] = np.int16(larger(emax[0, v], np.int16(e0 + eb_)))
                            emax[1, v] = np.int16(larger(emax[1, v], np.int16(e1 + eb_)))
                            emax[2, v] = np.int16(larger(emax[2, v], np.int16(e2 + eb_)))
                            emax[3, v] = np.int16(larger(emax[3, v], np.int16(e3 + eb_)))
                            emax[4, v] = np.int16(larger(emax[4, v], np.int16(e4 + eb_)))
                            emax[5, v] = np.int16(larger(emax[5, v], np.int16(e5 + eb_)))
                            emax[6, v] = np.int16(larger(emax[6, v], np.int16(e6 + eb_)))
                            emax[7, v] = np.int16(larger(emax[7, v], np.int16(e7 + eb_)))
                    for r in range(ROWS):
                        mr = smaller(m0 + r, r_stop - 1)
                        za = zero_a[mr, s] != 0
                        for v in range(nb):
                            # (written as selects, without calls: the loop vectorizes)
                            e = np.int64(emax[r, v])
                            e = larger(e, ezero) if za | (zero_b[s, n0 + v] != 0) else e
                            x = acc[r, v]
                            # x is a float32 or float16 value: a normal float64, its exponent
                            # in the bits (Inf and NaN give 1024: those lanes go the scalar way)
                            ex = np.int64((as_bits(x) >> np.uint64(52)) & np.uint64(0x7FF)) - 1023
                            ec = larger(ex, esc) if x != 0.0 else ezero
                            e = larger(e, ec)
                            ei[r, v] = e
                            # (no nonzero product lies below 2**low: the clamp only keeps the
                            # scale finite in the lanes' type where every product is zero)
                            scale[r, v] = pow2(f - larger(e, low))
                            total[r, v] = 0.0
                    for i in range(length):
                        a0 = va[m0, k0 + i]
                        a1 = va[m1, k0 + i]
                        a2 = va[m2, k0 + i]
                        a3 = va[m3, k0 + i]
                        a4 = va[m4, k0 + i]
                        a5 = va[m5, k0 + i]
                        a6 = va[m6, k0 + i]
                        a7 = va[m7, k0 + i]
                        for v in range(nb):
                            b_ = vb[k0 + i, n0 + v]
                            total[0, v] += np.trunc(a0 * b_ * scale[0, v])
                            total[1, v] += np.trunc(a1 * b_ * scale[1, v])
                            total[2, v] += np.trunc(a2 * b_ * scale[2, v])
                            total[3, v] += np.trunc(a3 * b_ * scale[3, v])
                            total[4, v] += np.trunc(a4 * b_ * scale[4, v])
                            total[5, v] += np.trunc(a5 * b_ * scale[5, v])
                            total[6, v] += np.trunc(a6 * b_ * scale[6, v])
                            total[7, v] += np.trunc(a7 * b_ * scale[7, v])
                    for r in range(ROWS):
                        mr = smaller(m0 + r, r_stop - 1)
                        special = bad_a[mr, s] != 0
                        if rz:
                            # truncation toward zero to mbits fractional bits is a mask on the
                            # float64's bits, right for results that are normal float32 values;
                            # subnormal and overflowing results, non-finite operands and
                            # accumulators go the scalar way below
                            for v in range(nb):
                                x = acc[r, v]
                                prev[r, v] = x
                                e = ei[r, v]
                                t = np.trunc(x * pow2(f - e))
                                d = (np.float64(total[r, v]) + t) * pow2(e - f)
                                a = abs(d)
                                # (bitwise, not short-circuit: branches would stop the loop
                                # from vectorizing)
                                bad = special | (bad_b[s, n0 + v] != 0) | (x - x != 0.0)
                                scalar[r, v] = bad | ((a < TINY32) & (a != 0.0)) | (a >= HUGE32)
                                acc[r, v] = as_float(as_bits(d) & keep) + 0.0
                        else:
                            for v in range(nb):
                                prev[r, v] = acc[r, v]
                                scalar[r, v] = True
                        for v in range(nb):
                            if not scalar[r, v]:
                                continue
                            x = prev[r, v]
                            if special or bad_b[s, n0 + v] or x - x != 0.0:
                                acc[r, v] = step_fused(
                                    sa, esa, sb, esb, mr, n0 + v, k0, length, x, p, 1.0, 0, 1.0, 0
                                )
                                continue
                            e = ei[r, v]
                            d = (np.float64(total[r, v]) + aligned(x, 0, e, f)) * pow2(e - f)
                            acc[r, v] = round_out(d, p[P_RHO]) + 0.0
                    if nc and (k0 + length) % nc == 0:
                        # promotion: acc32 = fma(RN32(sa * sb), partial, acc32), as in output()
                        g = (k0 + length) // nc - 1
                        ga = g if gscale_a.shape[1] > 1 else 0
                        gb = g if gscale_b.shape[1] > 1 else 0
                        for r in range(ROWS):
                            mr = smaller(m0 + r, r_stop - 1)
                            s_a = np.float32(gscale_a[mr, ga])
                            for v in range(nb):
                                s_ab = np.float32(s_a * np.float32(gscale_b[n0 + v, gb]))
                                acc32[r, v] = fma(s_ab, np.float32(acc[r, v]), acc32[r, v])
                                acc[r, v] = 0.0
                for r in range(smaller(ROWS, r_stop - m0)):
                    for v in range(nb):
                        out[m0 + r, n0 + v] = np.float64(acc32[r, v]) if nc else acc[r, v]
        return 0

    return gemm_fast


def _signature(*dtypes, outputs=1):
    """The kernel signature of ``dtypes`` (1-D C arrays; the last ``outputs`` written, ``p``
    an int64 array), then ``dims`` and the chunk argument: int64 result."""
    arrays = [_array(d, readonly=True) for d in dtypes[:-outputs]]
    arrays += [_array(d) for d in dtypes[-outputs:]]
    return types.int64(*arrays, _array(np.int64, readonly=True), types.intp)


def kernel(name: str, model: int = FUSED, lanes=None):
    """The compiled kernel ``name`` ("generic" and "accumulate" of the model ``model``,
    "fast" with ``lanes`` np.float32 or np.float64, "normalize"), run as native code from
    fp8kit's cache (see :class:`fp8kit._kernels.codec.Kernel`): its arguments are its
    function's, every matrix 1-D (``a.ravel()``), ``dims`` their shapes
    (:func:`fp8kit.mma._engine.shapes`), then the chunk argument; it returns
    :data:`BAD_SHAPES` where they do not fit.  One kernel per model: a product compiles
    its model's code alone (a first CDNA3 product with an empty cache took 7.3 s with
    every model in one kernel)."""
    return _kernel(name, int(model), lanes).build()


def prefetch(name: str, model: int = FUSED, lanes=None) -> None:
    """Start compiling :func:`kernel` ``(name, model, lanes)`` where it is not built: its
    front end now, its machine code on LLVM's worker thread while the caller goes on
    (:meth:`fp8kit._kernels.codec.Kernel.prefetch`).  A first fast product starts its
    kernel before the operands' tables, whose own kernel then compiles beside it."""
    _kernel(name, int(model), lanes).prefetch()


@functools.cache
def _kernel(name: str, model: int, lanes) -> Kernel:
    f64, i64 = np.float64, np.int64
    if name in ("generic", "accumulate") and model not in MODELS.values():
        raise ValueError(f"model is {model!r}; allowed: {sorted(MODELS.values())}")
    if name == "generic":
        sig = _signature(f64, i64, f64, i64, f64, f64, f64, i64, f64, f64, f64, f64, f64)
        make = functools.partial(_generic, model=int(model))
    elif name == "accumulate":
        sig = _signature(f64, f64, f64, i64, f64)
        make = functools.partial(_accumulate, model=int(model))
    elif name == "fast":
        u8 = np.uint8
        sig = _signature(lanes, np.int16, lanes, np.int16, u8, u8, u8, u8, f64, i64, f64,
                         i64, f64, i64, f64, f64, f64)  # fmt: skip
        make = functools.partial(_fast, lanes=lanes)
    else:
        ro = functools.partial(_array, readonly=True)
        sig = types.int64(ro(f64), types.int64, _array(f64), _array(i64))
        make = _normalize_all
    key = ("mma", name, int(model), str(lanes), source_version())
    built = Kernel(make, sig, key=key)
    # The fast kernel without Numba's function passes (LLVM's module pipeline alone, see
    # fp8kit._kernels.native._compile_in_one_library): LLVM's part of its first call
    # 0.78 -> 0.48 s, as fast (e4m3 and bfloat16 products, eight processes of each in
    # turns: docs/measurements.md).  The scalar models' gained 0.02-0.05 s: not worth a
    # second measurement of their speed.
    built.function_passes = name != "fast"
    return built
