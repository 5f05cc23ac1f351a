"""Tensor-core instructions as data: the fused dot-add models of MMA-Sim, by name.

A :class:`Instruction` is a frozen dataclass of the published model's parameters (Xie et
al., "MMA-Sim", arXiv 2511.10909; the names are PTX's and AMD's as ``mmasim`` 2.1.1 spells
them).  :func:`instruction` looks one up; calling it computes ``D = A @ B + C`` with the
instruction's bits.  :func:`fp8kit.matmul` chains one over any K.

Examples
--------
>>> import numpy as np, ml_dtypes
>>> from fp8kit import mma
>>> wgmma = mma.instruction("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
>>> wgmma.products, wgmma.frac_bits, wgmma.rounding
(32, 13, 'rz_e8m13')
>>> a = np.ones((64, 32), ml_dtypes.float8_e4m3fn)
>>> b = np.ones((32, 8), ml_dtypes.float8_e4m3fn)
>>> float(wgmma(a, b, np.full((64, 8), 2.0**-10, np.float32))[0, 0])  # 32 + 2**-10: truncated
32.0
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ._catalog import (
    ARCHS,
    CATALOG,
    KINDS,
    MMA_EZERO_F16,
    MMA_EZERO_F32,
    MMA_FRAC,
    MMA_STEP_BYTES,
)
from ._types import TYPES

__all__ = ["ARCHS", "KINDS", "Instruction", "instruction", "list_instructions"]

MODELS = ("fused", "fused_scaled", "grouped", "two_stage", "pairs", "exact_sum", "ftz_add", "fma")
ROUNDINGS = ("rz_f32", "rz_e8m13", "rne_f16", "rne_f32", "none")


@dataclass(frozen=True, kw_only=True)
class Instruction:
    """One tensor-core instruction's arithmetic, as the published model describes it.

    Parameters
    ----------
    arch, kind, shape_and_type : str
        The names (see :func:`instruction`).
    m, n, k : int
        The tile: A is m x k, B is k x n, C and D are m x n.
    a_type, b_type, c_type, d_type : str
        Operand types as PTX/AMD name them (``e4m3``, ``bf16``, ``tf32``, ``fp8``, ...).
    scale_type : str or None
        ``ue8m0`` or ``ue4m3`` for block-scaled kinds.
    block : int
        Elements of K sharing one scale (0: no block scales).
    packed : bool
        Two e2m1 codes per byte when A and B are given as uint8 (``kind::mxf4*``).
    model : str
        ``fused`` (MMA-Sim's T-FDPA: the products and C aligned to the largest exponent,
        each truncated to ``frac_bits`` fractional bits, summed, rounded once),
        ``fused_scaled`` (ST-FDPA: each product times its two block scales), ``grouped``
        (GST-FDPA: groups of ``group`` products summed first, then scaled), ``two_stage``
        (TR-FDPA, CDNA3), ``pairs`` (GTR-FDPA, CDNA3 fp8: even and odd products apart),
        ``exact_sum`` (CDNA1), ``ftz_add`` (CDNA2), ``fma`` (a chain of fused multiply-adds).
    products : int
        Products per fused step; an instruction of larger k runs ``k // products`` steps,
        each step's result the next one's C (Ada's fp8 k=32 runs as two halves).
    frac_bits, frac_bits2 : int
        Fractional bits kept in the alignment (and at the second stage of CDNA3's models).
    rounding : str
        The step result's rounding: ``rz_f32`` (toward zero to float32), ``rz_e8m13``
        (toward zero to 13 fractional bits in float32's range), ``rne_f16``, ``rne_f32``,
        ``none`` (models that round as they go).
    exp_zero : int
        The exponent a zero term takes in the alignment (it can raise the maximum).
    group : int
        Products per group of the ``grouped`` model; pairs per addition (2 or 4) for
        ``ftz_add``.
    tf32 : bool
        float32 inputs are truncated to tf32 first.

    Notes
    -----
    Nothing overflows silently: a step whose exact result is beyond the output type's range
    gives Inf; NaN and Inf inputs give what IEEE arithmetic of the model gives, NaN as the
    output's canonical NaN (``0x7FFFFFFF``, ``0x7FFF``) for the fused models.

    Examples
    --------
    >>> from fp8kit import mma
    >>> ada = mma.instruction("Ada Lovelace", "mma", "m16n8k32.f32.e4m3.e4m3.f32")
    >>> ada.model, ada.products, ada.frac_bits, ada.exp_zero
    ('fused', 16, 13, -132)
    """

    arch: str
    kind: str
    shape_and_type: str
    m: int
    n: int
    k: int
    a_type: str
    b_type: str
    c_type: str
    d_type: str
    scale_type: str | None = None
    block: int = 0
    packed: bool = False
    model: str
    products: int
    frac_bits: int = 0
    frac_bits2: int = 0
    rounding: str = "none"
    exp_zero: int = 0
    group: int = 0
    tf32: bool = False

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"model {self.model!r} is not one of {', '.join(MODELS)}")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"rounding {self.rounding!r} is not one of {', '.join(ROUNDINGS)}")
        for name in ("a_type", "b_type", "c_type", "d_type"):
            if getattr(self, name) not in TYPES:
                raise ValueError(f"{name} {getattr(self, name)!r} is not one of {', '.join(TYPES)}")
        if self.k % self.products:
            raise ValueError(f"k={self.k} is not a multiple of products={self.products}")

    def replace(self, **changes) -> Instruction:
        """A copy with some parameters changed (a hypothesis to test against hardware).

        Parameters
        ----------
        **changes
            Fields and their new values.

        Returns
        -------
        Instruction

        Examples
        --------
        >>> from fp8kit import mma
        >>> i = mma.instruction("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
        >>> i.replace(frac_bits=14).frac_bits
        14
        """
        return dataclasses.replace(self, **changes)

    def __call__(self, A, B, C, scale_a=None, scale_b=None):
        """``D = A @ B + C`` with this instruction's bits.

        Parameters
        ----------
        A, B : array_like
            m x k and k x n arrays of the instruction's A and B types (ml_dtypes dtypes such
            as ``float8_e4m3fn``, ``float4_e2m1fn``; float32 for tf32).  fp6/fp4 operands
            may also be uint8 codes as MMA-Sim stores them (bits 5:0 / 5:2, or two e2m1
            codes per byte along K, high nibble first, for ``kind::mxf4*``: then A is
            m x k/2 and B is k/2 x n).
        C : array_like
            m x n of the C type (float32, float16 or float64).
        scale_a, scale_b : array_like, optional
            Block-scaled kinds: m x (k / block) and (k / block) x n scales
            (``float8_e8m0fnu``, or ``float8_e4m3fn`` for ue4m3, whose sign is ignored).

        Returns
        -------
        numpy.ndarray
            m x n of the D type.
        """
        from ._engine import run_instruction

        return run_instruction(self, A, B, C, scale_a, scale_b)


def _mnk(shape: str) -> tuple[int, int, int]:
    if "x" in shape:  # AMD: 32x32x8
        m, n, k = (int(t) for t in shape.split("x"))
        return m, n, k
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def _nv(arch: str, kind: str, name: str) -> Instruction:
    parts = name.split(".")
    shape = parts[0]
    rest = [p for p in parts[1:] if not p.startswith("kind::") and not p.startswith("block")]
    ptx_kind = next((p[6:] for p in parts if p.startswith("kind::")), "")
    block = next((int(p[5:]) for p in parts if p.startswith("block")), 0)
    m, n, k = _mnk(shape)
    scale_type = None
    if kind.endswith("block_scale"):
        scale_type = rest[-1]
        rest = rest[:-1]
    if kind in ("wgmma", "tcgen05.mma", "tcgen05.mma.block_scale"):
        d, a, b = rest[:3]
        c = d
    else:
        d, a, b, c = rest[:4]
    ta = TYPES[a]
    common = dict(arch=arch, kind=kind, shape_and_type=name, m=m, n=n, k=k, a_type=a,
                  b_type=b, c_type=c, d_type=d, tf32=ta.tf32)  # fmt: skip
    f16_out = d == "f16"
    if scale_type is not None:
        common.update(scale_type=scale_type, block=block, packed=ptx_kind in ("mxf4", "mxf4nvf4"))
        if k == 64:
            return Instruction(**common, model="grouped", products=64, group=16, frac_bits=35,
                               rounding="rz_f32", exp_zero=-139)  # fmt: skip
        return Instruction(**common, model="fused_scaled", products=32, frac_bits=25,
                           rounding="rz_f32", exp_zero=-133)  # fmt: skip
    if a == "f64":
        return Instruction(**common, model="fma", products=k)
    step_bytes = MMA_STEP_BYTES[arch] if kind == "mma" else 32
    frac = MMA_FRAC[arch] if kind == "mma" else 25
    ezero = (MMA_EZERO_F16 if f16_out else MMA_EZERO_F32)[arch] if kind == "mma" else None
    if kind != "mma":
        ezero = -21 if f16_out else -133
    rounding = "rne_f16" if f16_out else "rz_f32"
    # Turing runs Volta's m8n8k4 with Volta's datapath
    if arch == "Turing" and kind == "mma" and shape == "m8n8k4":
        frac, step_bytes, ezero = 23, 8, (-19 if f16_out else -131)
    # Hopper's wgmma and Ada's mma keep 13 fractional bits of fp8 products, and round an
    # fp32 result toward zero to 13 fractional bits
    if a in ("e4m3", "e5m2") and (kind == "wgmma" or (kind == "mma" and arch == "Ada Lovelace")):
        frac = 13
        rounding = "rne_f16" if f16_out else "rz_e8m13"
    products = min(k, step_bytes * 8 // ta.bits)
    return Instruction(**common, model="fused", products=products, frac_bits=frac,
                       rounding=rounding, exp_zero=ezero)  # fmt: skip


def _amd(arch: str, suffix: str) -> Instruction:
    q = suffix.split("_")
    d = q[0]
    if len(q) == 2 or (len(q) == 3 and q[2] == "1k"):
        shape_type = q[1]
        t = "bf16" if shape_type.endswith("bf16") else shape_type[-3:]
        a = b = t
        shape = shape_type[: -len(t)]
    elif len(q) == 3:
        shape, a = q[1], q[2]
        b = a
    elif q[-1] in ("fp8", "bf8"):
        shape, a, b = q[1], q[2], q[3]
    else:
        shape, a = q[1], q[3]
        b = a
    m, n, k = _mnk(shape)
    common = dict(arch=arch, kind="mfma", shape_and_type=suffix, m=m, n=n, k=k, a_type=a,
                  b_type=b, c_type=d, d_type=d, tf32=TYPES[a].tf32)  # fmt: skip
    if a in ("f64", "f32"):
        return Instruction(**common, model="fma", products=k)
    if a in ("fp8", "bf8"):
        return Instruction(**common, model="pairs", products=16, frac_bits=24, frac_bits2=31,
                           rounding="rne_f32")  # fmt: skip
    if arch == "CDNA1":
        return Instruction(**common, model="exact_sum", products=min(k, 4 if a == "f16" else 2),
                           rounding="rne_f32")  # fmt: skip
    if arch == "CDNA2":
        width = 2 if a == "bf16" and not suffix.endswith("_1k") else 4
        return Instruction(**common, model="ftz_add", products=k, group=width)
    return Instruction(**common, model="two_stage", products=min(k, 4 if a == "xf32" else 8),
                       frac_bits=24, frac_bits2=31, rounding="rne_f32")  # fmt: skip


def instruction(arch: str, kind: str, shape_and_type: str) -> Instruction:
    """The model of one tensor-core instruction.

    Parameters
    ----------
    arch : str
        ``"Volta"``, ``"Turing"``, ``"Ampere"``, ``"Ada Lovelace"``, ``"Hopper"``,
        ``"Blackwell"``, ``"RTX Blackwell"``, ``"CDNA1"``, ``"CDNA2"`` or ``"CDNA3"``.
    kind : str
        ``"mma"``, ``"mma.block_scale"``, ``"wgmma"``, ``"tcgen05.mma"``,
        ``"tcgen05.mma.block_scale"`` (NVIDIA) or ``"mfma"`` (AMD).
    shape_and_type : str
        As PTX spells it after the opcode (``"m64n8k32.f32.e4m3.e4m3"``,
        ``"m16n8k32.f32.e4m3.e4m3.f32"``) or AMD's suffix (``"f32_32x32x16_fp8_fp8"``).
        :func:`list_instructions` lists every name.

    Returns
    -------
    Instruction

    Raises
    ------
    ValueError
        For an unknown architecture, kind or name on that architecture.

    Examples
    --------
    >>> from fp8kit import mma
    >>> i = mma.instruction("Ada Lovelace", "mma", "m16n8k32.f32.e4m3.e4m3.f32")
    >>> i.products, i.k  # the k=32 step runs as two halves
    (16, 32)
    """
    if kind not in CATALOG:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    table = CATALOG[kind]
    if arch not in table:
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r}; valid: {', '.join(ARCHS)}")
        raise ValueError(f"{arch} has no {kind} instruction; {kind} exists on {', '.join(table)}")
    if shape_and_type not in table[arch]:
        names = table[arch]
        shown = ", ".join(names[:6]) + (f", ... ({len(names)} in all)" if len(names) > 6 else "")
        raise ValueError(
            f"{arch} has no {kind} {shape_and_type!r}; valid: {shown} "
            f"(fp8kit.mma.list_instructions({arch!r}, {kind!r}) lists them)"
        )
    return _cached(arch, kind, shape_and_type)


_CACHE: dict = {}


def _cached(arch, kind, name):
    key = (arch, kind, name)
    if key not in _CACHE:
        _CACHE[key] = _amd(arch, name) if kind == "mfma" else _nv(arch, kind, name)
    return _CACHE[key]


def list_instructions(arch: str | None = None, kind: str | None = None) -> list[tuple]:
    """Every instruction modelled, as ``(arch, kind, shape_and_type)`` tuples.

    Parameters
    ----------
    arch, kind : str, optional
        Only those of this architecture / kind (see :func:`instruction`).

    Returns
    -------
    list of tuple

    Examples
    --------
    >>> from fp8kit import mma
    >>> ("Hopper", "wgmma", "m64n256k32.f32.e4m3.e4m3") in mma.list_instructions("Hopper")
    True
    """
    return [
        (a, kd, name)
        for kd, table in CATALOG.items()
        if kind is None or kd == kind
        for a, names in table.items()
        if arch is None or a == arch
        for name in names
    ]
