"""Matrix products as tensor cores compute them: :func:`matmul` and :func:`scaled_mm`.

:func:`matmul` tiles an instruction of :mod:`fp8kit.mma` over M x N and chains it along
K, as a GPU kernel's main loop does, optionally promoting the instruction's accumulator into
IEEE fp32 every ``promote_every`` elements of K (DeepSeek-V3's fix, cuBLAS's slow
accumulation).  :func:`scaled_mm` is ``torch._scaled_mm`` as an H100 PCIe or an RTX 4060
computes it (the numerics ``mmaemu`` measured on those GPUs).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import _backends
from . import mma as _mma
from .mma import _engine
from .mma._types import TYPES

__all__ = ["HARDWARE", "matmul", "scaled_mm"]

_OUT = {
    np.dtype(np.float32): "f32",
    np.dtype(np.float16): "f16",
    np.dtype(ml_dtypes.bfloat16): "bf16",
    np.dtype(np.float64): "f64",
}


def _instruction(instruction):
    if isinstance(instruction, _mma.Instruction):
        return instruction
    if isinstance(instruction, str):
        if instruction in _engine.ACCUMULATORS:
            return instruction
        raise ValueError(
            f"instruction {instruction!r} is not an accumulator name; valid: "
            f"{', '.join(_engine.ACCUMULATORS)}, an fp8kit.mma.Instruction, or a tuple "
            "(arch, kind, shape_and_type)"
        )
    if isinstance(instruction, tuple) and len(instruction) == 3:
        return _mma.instruction(*instruction)
    raise TypeError(
        f"instruction must be an fp8kit.mma.Instruction, a tuple (arch, kind, shape_and_type) "
        f"or one of {', '.join(_engine.ACCUMULATORS)}; got {type(instruction).__name__}"
    )


def _scale_array(x, arg, shape, what) -> np.ndarray:
    """A scale as float64 broadcast to ``shape`` (float32 values: scales are fp32)."""
    a = np.asarray(x)
    if a.dtype.kind != "f" or a.dtype.itemsize > 4 and a.dtype != np.float64:
        raise TypeError(f"{arg} must be a float32 array or scalar, got dtype {a.dtype.name}")
    v = a.astype(np.float32).astype(np.float64)
    if a.dtype == np.float64 and not np.array_equal(v, a, equal_nan=True):
        raise ValueError(f"{arg} holds values that are not float32 values (scales are fp32)")
    try:
        return np.ascontiguousarray(np.broadcast_to(v, shape))
    except ValueError:
        raise ValueError(f"{arg} has shape {a.shape}; {what}") from None


def matmul(
    a,
    b,
    c=None,
    *,
    instruction,
    promote_every=None,
    scale_a=None,
    scale_b=None,
    out_dtype=np.float32,
):
    """``a @ b + c`` as a tensor-core kernel computes it, bit for bit.

    The instruction is tiled over the M x N outputs (each output is independent, so M and N
    need not be multiples of its tile) and chained along K in order: each step's result is
    the next step's C, as a kernel's main loop feeds its accumulator back.

    Parameters
    ----------
    a, b : array_like
        M x K and K x N arrays of the instruction's A and B types (ml_dtypes arrays such as
        ``float8_e4m3fn``; float32 for tf32).  Any float dtypes for the accumulators that
        are not hardware.
    c : array_like, optional
        M x N of the instruction's C type (float32, or float16 for f16 accumulators);
        zeros if omitted.
    instruction : fp8kit.mma.Instruction, tuple or str
        An instruction (or its ``(arch, kind, shape_and_type)``), or an accumulator that is
        not hardware: ``"exact"`` (every product and c summed exactly, rounded once to
        float32), ``"fp32"`` (a chain of float32 fused multiply-adds in K order, as a
        CUDA-core loop computes), ``"fp32-pairwise"`` (float32 products summed by a
        balanced binary tree, then c).
    promote_every : int, optional
        Add the instruction's accumulator into an IEEE float32 accumulator every this many
        elements of K (a multiple of the instruction's k dividing K) and restart it at +0:
        DeepSeek-V3's N_C = 128, cuBLAS's ``use_fast_accum=False``.  The float32
        accumulator starts at c and each promotion computes ``acc = fma(sa * sb, partial,
        acc)`` (``sa * sb`` rounded to float32; 1 without scales).
    scale_a, scale_b : array_like, optional
        Block-scaled instructions: M x (K / block) and (K / block) x N scales of the
        instruction's scale type, read inside each step.  With ``promote_every``: float32
        per-group scales, broadcastable to M x G and G x N (G = K / promote_every), used at
        each promotion (DeepSeek-V3's 1 x 128 and 128 x 128 tiles).  Otherwise: float32
        scalars, M x 1 and 1 x N, applied in an epilogue ``RN32(acc * RN32(sa * sb))`` as
        cuBLAS does.
    out_dtype : dtype, optional
        float32 (default), float16, bfloat16 (rounded to nearest-even from the instruction's
        result), or float64 for fp64 instructions.

    Returns
    -------
    numpy.ndarray
        M x N of ``out_dtype``.

    Raises
    ------
    ValueError
        K not a multiple of the instruction's k or of ``promote_every``; shapes that do not
        multiply; scales of the wrong shape.
    TypeError
        Operands whose dtype the instruction lacks; scales that are not float.

    Examples
    --------
    >>> import numpy as np, ml_dtypes, fp8kit
    >>> hopper = ("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3")
    >>> a = np.full((2, 4096), 1.0, ml_dtypes.float8_e4m3fn)
    >>> b = np.full((4096, 3), 2.0**-9, ml_dtypes.float8_e4m3fn)
    >>> a[:, 0] = b[0, :] = 448.0  # one large product: the others fall below its 13 bits
    >>> float(fp8kit.matmul(a, b, instruction=hopper)[0, 0])
    200704.0
    >>> float(fp8kit.matmul(a, b, instruction=hopper, promote_every=128)[0, 0])
    200711.75
    >>> float(fp8kit.matmul(a, b, instruction="exact")[0, 0])
    200712.0
    """
    inst = _instruction(instruction)
    gpu = None
    if _backends.kind_of(a, b, c, scale_a, scale_b) == "cuda":
        # GPU arrays: prepared here (O(MK + KN)), multiplied on the GPU by the same scalar
        # code (fp8kit.cuda._mma), the result a device array
        from .cuda import _mma as gpu

        def host(x, type_name=None):
            return (
                None if x is None else gpu.to_host(x, TYPES[type_name].dtype if type_name else None)
            )

        strs = isinstance(inst, str)
        a, b = host(a, None if strs else inst.a_type), host(b, None if strs else inst.b_type)
        c = host(c)
        st = None if strs or not inst.block else inst.scale_type
        scale_a, scale_b = host(scale_a, st), host(scale_b, st)
    av, bv = np.asarray(a), np.asarray(b)
    if av.ndim != 2 or bv.ndim != 2:
        raise ValueError(f"a and b must be 2-D; got shapes {av.shape} and {bv.shape}")
    packed = not isinstance(inst, str) and inst.packed and av.dtype == np.uint8
    m, k = av.shape[0], av.shape[1] * (2 if packed else 1)
    kb_, n = bv.shape[0] * (2 if packed else 1), bv.shape[1]
    if packed:  # (B's codes pair along K: give B as N x K/2 bytes, transposed)
        raise ValueError(
            "matmul takes e2m1 operands as float4_e2m1fn arrays (packed uint8 codes are "
            "taken by calling the instruction itself)"
        )
    if kb_ != k:
        raise ValueError(f"a ({av.shape}) and b ({bv.shape}) do not multiply: K differs")
    c_type = "f32" if isinstance(inst, str) else inst.c_type
    if c is None:
        cv = np.zeros((m, n))
    else:
        cv = _engine.c_values(c, c_type, (m, n)) if not isinstance(inst, str) else None
        if cv is None:
            cc = np.asarray(c)
            if cc.dtype != np.float32 or cc.shape != (m, n):
                raise ValueError(f"c must be float32 of shape {(m, n)}, got {cc.dtype} {cc.shape}")
            cv = cc.astype(np.float64)
    nc = 0
    sa = sb = ga = gb = None
    if isinstance(inst, str):
        if promote_every is not None:
            raise ValueError(f"promote_every applies to instructions, not to {inst!r}")
        step = 1
    else:
        step = inst.k
        if k % step:
            raise ValueError(
                f"K={k} is not a multiple of {inst.shape_and_type}'s k={inst.k}: a kernel "
                "chains whole instructions (pad K with zeros yourself if that is meant)"
            )
    if promote_every is not None:
        if isinstance(promote_every, bool) or not isinstance(promote_every, (int, np.integer)):
            raise TypeError(f"promote_every must be an int, got {type(promote_every).__name__}")
        nc = int(promote_every)
        if nc <= 0 or nc % step or k % nc:
            raise ValueError(
                f"promote_every={nc} must be a positive multiple of the instruction's k={step} "
                f"that divides K={k}"
            )
    if not isinstance(inst, str) and inst.block:
        nb = k // inst.block
        sa = _engine.scales(scale_a, inst.scale_type, "scale_a", (m, nb))
        sb = np.ascontiguousarray(_engine.scales(scale_b, inst.scale_type, "scale_b", (nb, n)).T)
        epilogue = None
    elif nc and (scale_a is not None or scale_b is not None):
        g = k // nc
        what = f"per-group scales broadcast to ({m}, {g}) and ({g}, {n}) (G = K / promote_every)"
        ga = _scale_array(1.0 if scale_a is None else scale_a, "scale_a", (m, g), what)
        gb = np.ascontiguousarray(
            _scale_array(1.0 if scale_b is None else scale_b, "scale_b", (g, n), what).T
        )
        epilogue = None
    elif scale_a is not None or scale_b is not None:
        what = "epilogue scales are scalars, M x 1 (scale_a) and 1 x N (scale_b)"
        ea = _scale_array(1.0 if scale_a is None else scale_a, "scale_a", (m, 1), what)
        eb = _scale_array(1.0 if scale_b is None else scale_b, "scale_b", (1, n), what)
        epilogue = (ea, eb)
    else:
        epilogue = None
    od = np.dtype(out_dtype)
    if od not in _OUT or (od == np.float64) != (c_type == "f64"):
        allowed = "float64" if c_type == "f64" else "float32, float16, bfloat16"
        raise ValueError(f"out_dtype {od.name} is not supported here; allowed: {allowed}")
    prep = _engine.prepare(inst, av, bv, cv, nc=nc, scale_a=sa, scale_b=sb, gscale_a=ga,
                           gscale_b=gb, fast=gpu is None)  # fmt: skip
    # (K = 0: no step runs, the result is c)
    if k == 0:
        values = cv.astype(np.float64)
    else:
        values = _engine.launch(prep) if gpu is None else gpu.launch_device(prep)
    d_type = "f32" if isinstance(inst, str) or nc else inst.d_type
    canonical = isinstance(inst, str) or nc or inst.model in _engine._CANONICAL
    if epilogue is not None:
        values = _epilogue(values.astype(np.float32), *epilogue).astype(np.float64)
        d_type = "f32"
    d = _engine.finish(values, d_type, bool(canonical))
    out = d if od == d.dtype else _as_out(d, od, bool(canonical))
    return out if gpu is None else gpu.to_device(out)


def _as_out(d: np.ndarray, od: np.dtype, canonical: bool) -> np.ndarray:
    """The instruction's result as ``out_dtype`` (nearest-even), NaN canonical."""
    with np.errstate(over="ignore", invalid="ignore"):  # (beyond float16's range: Inf)
        out = d.astype(od)
    return _engine.canonical_nan(out) if canonical and od != np.float64 else out


def _epilogue(acc32, sa, sb) -> np.ndarray:
    """cuBLAS's alpha epilogue: ``RN32(acc * RN32(sa * sb) + 0)``: the float64 product of
    two float32 values is exact, rounded once; an exact zero product gives +0."""
    with np.errstate(invalid="ignore", over="ignore"):  # (Inf and NaN as IEEE gives them)
        alpha = (sa.astype(np.float32) * sb.astype(np.float32)).astype(np.float64)
        y = (acc32.astype(np.float64) * alpha + 0.0).astype(np.float32)
    return y


# -- torch._scaled_mm ----------------------------------------------------------------------
#: The GPUs :func:`scaled_mm` reproduces: their instruction (the fused step cuBLAS's FP8
#: kernels run), how slow accumulation promotes, and the split-K layout of their kernels.
HARDWARE = {
    "h100-pcie": dict(
        instruction=("Hopper", "wgmma", "m64n8k32.f32.e4m3.e4m3"),
        gpu="NVIDIA H100 PCIe (sm_90, 114 SMs), cuBLASLt 12.8.3.14, torch 2.7.1",
        profile="hopper",
        schemes=("contiguous",),
        tile=128,
    ),
    "rtx4060": dict(
        instruction=("Ada Lovelace", "mma", "m16n8k32.f32.e4m3.e4m3.f32"),
        gpu="NVIDIA GeForce RTX 4060 (sm_89, 24 SMs), cuBLASLt 12.8.3.14, torch 2.7.1",
        profile="ada",
        schemes=("serial", "pairwise"),
        tile=64,
    ),
}
_FP8 = {np.dtype(ml_dtypes.float8_e4m3fn): "e4m3", np.dtype(ml_dtypes.float8_e5m2): "e5m2"}
_FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
#: Promotion interval of cuBLAS's slow accumulation (unsplit calls), measured on both GPUs.
SLOW_CHUNK = 128


def _hw_instruction(hardware: str, fa: str, fb: str):
    name = HARDWARE[hardware]["instruction"]
    arch, kind, shape = name
    parts = shape.split(".")
    parts[2], parts[3] = fa, fb  # the same fused step for every fp8 pair
    return _mma.instruction(arch, kind, ".".join(parts))


def _chain(a, b, idx, inst, fast: bool):
    """fp32 partial over the K indices ``idx`` (-1: a zero code) as cuBLAS runs one split:
    one chain (fast), or chains of 128 from +0 added serially in fp32 (slow)."""
    k = a.shape[1]
    if len(idx) == k and np.array_equal(idx, np.arange(k)):
        aa, bb = a, b  # (an unsplit call whose K needs no padding: no copy)
    else:
        z_a = np.zeros((a.shape[0], 1), a.dtype)
        z_b = np.zeros((1, b.shape[1]), b.dtype)
        aa = np.ascontiguousarray(np.concatenate([a, z_a], axis=1)[:, idx])
        bb = np.ascontiguousarray(np.concatenate([b, z_b], axis=0)[idx, :])
    return matmul(aa, bb, instruction=inst, promote_every=None if fast else SLOW_CHUNK)


def _split_indices(k: int, s: int, scheme: str, tile: int) -> list[np.ndarray]:
    """K indices of each split in chain order (-1 pads a ragged tile with zero codes)."""
    t = -(-k // tile)
    if scheme == "contiguous":
        q = -(-t // s)
        out = []
        for i in range(s):
            r = np.arange(min(i * q, t) * tile, min((i + 1) * q, t) * tile)
            out.append(np.where(r < k, r, -1))
        return out
    tp = -(-t // s) * s
    r = np.arange(tp * tile).reshape(tp // s, s, tile).transpose(1, 0, 2).reshape(s, -1)
    return [np.where(row < k, row, -1) for row in r]


def _combine(parts: list[np.ndarray], scheme: str) -> np.ndarray:
    """The splits' fp32 partials combined in cuBLAS's order (round to nearest)."""
    with np.errstate(invalid="ignore", over="ignore"):  # (Inf - Inf is NaN, as on the GPU)
        return _combine_in_order(parts, scheme)


def _combine_in_order(parts: list[np.ndarray], scheme: str) -> np.ndarray:
    s = len(parts)
    if scheme in ("serial", "contiguous") or s == 1:
        acc = parts[0]
        for p in parts[1:]:
            acc = (acc + p).astype(np.float32)
        return acc
    h = -(-s // 2)  # pairwise: slot_i = p_i + p_(i+h) (if i + h < s - 1), from the last part
    acc = parts[s - 1]
    for i in range(h):
        slot = (parts[i] + parts[i + h]).astype(np.float32) if i + h < s - 1 else parts[i]
        acc = (acc + slot).astype(np.float32)
    return acc


def scaled_mm(
    a,
    b,
    scale_a,
    scale_b,
    *,
    bias=None,
    scale_result=None,
    out_dtype=None,
    use_fast_accum=False,
    hardware="h100-pcie",
    splitk=1,
):
    """``torch._scaled_mm`` as a GPU computes it, bit for bit, on numpy arrays.

    Tensor-wise scales: ``out = convert(RN32(acc * RN32(scale_a * scale_b)))`` where ``acc``
    is the FP8 GEMM's float32 accumulator as cuBLAS's kernels compute it on ``hardware``:
    one chain of the GPU's fused step over all of K with ``use_fast_accum=True``, and
    chains of 128 elements from +0 added in float32 with ``use_fast_accum=False``.

    Parameters
    ----------
    a : array_like
        M x K ``float8_e4m3fn`` or ``float8_e5m2`` (torch's ``mat1``, row-major).
    b : array_like
        K x N of those (torch's ``mat2``; on the GPU it is column-major, which does not
        change the values).  Both ``float8_e5m2`` is refused, as torch refuses it.
    scale_a, scale_b : float or array_like
        One float32 value each (tensor-wise scaling).
    bias : array_like, optional
        N values of ``out_dtype`` (bfloat16 or float16 outputs only, as torch): added in the
        float32 epilogue before the output's rounding (cuBLASLt's bias epilogue; this term
        has not been checked on hardware).
    scale_result : float, optional
        float8 outputs: the float32 result times this before the conversion.
    out_dtype : dtype, optional
        float32, bfloat16, float16, ``float8_e4m3fn`` or ``float8_e5m2`` (default: a's
        dtype).  float8 outputs saturate to their largest finite value (NaN stays NaN).
    use_fast_accum : bool
        cuBLAS's fast accumulation (one chain) or not (promotion every 128).
    hardware : str
        ``"h100-pcie"`` (default) or ``"rtx4060"``; :data:`HARDWARE` says what each is.
    splitk : int, tuple or str
        1 (default): the GPU ran the call unsplit.  ``(S, scheme)``: cuBLAS split K in S
        parts as that GPU's kernels split it (``"contiguous"`` runs of 128-wide k-tiles on
        the H100; ``"serial"`` or ``"pairwise"`` reduction of 64-wide k-tiles dealt in turn
        on the RTX 4060).  Whether cuBLAS splits a shape is its heuristic's choice, which
        fp8kit does not guess: ``"auto"`` looks it up in the tables mmaemu measured on those
        GPUs (``mmaemu.resolve_splitk``; mmaemu must be installed) and raises where they do
        not decide.

    Returns
    -------
    numpy.ndarray
        M x N of ``out_dtype``; NaN is the canonical NaN of the type.

    Raises
    ------
    ValueError
        For what torch refuses (K or N not a multiple of 16, two e5m2 operands, an output
        type the GPU refuses, bias with a float32 output), row-wise scales (whose kernels
        are not characterised here), an unknown hardware or a split layout its kernels do
        not use.
    TypeError
        Operands that are not float8.

    Examples
    --------
    >>> import numpy as np, ml_dtypes, fp8kit
    >>> a = np.full((16, 4096), 1.0, ml_dtypes.float8_e4m3fn)
    >>> b = np.full((4096, 16), 2.0**-9, ml_dtypes.float8_e4m3fn)
    >>> a[:, 0] = b[0, :] = 448.0
    >>> fast = fp8kit.scaled_mm(a, b, 1.0, 1.0, out_dtype=np.float32, use_fast_accum=True)
    >>> slow = fp8kit.scaled_mm(a, b, 1.0, 1.0, out_dtype=np.float32)
    >>> float(fast[0, 0]), float(slow[0, 0])
    (200704.0, 200711.75)
    """
    if hardware not in HARDWARE:
        raise ValueError(f"unknown hardware {hardware!r}; valid: {', '.join(HARDWARE)}")
    if not isinstance(use_fast_accum, (bool, np.bool_)):
        raise TypeError(f"use_fast_accum must be a bool, got {type(use_fast_accum).__name__}")
    av, bv = np.asarray(a), np.asarray(b)
    for arg, x in (("a", av), ("b", bv)):
        if x.dtype not in _FP8:
            raise TypeError(
                f"{arg} has dtype {x.dtype.name}; scaled_mm takes float8_e4m3fn or float8_e5m2"
            )
        if x.ndim != 2:
            raise ValueError(f"{arg} must be a matrix, got shape {x.shape}")
    fa, fb = _FP8[av.dtype], _FP8[bv.dtype]
    if fa == fb == "e5m2":
        raise ValueError(
            "a and b are both float8_e5m2: torch refuses two float8_e5m2 operands (one of "
            "them must be float8_e4m3fn)"
        )
    m, k = av.shape
    if bv.shape[0] != k:
        raise ValueError(f"a ({av.shape}) and b ({bv.shape}) cannot be multiplied")
    n = bv.shape[1]
    if k % 16 or n % 16:
        raise ValueError(
            f"K={k} and N={n} must be multiples of 16 (torch's _scaled_mm requires it)"
        )
    od = av.dtype if out_dtype is None else np.dtype(out_dtype)
    outs = {np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), *_FP8}
    if od not in outs:
        raise ValueError(
            f"out_dtype {od.name} is not supported; allowed: float32, bfloat16, float16, "
            "float8_e4m3fn, float8_e5m2"
        )
    if od == ml_dtypes.float8_e5m2 and fa == fb == "e4m3" and m and n and k:
        # (torch returns an empty or zero result before cuBLAS sees the call)
        raise ValueError(
            f"out_dtype float8_e5m2 with a and b both float8_e4m3fn is refused by cuBLASLt "
            f"on {hardware} (CUBLAS_STATUS_NOT_SUPPORTED); allowed there: float32, bfloat16, "
            "float16, float8_e4m3fn"
        )
    sa, sb = np.asarray(scale_a), np.asarray(scale_b)
    if sa.size != 1 or sb.size != 1:
        raise ValueError(
            "scale_a and scale_b must hold one value each (tensor-wise scaling); row-wise "
            "scales run other kernels whose accumulation is not characterised here"
        )
    for arg, x in (("scale_a", sa), ("scale_b", sb)):
        if x.dtype.kind != "f":
            raise TypeError(f"{arg} must be a float32 value, got dtype {x.dtype.name}")
    if bias is not None:
        if od not in (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)):
            raise ValueError(f"bias needs a bfloat16 or float16 out_dtype, not {od.name}")
        bias = np.asarray(bias)
        if bias.dtype != od or bias.size != n:
            raise ValueError(
                f"bias must hold {n} values of {od.name}, got {bias.dtype} {bias.shape}"
            )
    spec = HARDWARE[hardware]
    if isinstance(splitk, (int, np.integer)) and not isinstance(splitk, bool) and splitk == 1:
        s, scheme = 1, "none"
    elif (
        isinstance(splitk, tuple)
        and len(splitk) == 2
        and isinstance(splitk[0], (int, np.integer))
        and splitk[0] >= 1
    ):
        s, scheme = int(splitk[0]), splitk[1]
        if s > 1 and scheme not in spec["schemes"]:
            raise ValueError(
                f"splitk={splitk!r}: {scheme!r} is not a split layout of {hardware}'s "
                f"kernels; valid: {', '.join(spec['schemes'])}"
            )
    elif isinstance(splitk, str) and splitk == "auto":
        s, scheme = _measured_split(hardware, m, n, k, av.dtype, bv.dtype, od, use_fast_accum)
    else:
        raise ValueError(f"splitk must be 1, (S, scheme) or 'auto', got {splitk!r}")
    inst = _hw_instruction(hardware, fa, fb)
    fast = bool(use_fast_accum)
    if m == 0 or n == 0 or k == 0:
        # torch returns before cuBLAS: an empty result, or +0 for every scale (K = 0)
        return np.zeros((m, n), od)
    if s == 1:
        kp = -(-k // (inst.k if fast else SLOW_CHUNK)) * (inst.k if fast else SLOW_CHUNK)
        idx = np.where(np.arange(kp) < k, np.arange(kp), -1)
        acc = _chain(av, bv, idx, inst, fast)
    else:
        parts = []
        for idx in _split_indices(k, s, scheme, spec["tile"]):
            if len(idx) == 0:
                parts.append(np.zeros((m, n), np.float32))
                continue
            if not fast and scheme != "contiguous":
                # the chain restarts every 2 of the split's own 64-wide tiles (128 elements)
                pad = -len(idx) % SLOW_CHUNK
                idx = np.concatenate([idx, np.full(pad, -1)])
            parts.append(_chain(av, bv, idx, inst, fast))
        acc = _combine(parts, scheme)
    y = _epilogue(acc, np.float32(sa.reshape(())), np.float32(sb.reshape(())))
    return _to_out(y, od, bias, scale_result)


def _measured_split(hardware, m, n, k, a_dtype, b_dtype, od, fast) -> tuple[int, str]:
    """(S, scheme) that cuBLAS chose on ``hardware`` for this call, from the heuristic tables
    mmaemu recorded on that GPU (an optional dependency: fp8kit ships no copy of them)."""
    try:
        import mmaemu
        import torch
    except ImportError:
        raise ValueError(
            "splitk='auto' looks the split up in the tables mmaemu measured on the GPU "
            "(pip install mmaemu); otherwise pass splitk=1 (the GPU ran the call unsplit) or "
            "(S, scheme)"
        ) from None
    tdt = {np.dtype(ml_dtypes.float8_e4m3fn): torch.float8_e4m3fn,
           np.dtype(ml_dtypes.float8_e5m2): torch.float8_e5m2,
           np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
           np.dtype(ml_dtypes.bfloat16): torch.bfloat16}  # fmt: skip
    try:
        d = mmaemu.resolve_splitk(m, n, k, a_dtype=tdt[a_dtype], b_dtype=tdt[b_dtype],
                                  out_dtype=tdt[od], use_fast_accum=bool(fast),
                                  profile=HARDWARE[hardware]["profile"])  # fmt: skip
    except mmaemu.SplitKUnknownError as exc:
        raise ValueError(
            f"splitk='auto': the split cuBLAS chooses for ({m}, {n}, {k}) on {hardware} is "
            f"not in mmaemu's measured tables ({exc}); pass splitk=1 or (S, scheme)"
        ) from None
    return (1, "none") if d.S == 1 else (int(d.S), d.scheme)


def _to_out(y: np.ndarray, od: np.dtype, bias, scale_result) -> np.ndarray:
    """The float32 result as ``out_dtype`` (torch's epilogue): bias added in float32;
    float8 outputs scaled by scale_result, saturated (NaN kept) and rounded to
    nearest-even; NaN canonical."""
    if bias is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            y = (y + bias.astype(np.float32).reshape(1, -1)).astype(np.float32)
    if od in _FP8:
        if scale_result is not None:
            with np.errstate(invalid="ignore", over="ignore"):
                y = (y.astype(np.float64) * np.float64(np.float32(scale_result))).astype(np.float32)
        mx = _FP8_MAX[_FP8[od]]
        y = np.where(np.isnan(y), y, np.clip(y, -mx, mx)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # (beyond float16's range: Inf)
        out = y.astype(od)
    return _engine.canonical_nan(out)
