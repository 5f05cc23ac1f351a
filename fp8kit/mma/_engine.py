"""Validation and operand preparation for the matrix-product kernels, and their launch.

Everything a kernel needs is computed here once per call in numpy (operand values, MMA-Sim's
(significand, exponent) pairs, the fast kernel's float32 views, a parameter vector), so the
kernels in :mod:`fp8kit._kernels.mma` see plain arrays only.  The CUDA twin takes the same
prepared arrays (:func:`prepare`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .. import _parallel
from .._kernels import mma as K
from ._types import SUB_BYTE, TYPES

#: The accumulators that are not hardware, by name (see :func:`fp8kit.matmul`).
ACCUMULATORS = ("exact", "fp32", "fp32-pairwise")
_ACC_MODEL = {"exact": K.EXACT, "fp32": K.SEQUENTIAL, "fp32-pairwise": K.PAIRWISE}
_FLOATS = (
    np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16),
    np.dtype(ml_dtypes.bfloat16),
)  # fmt: skip


def _dtype_name(x) -> str:
    return str(np.asarray(x).dtype) if hasattr(x, "dtype") else type(x).__name__


def _sub_byte_lut(name: str, shift: int) -> np.ndarray:
    """Values of the 256 bytes holding one fp6/fp4 code at bits ``shift`` upward (MMA-Sim's
    uint8 layout: the code is ``(byte & 0x3F) >> shift``)."""
    codes = ((np.arange(256) & 0x3F) >> shift).astype(np.uint8)
    return codes.view(TYPES[name].dtype).astype(np.float64)


def operand_values(
    x, type_name: str, arg: str, shape=None, packed=False, k_axis=-1, tf32=None
) -> np.ndarray:
    """An operand's values as float64 (exact), checking its dtype (and shape); packed
    e2m1 codes pair along ``k_axis`` (K: A's columns, B's rows, as MMA-Sim packs them);
    float32 truncated to tf32 where ``tf32`` (the instruction's flag; default the type's)."""
    t = TYPES[type_name]
    a = np.asarray(x)
    if a.dtype == np.uint8 and type_name in SUB_BYTE:
        e, mnt = SUB_BYTE[type_name]
        if packed:
            lut = np.array([np.float64(v) for v in np.arange(16, dtype=np.uint8).view(t.dtype)])
            ak = np.moveaxis(a, k_axis, -1)
            v = np.empty(ak.shape[:-1] + (ak.shape[-1] * 2,), np.float64)
            v[..., 0::2] = lut[ak >> 4]
            v[..., 1::2] = lut[ak & 0xF]
            v = np.moveaxis(v, -1, k_axis)
        else:
            v = _sub_byte_lut(type_name, 5 - e - mnt)[a]
    elif a.dtype == t.dtype:
        if type_name == "ue4m3":  # (MMA-Sim reads ue4m3 scales without their sign bit)
            a = (a.view(np.uint8) & 0x7F).view(t.dtype)
        if (t.tf32 if tf32 is None else tf32) and a.dtype == np.float32:
            a = (a.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
        v = a.astype(np.float64)
    else:
        allowed = t.dtype.name + (" or uint8 codes" if type_name in SUB_BYTE else "")
        raise TypeError(
            f"{arg} has dtype {a.dtype.name}; this instruction's {type_name} operand takes "
            f"{allowed}"
        )
    if v.ndim != 2:
        raise ValueError(f"{arg} must be 2-D, got shape {a.shape}")
    if shape is not None and v.shape != shape:
        raise ValueError(f"{arg} has shape {v.shape}; expected {shape}")
    return v


def normalized(v: np.ndarray, esub: int) -> tuple[np.ndarray, np.ndarray]:
    """MMA-Sim's (s, e) of float64 values (:func:`fp8kit._kernels.mma.normalize`):
    ``v = s * 2**e``, ``1 <= |s| < 2``, or ``e = esub`` below the smallest normal; zero
    (0, esub); Inf and NaN (v, -1)."""
    flat = np.ascontiguousarray(v, np.float64).ravel()
    s, e = np.empty_like(flat), np.empty(flat.shape, np.int64)
    _checked(K.kernel("normalize")(flat, esub, s, e))
    return s.reshape(np.shape(v)), e.reshape(np.shape(v))


@dataclass
class Prepared:
    """The arrays one product's kernels take (A rows, B^T rows; see the kernels)."""

    sa: np.ndarray
    ea: np.ndarray
    sb: np.ndarray
    eb: np.ndarray
    va: np.ndarray
    vb: np.ndarray
    c: np.ndarray
    params: np.ndarray
    scale_a: np.ndarray
    scale_b: np.ndarray
    gscale_a: np.ndarray
    gscale_b: np.ndarray
    fast: tuple | None  # (va32, ea32, vb32 (K, N), eb32, bad_a, bad_b) or None


def _params(model, length, *, f=0, f2=0, rho=0, ezero=0, group=0, nc=0, block=1, esc=-126,
            flush_a=-126, flush_b=-126, f32ops=0, width=0, ess=-127) -> np.ndarray:  # fmt: skip
    p = np.zeros(K.P_LEN, np.int64)
    p[K.P_MODEL], p[K.P_L], p[K.P_F], p[K.P_F2], p[K.P_RHO] = model, length, f, f2, rho
    p[K.P_EZERO], p[K.P_GROUP], p[K.P_NC], p[K.P_BLOCK], p[K.P_ESC] = ezero, group, nc, block, esc
    p[K.P_FLUSH_A], p[K.P_FLUSH_B], p[K.P_F32OPS], p[K.P_PAIRW] = flush_a, flush_b, f32ops, width
    p[K.P_GROUP] = group
    p[K.P_ESS] = ess
    return p


def instruction_params(inst, nc: int) -> np.ndarray:
    ta, tb = TYPES[inst.a_type], TYPES[inst.b_type]
    model = K.MODELS[inst.model]
    return _params(
        model, inst.products, f=inst.frac_bits, f2=inst.frac_bits2,
        rho=K.ROUNDINGS.get(inst.rounding, 0), ezero=inst.exp_zero, group=inst.group, nc=nc,
        block=inst.block or 1, esc=TYPES[inst.c_type].esub, flush_a=ta.esub, flush_b=tb.esub,
        f32ops=int(inst.a_type == "f32"), width=inst.group,
        ess=TYPES[inst.scale_type].esub if inst.scale_type else -127,
    )  # fmt: skip


def _fast_lanes(inst):
    """The lane type of the fast kernel for this instruction, or None (see
    ``fp8kit._kernels.mma.kernel("fast")``): float32 where its proof holds (both operands 8-bit
    or narrower, F <= 13, at most 32 products), else float64 for operands of at most 26
    significant bits (products exact) and F <= 35 (sums below 2**53); the fused model only."""
    ta, tb = TYPES[inst.a_type], TYPES[inst.b_type]
    if inst.model != "fused" or inst.products > 64:
        return None
    if ta.narrow and tb.narrow and inst.frac_bits <= 13 and inst.products <= 32:
        return np.float32
    if "f64" in (inst.a_type, inst.b_type) or "f32" in (inst.a_type, inst.b_type):
        return None
    return np.float64 if inst.frac_bits <= 35 else None


@functools.cache
def _luts(type_name: str, lanes) -> tuple:
    """Per-code tables of an 8-bit (or narrower) type: MMA-Sim's (s, e), and the fast
    kernel's value (non-finite as 0) and exponent (-1000 for zero) in the lanes' type,
    whether the code is not finite, whether it is zero."""
    t = TYPES[type_name]
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.arange(256, dtype=np.uint8).view(t.dtype).astype(np.float64)
    s, e = normalized(v, t.esub)
    fin = np.isfinite(v)
    v_l = np.where(fin, v, 0).astype(lanes)
    flags = (~fin).astype(np.uint8) | (v == 0).astype(np.uint8) << 1
    return s, e, v_l, np.where(v_l != 0, e, -1000).astype(np.int16), flags


#: Bits of an operand's per-element flags (:class:`_Operand`).
NOT_FINITE, ZERO = 1, 2


class _Operand:
    """An operand's arrays for the fast kernel, by table lookup of 8-bit codes (else
    computed): lazily, so that (s, e) are built only where the scalar step needs them."""

    def __init__(self, x, type_name, arg, lanes):
        t = TYPES[type_name]
        a = np.asarray(x)
        self.codes = None
        if a.dtype == t.dtype and t.dtype.itemsize == 1 and a.ndim == 2:
            self.codes = np.ascontiguousarray(a).view(np.uint8)
            s, e, v_l, e_l, flags = _luts(type_name, lanes)
            c = self.codes
            self.shape = c.shape
            # (np.take: 2.5x faster than indexing with a 2-D array of codes)
            self.v_l, self.e_l, self.flags = np.take(v_l, c), np.take(e_l, c), np.take(flags, c)
            self._se = lambda: (np.take(s, c), np.take(e, c))
        else:
            v = operand_values(x, type_name, arg)
            self.shape = v.shape
            s, e = normalized(v, t.esub)
            fin = np.isfinite(v)
            self.v_l = np.where(fin, v, 0).astype(lanes)
            self.e_l = np.where(self.v_l != 0, e, -1000).astype(np.int16)
            self.flags = (~fin).astype(np.uint8) | (v == 0).astype(np.uint8) << 1
            self._se = lambda: (s, e)

    def se(self):
        return self._se()


def _prepare_fast(inst, a, b, c, lanes):
    """The fast kernel's arrays (values and exponents in the lanes' type, B as K x N, per
    step flags of non-finite values and of zeros), and the scalar step's (s, e) arrays
    only where a lane may need them (a non-finite operand or C, or an overflow)."""
    oa = _Operand(a, inst.a_type, "a", lanes)
    ob = _Operand(b, inst.b_type, "b", lanes)
    if len(ob.shape) != 2 or oa.shape[1] != ob.shape[0] or not oa.v_l.size or not ob.v_l.size:
        return None
    m, k = oa.shape
    n = ob.shape[1]
    length = inst.products

    # the flags of each step: the bits or-ed over its elements
    fa = np.bitwise_or.reduce(oa.flags.reshape(m, k // length, length), axis=2)
    fb = np.bitwise_or.reduce(ob.flags.reshape(k // length, length, n), axis=1)

    def bit(flags, b):
        return np.ascontiguousarray((flags & b) != 0, np.uint8)

    bad_a, bad_b = bit(fa, NOT_FINITE), bit(fb, NOT_FINITE)
    fast = (oa.v_l, oa.e_l, ob.v_l, ob.e_l, bad_a, bad_b, bit(fa, ZERO), bit(fb, ZERO))
    # 8-bit products (below 2**32) never take a float32 accumulator past float32's range:
    # there the scalar step serves only non-finite inputs; a float16 accumulator, or 16-bit
    # products, can overflow to Inf in any step
    can_overflow = inst.d_type != "f32" or lanes is not np.float32
    if can_overflow or bad_a.any() or bad_b.any() or not np.isfinite(c).all():
        sa, ea = oa.se()
        sb, eb = ob.se()
        sb, eb = np.ascontiguousarray(sb.T), np.ascontiguousarray(eb.T)
    else:
        sa = sb = np.zeros((1, 1))
        ea = eb = np.zeros((1, 1), np.int64)
    return np.ascontiguousarray(sa), np.ascontiguousarray(ea), sb, eb, fast


def prepare(inst, a, b, c, *, nc=0, scale_a=None, scale_b=None, gscale_a=None, gscale_b=None,
            fast=True):  # fmt: skip
    """Validate and prepare ``a @ b + c`` (a: M x K, b: K x N, c: M x N float64 values) under
    an instruction or a non-hardware accumulator name.  ``fast=False``: always the scalar
    kernel's arrays (what the CUDA twin runs)."""
    quick = None
    lanes = None
    # (the fast path reads operands as their types say: an instruction whose tf32 flag was
    # changed by Instruction.replace takes the scalar path, which honours the flag)
    if fast and not isinstance(inst, str) and inst.tf32 == TYPES[inst.a_type].tf32:
        lanes = _fast_lanes(inst)
    if lanes is not None:
        # (its compile started, while the operands' tables are made; where the operands
        # are the instruction's types, so that a call about to raise compiles nothing)
        if all(getattr(x, "dtype", None) == TYPES[t].dtype
               for x, t in ((a, inst.a_type), (b, inst.b_type))):  # fmt: skip
            K.prefetch("fast", lanes=lanes)
        quick = _prepare_fast(inst, a, b, c, lanes)
    if quick is not None:
        sa, ea, sb, eb, arrays = quick
        m, n = arrays[0].shape[0], arrays[2].shape[1]
        ones = np.ones((1, 1))
        return Prepared(
            sa, ea, sb, eb, sa, sb, c, instruction_params(inst, nc), ones, ones,
            np.ones((m, 1)) if gscale_a is None else gscale_a,
            np.ones((n, 1)) if gscale_b is None else gscale_b, arrays,
        )  # fmt: skip
    if isinstance(inst, str):
        va = _float_values(a, "a")
        vbt = np.ascontiguousarray(_float_values(b, "b").T)
        length = va.shape[1]
        params = _params(_ACC_MODEL[inst], max(length, 1), nc=0, f32ops=int(inst == "fp32"))
        sa = sb = np.zeros((1, 1))
        ea = eb = np.zeros((1, 1), np.int64)
        fast = None
    else:
        ta, tb = TYPES[inst.a_type], TYPES[inst.b_type]
        va = operand_values(a, inst.a_type, "a", packed=inst.packed, tf32=inst.tf32)
        vbt = operand_values(b, inst.b_type, "b", packed=inst.packed, k_axis=0, tf32=inst.tf32)
        vbt = np.ascontiguousarray(vbt.T)
        sa, ea = normalized(va, ta.esub)
        sb, eb = normalized(vbt, tb.esub)
        params = instruction_params(inst, nc)
        fast = None
    m, n = va.shape[0], vbt.shape[0]
    ones = np.ones((1, 1))
    return Prepared(
        sa, ea, sb, eb, np.ascontiguousarray(va), vbt, c, params,
        ones if scale_a is None else scale_a, ones if scale_b is None else scale_b,
        np.ones((m, 1)) if gscale_a is None else gscale_a,
        np.ones((n, 1)) if gscale_b is None else gscale_b, fast,
    )  # fmt: skip


def _float_values(x, arg) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype not in _FLOATS and not (a.dtype.kind == "V" or "float" in a.dtype.name):
        raise TypeError(
            f"{arg} has dtype {a.dtype.name}; the non-hardware accumulators take float arrays "
            "(float64, float32, float16, bfloat16, float8/6/4 of ml_dtypes)"
        )
    if a.ndim != 2:
        raise ValueError(f"{arg} must be 2-D, got shape {a.shape}")
    return np.ascontiguousarray(a.astype(np.float64))


def launch(prep: Prepared) -> np.ndarray:
    """Run the CPU kernels: the product's float64 outputs (values of the D type)."""
    m, n = prep.c.shape
    k = prep.fast[0].shape[1] if prep.fast is not None else prep.va.shape[1]
    out = np.empty((m, n), np.float64)
    if m == 0 or n == 0:
        return out
    work = m * n * max(k, 1)
    model = int(prep.params[K.P_MODEL])
    if prep.fast is not None:
        args = (*prep.fast, prep.sa, prep.ea, prep.sb, prep.eb, prep.c, prep.params,
                prep.gscale_a, prep.gscale_b, out)  # fmt: skip
        _launch(K.kernel("fast", lanes=prep.fast[0].dtype.type), work // 8, args)
    elif model in (K.EXACT, K.SEQUENTIAL, K.PAIRWISE):
        args = (prep.va, prep.vb, prep.c, prep.params, out)
        _launch(K.kernel("accumulate", model), work // 2, args)
    else:
        args = (prep.sa, prep.ea, prep.sb, prep.eb, prep.va, prep.vb, prep.c, prep.params,
                prep.scale_a, prep.scale_b, prep.gscale_a, prep.gscale_b, out)  # fmt: skip
        _launch(K.kernel("generic", model), work // 2, args)
    return out


def shapes(*arrays) -> np.ndarray:
    """The ``dims`` argument of the kernels of :func:`fp8kit._kernels.mma.kernel`: the
    shape of each 2-D array of ``arrays``, in order (the kernels take them 1-D)."""
    return np.array([d for a in arrays if a.ndim == 2 for d in a.shape], np.int64)


def _launch(kernel, size: int, args: tuple) -> None:
    """``kernel`` over its chunks (:func:`fp8kit._parallel.launch_compiled`), each matrix
    of ``args`` passed 1-D (a view where it is C-contiguous; outputs always are) and its
    shape in ``dims``."""
    dims = shapes(*args)
    flat = [a.reshape(-1) if a.ndim == 2 else a for a in args]
    _checked(_parallel.launch_compiled(kernel, size, *flat, dims))


def _checked(status) -> None:
    if status:  # (a bug of fp8kit's, never a user's: the kernel wrote nothing)
        raise RuntimeError(f"fp8kit: a matrix-product kernel refused its arrays' shapes ({status})")


def canonical_nan(out: np.ndarray) -> np.ndarray:
    """``out`` (float32, 16-bit or float8; in place) with every NaN the canonical NaN."""
    with np.errstate(invalid="ignore"):
        nan = np.isnan(out if out.dtype == np.float32 else out.astype(np.float32))
    if nan.any():
        bits = K.CANONICAL_NAN[out.dtype.itemsize]
        out.view(bits.dtype)[nan] = bits
    return out


def finish(values: np.ndarray, d_type: str, canonical: bool) -> np.ndarray:
    """float64 outputs as the D type, NaN canonical where the model writes it so."""
    if d_type == "f64":
        return values
    out = values.astype(np.float16 if d_type == "f16" else np.float32)
    return canonical_nan(out) if canonical else out


def c_values(c, c_type: str, shape) -> np.ndarray:
    t = TYPES[c_type]
    a = np.asarray(c)
    if a.dtype != t.dtype:
        raise TypeError(f"C has dtype {a.dtype.name}; this instruction's C is {t.dtype.name}")
    if a.shape != shape:
        raise ValueError(f"C has shape {a.shape}; expected {shape}")
    return np.ascontiguousarray(a.astype(np.float64))


def scales(x, type_name, arg, shape) -> np.ndarray:
    if x is None:
        raise ValueError(f"this instruction is block-scaled: {arg} is required, shape {shape}")
    return np.ascontiguousarray(operand_values(x, type_name, arg, shape=shape))


def run_instruction(inst, A, B, C, scale_a=None, scale_b=None) -> np.ndarray:
    """One instruction: D = A @ B + C (see :meth:`fp8kit.mma.Instruction.__call__`)."""

    def kk(x):  # (packed e2m1 codes: two a byte along K)
        return inst.k // (2 if inst.packed and np.asarray(x).dtype == np.uint8 else 1)

    for arg, x, shape in (("A", A, (inst.m, kk(A))), ("B", B, (kk(B), inst.n))):
        if np.shape(x) != shape:
            raise ValueError(f"{arg} has shape {np.shape(x)}; {inst.shape_and_type} takes {shape}")
    c = c_values(C, inst.c_type, (inst.m, inst.n))
    sa = sb = None
    if inst.block:
        nb = inst.k // inst.block
        sa = scales(scale_a, inst.scale_type, "scale_a", (inst.m, nb))
        sb = np.ascontiguousarray(scales(scale_b, inst.scale_type, "scale_b", (nb, inst.n)).T)
    elif scale_a is not None or scale_b is not None:
        raise ValueError(f"{inst.shape_and_type} is not block-scaled: scale_a/scale_b must be None")
    prep = prepare(inst, A, B, c, scale_a=sa, scale_b=sb)
    return finish(launch(prep), inst.d_type, inst.model in _CANONICAL)


_CANONICAL = ("fused", "fused_scaled", "grouped", "two_stage", "pairs")
