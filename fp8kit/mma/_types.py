"""Operand types of the instructions: their numpy dtypes and MMA-Sim's normalisation."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class OperandType:
    """One operand type as PTX/AMD names it.

    ``esub``: the exponent MMA-Sim clamps subnormals at (the type's smallest normal
    exponent); ``bits``: storage bits per element, which set how many products a fused step
    takes (``step bytes * 8 // bits``); ``narrow``: at most 8 bits, whose products are
    exact in float32 with at most 8 significant bits (the fast kernel's proof);
    ``tf32``: float32 data truncated to tf32's 10 fractional bits first.
    """

    name: str
    dtype: np.dtype
    esub: int
    bits: int
    narrow: bool = False
    tf32: bool = False


def _t(name, dtype, esub, bits, narrow=False, tf32=False):
    return OperandType(name, np.dtype(dtype), esub, bits, narrow, tf32)


TYPES = {
    t.name: t
    for t in (
        _t("e4m3", ml_dtypes.float8_e4m3fn, -6, 8, True),
        _t("e5m2", ml_dtypes.float8_e5m2, -14, 8, True),
        _t("e3m2", ml_dtypes.float6_e3m2fn, -2, 8, True),
        _t("e2m3", ml_dtypes.float6_e2m3fn, 0, 8, True),
        _t("e2m1", ml_dtypes.float4_e2m1fn, 0, 8, True),
        _t("fp8", ml_dtypes.float8_e4m3fnuz, -7, 8, True),
        _t("bf8", ml_dtypes.float8_e5m2fnuz, -15, 8, True),
        _t("f16", np.float16, -14, 16),
        _t("bf16", ml_dtypes.bfloat16, -126, 16),
        _t("tf32", np.float32, -126, 32, tf32=True),
        _t("xf32", np.float32, -126, 32, tf32=True),
        _t("f32", np.float32, -126, 32),
        _t("f64", np.float64, -1022, 64),
        _t("ue8m0", ml_dtypes.float8_e8m0fnu, -127, 8),
        _t("ue4m3", ml_dtypes.float8_e4m3fn, -6, 8),
    )
}

#: (exponent bits, mantissa bits) of the types MMA-Sim also takes as uint8 codes: fp6 in
#: bits 5:0 of a byte, fp4 in bits 5:2 (kind::f8f6f4), or two fp4 codes a byte, the high
#: nibble first (kind::mxf4 and mxf4nvf4).
SUB_BYTE = {"e3m2": (3, 2), "e2m3": (2, 3), "e2m1": (2, 1)}
