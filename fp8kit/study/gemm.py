"""GEMM-output error: quantized weights and activations multiplied the way tensor cores do.

A layer's output ``y = x @ w.T`` loses accuracy twice: once where ``w`` and ``x`` are
quantized (the study's recipes, :func:`fp8kit.study.quantize`), once where the products
are accumulated (a tensor core's fused dot-add keeps few bits, and a chain of them along K
truncates at every step: :func:`fp8kit.matmul` models it bit for bit).  :func:`gemm_error`
measures the output against the float64 product of the original values and against the
exact product of the quantized ones, so that the two losses can be told apart.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..codec import astype, round_to
from ..formats import FloatFormat, get_format
from ._arrays import float_data, working
from .metrics import ErrorMetrics, error_metrics
from .scaling import scale_for
from .sweep import Scaling, parse_scaling

__all__ = ["ACCUMULATORS", "DEFAULT_ACCUMULATORS", "GemmError", "gemm_error"]

#: The accumulators :func:`gemm_error` knows (``NAME-promote<N>``: promotion every N).
ACCUMULATORS = (
    "exact",
    "fp32",
    "fp32-pairwise",
    "hopper-fast",
    "hopper-promote<N>",
    "ada",
    "ada-promote<N>",
    "blackwell",
    "blackwell-promote<N>",
    "blackwell-mx",
)
#: What ``fp8kit study --activations`` and :func:`gemm_error` use by default.
DEFAULT_ACCUMULATORS = ("hopper-fast", "hopper-promote128", "exact")
#: The scalings a GEMM can apply (delayed scaling is a recipe over steps, not one GEMM).
GEMM_SCALINGS = "none, tensor, channel, block[:N]"

#: PTX's names of the element types tensor cores multiply, by fp8kit format.
PTX_TYPES = {
    "float8_e4m3fn": "e4m3",
    "float8_e5m2": "e5m2",
    "float6_e3m2fn": "e3m2",
    "float6_e2m3fn": "e2m3",
    "float4_e2m1fn": "e2m1",
    "float16": "f16",
    "bfloat16": "bf16",
}
_FP8 = ("e4m3", "e5m2")
_F8F6F4 = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")
_F16 = ("f16", "bf16")


@dataclasses.dataclass(frozen=True)
class _Hardware:
    """One family of instructions: per class of operand types (both operands in
    ``types``, of one type when ``same``), the instruction's shape and type string."""

    arch: str
    kind: str
    shapes: tuple[tuple[tuple[str, ...], bool, str], ...]
    block: int | None = None  # block-scaled instructions: elements per scale along K


# The largest tiles (n256): M and N need not be multiples of them, and each output's chain
# along K is the same whatever the tile, so the tile only changes the simulation's speed.
_HARDWARE = {
    "hopper": _Hardware("Hopper", "wgmma", (
        (_FP8, False, "m64n256k32.f32.{a}.{b}"),
        (_F16, True, "m64n256k16.f32.{a}.{b}"),
    )),
    "ada": _Hardware("Ada Lovelace", "mma", (
        (_FP8, False, "m16n8k32.f32.{a}.{b}.f32"),
        (_F16, True, "m16n8k16.f32.{a}.{b}.f32"),
    )),
    "blackwell": _Hardware("Blackwell", "tcgen05.mma", (
        (_F8F6F4, False, "m128n256k32.kind::f8f6f4.f32.{a}.{b}"),
        (_F16, True, "m128n256k16.kind::f16.f32.{a}.{b}"),
    )),
    "blackwell-mx": _Hardware("Blackwell", "tcgen05.mma.block_scale", (
        (_F8F6F4, False, "m128n256k32.kind::mxf8f6f4.block32.f32.{a}.{b}.ue8m0"),
    ), block=32),
}  # fmt: skip

_ACC = re.compile(
    r"^(?:(?P<soft>exact|fp32|fp32-pairwise)|(?P<fast>hopper)-fast|(?P<mx>blackwell-mx)"
    r"|(?P<hw>hopper|ada|blackwell)(?:-promote(?P<nc>\d+))?)$"
)


@dataclasses.dataclass(frozen=True)
class _Accumulator:
    name: str
    hardware: _Hardware | None  # None: one of fp8kit.matmul's non-hardware accumulators
    promote_every: int | None = None


def parse_accumulator(name: Any, func: str = "gemm_error") -> _Accumulator:
    """An accumulator name (:data:`ACCUMULATORS`) parsed, or a ValueError listing them."""
    m = _ACC.match(name) if isinstance(name, str) else None
    # (plain "hopper" is refused: its chain is spelled hopper-fast, as CUTLASS names it)
    if m is None or (m["hw"] == "hopper" and m["nc"] is None) or int(m["nc"] or 1) < 1:
        raise ValueError(f"{func}: unknown accumulator {name!r}; valid: {', '.join(ACCUMULATORS)}")
    if m["soft"]:
        return _Accumulator(name, None)
    if m["fast"] or m["mx"]:
        return _Accumulator(name, _HARDWARE[m["fast"] or m["mx"]])
    nc = None if m["nc"] is None else int(m["nc"])
    return _Accumulator(name, _HARDWARE[m["hw"]], nc)


def _gemm_scaling(spec: Any, func: str, argname: str) -> Scaling:
    try:
        s = parse_scaling(spec)
    except ValueError:
        s = None
    # (tiles, NVFP4 and the other MX scale rules are not modelled in a GEMM's scales yet:
    # refused, never computed with the OCP rule's scales in their place)
    unsupported = s is None or s.kind not in ("none", "tensor", "channel", "block")
    if unsupported or getattr(s, "scale_mode", "ocp") != "ocp":
        raise ValueError(
            f"{func}: {argname} {spec!r} does not apply to one GEMM; valid: {GEMM_SCALINGS}"
        )
    return s


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How one accumulator multiplies one pair of quantized operands."""

    acc: _Accumulator
    mode: str  # "epilogue", "groups" (scales at each promotion), "block_scaled"
    instruction: tuple[str, str, str] | None = None  # (arch, kind, shape_and_type)
    multiple: int = 1  # K is padded with zeros to a multiple of this

    @property
    def label(self) -> str | None:
        return None if self.instruction is None else " ".join(self.instruction)


def _k_of(shape_and_type: str) -> int:
    return int(re.match(r"m\d+n\d+k(\d+)", shape_and_type).group(1))


def plan(
    acc: _Accumulator,
    w_fmt: FloatFormat,
    x_fmt: FloatFormat,
    w_spec: Scaling,
    x_spec: Scaling,
    func: str = "gemm_error",
) -> _Plan:
    """The :class:`_Plan` of one accumulator, or a ValueError saying why the combination
    of formats and scalings cannot run on it."""
    blocks = {s.block_size for s in (w_spec, x_spec) if s.kind == "block"}
    if acc.hardware is None:
        # fp8kit.matmul's exact/fp32 sums apply no per-block scales: MX scales (powers of
        # two) are folded into the operands, which is exact (see _folded)
        return _Plan(acc, "epilogue")
    hw = acc.hardware
    a, b = PTX_TYPES.get(x_fmt.name), PTX_TYPES.get(w_fmt.name)
    shape = next(
        (s for types, same, s in hw.shapes if a in types and b in types and (a == b or not same)),
        None,
    )
    if shape is None:
        kinds = "; ".join(
            ", ".join(t) + (" (both the same)" if same else "") for t, same, _ in hw.shapes
        )
        raise ValueError(
            f"{func}: accumulator {acc.name!r} ({hw.arch} {hw.kind}) multiplies {kinds}; "
            f"got x {x_fmt.name} and w {w_fmt.name} (formats: "
            + ", ".join(f"{f} = {t}" for f, t in PTX_TYPES.items())
            + ")"
        )
    shape = shape.format(a=a, b=b)
    k = _k_of(shape)
    instr = (hw.arch, hw.kind, shape)
    if hw.block is not None:
        if w_spec.kind != "block" or x_spec.kind != "block" or blocks != {hw.block}:
            raise ValueError(
                f"{func}: accumulator {acc.name!r} scales blocks of {hw.block} along K: both "
                f"operands need scaling block:{hw.block}; got w {w_spec.label}, "
                f"x {x_spec.label}"
            )
        return _Plan(acc, "block_scaled", instr, k)
    nc = acc.promote_every
    if nc is None:
        if blocks:
            b0 = min(blocks)
            raise ValueError(
                f"{func}: accumulator {acc.name!r} applies the scales once, after all of K: "
                f"MX blocks (block:{b0}) need promotion at least every {b0} elements (e.g. "
                f"{acc.name.removesuffix('-fast')}-promote{b0}) or a block-scaled "
                "instruction (blackwell-mx)"
            )
        return _Plan(acc, "epilogue", instr, k)
    if nc % k:
        raise ValueError(
            f"{func}: accumulator {acc.name!r}: the promotion interval {nc} must be a "
            f"multiple of the instruction's k ({k}; {' '.join(instr)})"
        )
    bad = sorted(bs for bs in blocks if bs % nc)
    if bad:
        raise ValueError(
            f"{func}: accumulator {acc.name!r} promotes every {nc} elements of K, but "
            f"block:{bad[0]} changes the scale every {bad[0]}: promote at intervals that "
            f"divide the block (e.g. {acc.name.rsplit('-', 1)[0]}-promote{bad[0]}), or use "
            "blackwell-mx"
        )
    return _Plan(acc, "groups", instr, math.lcm(nc, *blocks))


@dataclasses.dataclass(frozen=True)
class _Operand:
    """One quantized GEMM operand: codes (R, K) in the format's dtype (its values as
    float32/float64 for formats without one), the GEMM's inverse scales in float32 (shape
    (), (R, 1) or (R, blocks)), their block size (0: none), and the dequantized values in
    float64 (exact: codes times inverse scales)."""

    codes: np.ndarray
    inv: np.ndarray
    block: int
    deq: np.ndarray


def _quantize(a: np.ndarray, fmt: FloatFormat, spec: Scaling, margin: float, pow2: bool):
    aw = working(a)
    rows, k = aw.shape
    block = spec.block_size if spec.kind == "block" else 0
    if spec.kind == "none":
        s = np.ones((), aw.dtype)
    elif block:
        s = scale_for(aw, fmt, "block", axis=-1, block_size=block)
    else:  # per tensor, or per row: an output channel of w, a token of x
        s = scale_for(aw, fmt, spec.kind, axis=0, margin=margin, pow2=pow2)
    full = np.repeat(s, block, axis=1)[:, :k] if block else s
    # the steps and arithmetic of quantize (FakeConvert): x * scale in the data's working
    # dtype, rounded once to the format, saturating; the codes are kept, not divided back
    with np.errstate(over="ignore", invalid="ignore"):
        y = aw * full.astype(aw.dtype)
    if fmt.dtype is not None:
        codes = astype(y, fmt, saturate=True)
    else:
        with np.errstate(invalid="ignore"):
            codes = round_to(np.clip(y, -fmt.max, fmt.max), fmt, saturate=True)
    # the GEMM multiplies by the inverse scales a kernel reads: float32, each rounded once
    with np.errstate(divide="ignore", over="ignore"):
        inv = (1.0 / np.asarray(s, np.float64)).astype(np.float32)
    inv_full = np.repeat(inv, block, axis=1)[:, :k] if block else inv
    deq = codes.astype(np.float64) * inv_full.astype(np.float64)
    return _Operand(codes, inv, block, deq)


def _padded(codes: np.ndarray, kp: int) -> np.ndarray:
    rows, k = codes.shape
    if kp == k:
        return np.ascontiguousarray(codes)
    out = np.zeros((rows, kp), codes.dtype)
    out[:, :k] = codes
    return out


def _group_scales(op: _Operand, groups: int, nc: int, kp: int) -> np.ndarray:
    """The operand's inverse scales per promotion group of ``nc`` elements: as they are
    for a tensor or per row (they broadcast), each MX block's repeated over its groups."""
    if not op.block:
        return op.inv if op.inv.ndim == 0 else op.inv.reshape(-1, 1)
    inv = np.ones((op.inv.shape[0], kp // op.block), np.float32)  # padded blocks: scale 1
    inv[:, : op.inv.shape[1]] = op.inv
    return np.ascontiguousarray(np.repeat(inv, op.block // nc, axis=1)[:, :groups])


def _folded(op: _Operand) -> _Operand:
    """An MX operand with its block scales folded into the values, for the accumulators
    that take no block scales: float32 when exact (MX scales are powers of two; always,
    but where a value falls below float32's range), else float64."""
    if not op.block:
        return op
    f32 = op.deq.astype(np.float32)
    values = f32 if np.array_equal(f32, op.deq, equal_nan=True) else op.deq
    return _Operand(values, np.ones((), np.float32), 0, op.deq)


def _run(p: _Plan, xo: _Operand, wo: _Operand) -> tuple[np.ndarray, list[str]]:
    """``y = x @ w.T`` of the quantized operands under one plan, and notes."""
    from .. import matmul

    k = xo.codes.shape[1]
    if p.instruction is None:
        xo, wo = _folded(xo), _folded(wo)
        return matmul(xo.codes, wo.codes.T, instruction=p.acc.name, **_epilogue(xo, wo)), []
    kp = -(-k // p.multiple) * p.multiple
    notes = [f"K padded with zeros from {k} to {kp}"] if kp != k else []
    a, b = _padded(xo.codes, kp), _padded(wo.codes, kp).T
    if p.mode == "epilogue":
        return matmul(a, b, instruction=p.instruction, **_epilogue(xo, wo)), notes
    if p.mode == "block_scaled":
        import ml_dtypes

        e8 = ml_dtypes.float8_e8m0fnu  # (MX scales are powers of two: exact in E8M0)
        sa, sb = (_group_scales(o, kp // o.block, o.block, kp).astype(e8) for o in (xo, wo))
        return matmul(a, b, instruction=p.instruction, scale_a=sa, scale_b=sb.T), notes
    nc = p.acc.promote_every
    scales = {}
    if _scaled(xo) or _scaled(wo):  # (unscaled promotions take matmul's fast kernel)
        sa, sb = (_group_scales(o, kp // nc, nc, kp) for o in (xo, wo))
        scales = {"scale_a": sa, "scale_b": sb.T}
    return matmul(a, b, instruction=p.instruction, promote_every=nc, **scales), notes


def _scaled(op: _Operand) -> bool:
    return bool(op.block or op.inv.ndim or op.inv != 1)


def _epilogue(xo: _Operand, wo: _Operand) -> dict:
    """Per-tensor (scalar) and per-row ((M, 1), (1, N)) scales for matmul's epilogue
    (none when both operands are unscaled: no epilogue rounding either)."""
    if not (_scaled(xo) or _scaled(wo)):
        return {}
    sa = xo.inv if xo.inv.ndim == 0 else xo.inv.reshape(-1, 1)
    sb = wo.inv if wo.inv.ndim == 0 else wo.inv.reshape(1, -1)
    return {"scale_a": sa, "scale_b": sb}


@dataclasses.dataclass(frozen=True)
class GemmError:
    """The error of one GEMM output ``y = x @ w.T`` computed from quantized operands by
    one accumulator (see :func:`gemm_error`).

    Three comparisons, each an :class:`ErrorMetrics` (SQNR, RMSE, largest absolute and
    relative error, the sums that pool over layers): ``error``, y against the float64
    product of the original values (everything lost); ``accumulation``, y against the
    exact product of the quantized values (what the accumulator alone loses); and
    ``quantization``, that exact product against the original one (what an exact
    accumulator would still lose: the same for every accumulator).

    Attributes
    ----------
    accumulator : str
        The accumulator's name (:data:`ACCUMULATORS`).
    instruction : str or None
        ``"arch kind shape_and_type"`` of the tensor-core instruction (MMA-Sim's names);
        None for the non-hardware ``exact``, ``fp32`` and ``fp32-pairwise``.
    promote_every : int or None
        Elements of K between promotions to the fp32 accumulator (None: none).
    w_format, x_format : str
        The formats the weights and activations were quantized to.
    w_scaling, x_scaling : str
        Their scalings (``channel``: per output channel of w, per token of x; MX blocks
        run along K).
    tokens, out_features, k : int
        The GEMM's M, N and K: ``x`` is (tokens, k), ``w`` (out_features, k).
    error : ErrorMetrics
        y against the float64 product of the original values.
    accumulation : ErrorMetrics
        y against the exact product of the quantized values (codes times float32 inverse
        scales, multiplied in float64).
    quantization : ErrorMetrics
        The exact product of the quantized values against the original product.
    notes : tuple of str
        Special cases met (K padded with zeros to the instruction's shape, ...).

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> rng = np.random.default_rng(0)
    >>> w, x = rng.standard_normal((16, 64)), rng.standard_normal((4, 64))
    >>> r = study.gemm_error(w, x, accumulators=["exact"])[0]
    >>> r.accumulator, (r.tokens, r.out_features, r.k), r.instruction is None
    ('exact', (4, 16, 64), True)
    >>> bool(abs(r.error.sqnr_db - r.quantization.sqnr_db) < 0.01)  # exact: no loss of its own
    True
    """

    accumulator: str
    instruction: str | None
    promote_every: int | None
    w_format: str
    x_format: str
    w_scaling: str
    x_scaling: str
    tokens: int
    out_features: int
    k: int
    error: ErrorMetrics
    accumulation: ErrorMetrics
    quantization: ErrorMetrics
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A flat dict: the fields, then ``error``'s figures as they are, ``accumulation``'s
        with the prefix ``acc_`` and ``quantization``'s with ``quant_``.

        Returns
        -------
        dict of str
            Field name to value, JSON-ready (notes as a list).

        Examples
        --------
        >>> import numpy as np
        >>> from fp8kit import study
        >>> w, x = np.ones((2, 32)), np.ones((1, 32))
        >>> d = study.gemm_error(w, x, scaling="none", accumulators=["exact"])[0].as_dict()
        >>> d["accumulator"], d["sqnr_db"], d["acc_sqnr_db"], d["quant_rmse"]
        ('exact', inf, inf, 0.0)
        """
        d: dict[str, Any] = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("error", "accumulation", "quantization", "notes")
        }
        for prefix, m in (("", self.error), ("acc_", self.accumulation),
                          ("quant_", self.quantization)):  # fmt: skip
            d.update({prefix + k: v for k, v in _figures(m).items()})
        d["notes"] = list(self.notes)
        return d


#: The figures of an ErrorMetrics that describe a GEMM output (no format applies to it).
_FIGURES = ("count", "compared", "sqnr_db", "rmse", "max_abs_error", "max_rel_error",
            "sum_sq_error", "sum_sq_signal")  # fmt: skip


def _figures(m: ErrorMetrics) -> dict[str, Any]:
    return {k: getattr(m, k) for k in _FIGURES}


def _matrix(a: Any, func: str, argname: str, what: str) -> np.ndarray:
    arr = float_data(a, func, argname)
    if arr.ndim != 2:
        raise ValueError(f"{func}: {argname} must be 2-D, {what}; got shape {arr.shape}")
    return arr


def _accumulators(accumulators: Any, func: str) -> list[_Accumulator]:
    names = [accumulators] if isinstance(accumulators, str) else list(accumulators)
    if not names:
        raise ValueError(
            f"{func}: accumulators must name at least one of {', '.join(ACCUMULATORS)}"
        )
    return [parse_accumulator(n, func) for n in names]


def gemm_error(
    w: Any,
    x: Any,
    fmt: Any = "float8_e4m3fn",
    scaling: Any = "tensor",
    accumulators: str | Iterable[str] = DEFAULT_ACCUMULATORS,
    *,
    x_fmt: Any = None,
    x_scaling: Any = None,
    margin: float = 0.0,
    pow2: bool = False,
) -> list[GemmError]:
    """Quantize a layer's weights and inputs and measure the error of its output
    ``y = x @ w.T`` under tensor-core accumulators.

    ``w`` and ``x`` are quantized with a study recipe (:func:`scale_for`, the codes that
    :func:`quantize` rounds to), then multiplied by :func:`fp8kit.matmul` with each
    accumulator: per-tensor and per-channel scales are applied in the epilogue
    (``scale_a`` per token, ``scale_b`` per output channel), MX block scales along K at
    each promotion (``NAME-promote<N>``, N dividing the block) or by a block-scaled
    instruction (``blackwell-mx``); the non-hardware ``exact``/``fp32`` sums get MX
    scales folded into the operands (exact: powers of two).  Where K is not a multiple of
    the instruction's k (or of the promotion interval or block) it is padded with zeros,
    as kernels do.

    Accumulators: ``exact`` (the exact sum rounded once to fp32), ``fp32`` (a sequential
    fp32 fma chain), ``fp32-pairwise``; ``hopper-fast`` (Hopper's wgmma chained along K,
    CUTLASS/cuBLAS "fast accumulation"), ``hopper-promote<N>`` (its partial sums added to
    an fp32 accumulator every N elements of K, DeepSeek-V3's recipe with N = 128), ``ada``
    (Ada's mma.m16n8k32 chained), ``blackwell`` (tcgen05.mma) and their
    ``-promote<N>`` variants, and ``blackwell-mx`` (tcgen05.mma.block_scale,
    kind::mxf8f6f4, blocks of 32).

    Parameters
    ----------
    w : array_like
        Weights, (out_features, K): float16, bfloat16, float32 or float64.
    x : array_like
        Activations, (tokens, K), of the same dtypes.
    fmt : str or FloatFormat, default "float8_e4m3fn"
        The format of w (and of x unless ``x_fmt`` is given).
    scaling : str, default "tensor"
        The recipe of w (and of x unless ``x_scaling``): ``none``, ``tensor``,
        ``channel`` (w per output channel, x per token) or ``block[:N]`` (MX blocks of N
        along K, default 32).
    accumulators : str or iterable of str, default ("hopper-fast", "hopper-promote128", "exact")
        Names from :data:`ACCUMULATORS`.
    x_fmt : str or FloatFormat, optional
        The format of x (default ``fmt``).
    x_scaling : str, optional
        The recipe of x (default ``scaling``).
    margin : float, default 0.0
        Per-tensor and per-channel scales are divided by ``2**margin``.
    pow2 : bool, default False
        Round per-tensor and per-channel scales down to powers of two.

    Returns
    -------
    list of GemmError
        One per accumulator, in the order given.

    Raises
    ------
    TypeError
        If w or x is not float16, bfloat16, float32 or float64 data.
    ValueError
        For arrays that are not 2-D or whose K differ; an unknown format, scaling or
        accumulator; delayed scaling; or a combination an accumulator cannot compute
        (a format its instruction does not multiply, MX blocks without promotion or with
        an interval that does not divide the block, blackwell-mx without ``block:32``).

    Examples
    --------
    >>> import numpy as np
    >>> from fp8kit import study
    >>> rng = np.random.default_rng(1)  # positive values: no cancellation hides the bias
    >>> w = rng.uniform(0, 1, (32, 4096)).astype(np.float32)
    >>> x = rng.uniform(0, 1, (8, 4096)).astype(np.float32)
    >>> for r in study.gemm_error(w, x, "float8_e4m3fn", "channel"):
    ...     print(f"{r.accumulator:18} {r.error.sqnr_db:5.1f} dB  (accumulation alone "
    ...           f"{r.accumulation.sqnr_db:5.1f} dB)")
    hopper-fast         22.6 dB  (accumulation alone  22.6 dB)
    hopper-promote128   60.2 dB  (accumulation alone  65.3 dB)
    exact               61.6 dB  (accumulation alone 147.3 dB)
    """
    func = "gemm_error"
    wa = _matrix(w, func, "w", "(out_features, K)")
    xa = _matrix(x, func, "x", "(tokens, K)")
    if wa.shape[1] != xa.shape[1]:
        raise ValueError(
            f"{func}: x has shape {xa.shape} but w has {wa.shape}: their K (the last "
            "dimension) must match"
        )
    wf = get_format(fmt, argname="fmt")
    xf = wf if x_fmt is None else get_format(x_fmt, argname="x_fmt")
    ws = _gemm_scaling(scaling, func, "scaling")
    xs = ws if x_scaling is None else _gemm_scaling(x_scaling, func, "x_scaling")
    plans = [plan(a, wf, xf, ws, xs, func) for a in _accumulators(accumulators, func)]
    return _measure(wa, xa, wf, xf, ws, xs, plans, float(margin), bool(pow2))


def _reference(wa: np.ndarray, xa: np.ndarray) -> np.ndarray:
    return np.asarray(xa, np.float64) @ np.asarray(wa, np.float64).T


def _measure(wa, xa, wf, xf, ws, xs, plans, margin, pow2, ref=None) -> list[GemmError]:
    wo = _quantize(wa, wf, ws, margin, pow2)
    xo = _quantize(xa, xf, xs, margin, pow2)
    ref = _reference(wa, xa) if ref is None else ref
    ref_q = xo.deq @ wo.deq.T
    quant = error_metrics(ref, ref_q)
    out = []
    for p in plans:
        y, notes = _run(p, xo, wo)
        out.append(
            GemmError(
                accumulator=p.acc.name,
                instruction=p.label,
                promote_every=p.acc.promote_every,
                w_format=wf.name,
                x_format=xf.name,
                w_scaling=ws.label,
                x_scaling=xs.label,
                tokens=xa.shape[0],
                out_features=wa.shape[0],
                k=wa.shape[1],
                error=error_metrics(ref, np.asarray(y)),
                accumulation=error_metrics(ref_q, np.asarray(y)),
                quantization=quant,
                notes=tuple(notes),
            )
        )
    return out


# -- per-layer studies (``fp8kit study --activations``) ------------------------------------


@dataclasses.dataclass(frozen=True)
class GemmRow:
    """One layer's :class:`GemmError` under one format, scaling and accumulator."""

    tensor: str
    result: GemmError

    def as_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, **self.result.as_dict()}


@dataclasses.dataclass(frozen=True)
class GemmSummary:
    """The layers of one (format, scaling, accumulator) pooled: SQNR over all their
    outputs (:meth:`ErrorMetrics.pooled`), and the layer of lowest SQNR."""

    format: str
    scaling: str
    accumulator: str
    layers: int
    error: ErrorMetrics
    accumulation: ErrorMetrics
    worst_tensor: str | None
    worst_sqnr_db: float

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": self.format, "scaling": self.scaling,
                             "accumulator": self.accumulator, "layers": self.layers}  # fmt: skip
        d.update(_figures(self.error))
        d.update({"acc_" + k: v for k, v in _figures(self.accumulation).items()})
        d.update(worst_tensor=self.worst_tensor, worst_sqnr_db=self.worst_sqnr_db)
        return d


def _key(r: GemmRow) -> tuple[str, str, str]:
    return (r.result.w_format, r.result.w_scaling, r.result.accumulator)


def _sqnr_key(r: GemmRow) -> tuple[bool, float]:
    v = r.result.error.sqnr_db
    return (math.isnan(v), v)  # NaN (nothing compared) after every number


def gemm_groups(rows: Iterable[GemmRow]) -> dict[tuple[str, str, str], list[GemmRow]]:
    """Rows by (format, scaling, accumulator), in order of first appearance."""
    by: dict[tuple[str, str, str], list[GemmRow]] = {}
    for r in rows:
        by.setdefault(_key(r), []).append(r)
    return by


def summarize_gemm(rows: Iterable[GemmRow]) -> list[GemmSummary]:
    """One :class:`GemmSummary` per (format, scaling, accumulator) of ``rows``."""
    out = []
    for (f, s, a), group in gemm_groups(rows).items():
        ranked = [r for r in group if not math.isnan(r.result.error.sqnr_db)]
        worst = min(ranked, key=_sqnr_key) if ranked else None
        out.append(
            GemmSummary(
                format=f,
                scaling=s,
                accumulator=a,
                layers=len({r.tensor for r in group}),
                error=ErrorMetrics.pooled([r.result.error for r in group]),
                accumulation=ErrorMetrics.pooled([r.result.accumulation for r in group]),
                worst_tensor=None if worst is None else worst.tensor,
                worst_sqnr_db=math.nan if worst is None else worst.result.error.sqnr_db,
            )  # fmt: skip
        )
    return out


def worst_gemm(rows: Iterable[GemmRow], n: int) -> list[GemmRow]:
    """The ``n`` rows of lowest SQNR of each (format, scaling, accumulator)."""
    return [r for g in gemm_groups(rows).values() for r in sorted(g, key=_sqnr_key)[:n]]


def gemm_sweep(
    layers: Mapping[str, tuple[Any, Any]],
    formats: Iterable[Any],
    scalings: Iterable[Any],
    accumulators: Iterable[str],
    *,
    margin: float = 0.0,
    pow2: bool = False,
) -> tuple[list[GemmRow], list[str]]:
    """``(rows, skipped)``: every layer (name -> (w, x)) under every format, scaling and
    accumulator, rows in the order layer, format, scaling, accumulator; the combinations
    no accumulator of them can compute are left out, each said once in ``skipped``."""
    func = "gemm"
    fmts = [get_format(f, argname="formats") for f in formats]
    specs = [parse_scaling(s) for s in scalings]
    accs = _accumulators(accumulators, func)
    plans, skipped = [], []
    for f in fmts:
        for s in specs:
            ok = []
            for a in accs:
                try:
                    if s.kind == "delayed":
                        _gemm_scaling(s.label, func, "scaling")
                    ok.append(plan(a, f, f, s, s, func))
                except ValueError as exc:
                    skipped.append(f"{f.name} {s.label}: {_reason(exc)}")
            plans.append((f, s, ok))
    rows = []
    for name, (w, x) in layers.items():
        wa = _matrix(w, func, f"weight {name!r}", "(out_features, K)")
        xa = _matrix(x, func, f"activations of {name!r}", "(tokens, K)")
        ref = _reference(wa, xa)  # (once per layer)
        for f, s, ok in plans:
            if ok:
                for r in _measure(wa, xa, f, f, s, s, ok, margin, pow2, ref):
                    rows.append(GemmRow(name, r))
    return rows, skipped


def _reason(exc: ValueError) -> str:
    return str(exc).split(": ", 1)[-1]
