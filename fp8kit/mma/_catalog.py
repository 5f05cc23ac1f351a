"""Which instructions exist, and the published model parameters of each.

The names are those of PTX and of AMD's ISA as MMA-Sim (Xie et al., arXiv 2511.10909;
``mmasim`` 2.1.1) lists them; the parameters are that paper's, measured on the hardware.
Everything here is data: :class:`fp8kit.mma.Instruction` carries it, the kernels in
:mod:`fp8kit._kernels.mma` read it, nothing branches on an architecture's name elsewhere.
"""

from __future__ import annotations

NV_ARCHS = ("Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell", "RTX Blackwell")
AMD_ARCHS = ("CDNA1", "CDNA2", "CDNA3")
ARCHS = NV_ARCHS + AMD_ARCHS
KINDS = ("mma", "mma.block_scale", "wgmma", "tcgen05.mma", "tcgen05.mma.block_scale", "mfma")

#: fp8/fp6/fp4 element types of the ``kind::f8f6f4`` instructions
F8F6F4 = ("e5m2", "e4m3", "e3m2", "e2m3", "e2m1")
_FP8 = ("e5m2", "e4m3")


def _sm70():
    return ["m8n8k4.f32.f16.f16.f32", "m8n8k4.f32.f16.f16.f16", "m8n8k4.f16.f16.f16.f16"]


def _sm75():
    return ["m16n8k8.f32.f16.f16.f32", "m16n8k8.f16.f16.f16.f16"]


def _sm80():
    return [
        "m8n8k4.f64.f64.f64.f64",
        "m16n8k8.f32.tf32.tf32.f32",
        "m16n8k4.f32.tf32.tf32.f32",
        "m16n8k16.f32.f16.f16.f32",
        "m16n8k16.f16.f16.f16.f16",
        "m16n8k16.f32.bf16.bf16.f32",
        "m16n8k8.f32.bf16.bf16.f32",
    ]


def _sm89():
    return [
        f"m16n8k{k}.{d}.{a}.{b}.{d}"
        for k in (32, 16)
        for d in ("f32", "f16")
        for a in _FP8
        for b in _FP8
    ]


def _sm90():
    return [f"m16n8k{k}.f64.f64.f64.f64" for k in (16, 8, 4)]


def _sm120():
    return [
        f"m16n8k32.kind::f8f6f4.{d}.{a}.{b}.{d}"
        for d in ("f32", "f16")
        for a in F8F6F4
        for b in F8F6F4
    ]


def _mma():
    return {
        "Volta": _sm70(),
        "Turing": _sm75() + _sm70(),
        "Ampere": _sm80() + _sm75(),
        "Ada Lovelace": _sm89() + _sm80() + _sm75(),
        "Hopper": _sm90() + _sm80() + _sm75(),
        "Blackwell": _sm80() + _sm75(),
        "RTX Blackwell": _sm120() + _sm89() + _sm80() + _sm75(),
    }


def _mma_block_scale():
    names = [
        f"m16n8k32.kind::mxf8f6f4.block32.f32.{a}.{b}.f32.ue8m0" for a in F8F6F4 for b in F8F6F4
    ]
    names += [
        "m16n8k64.kind::mxf4.block32.f32.e2m1.e2m1.f32.ue8m0",
        "m16n8k64.kind::mxf4nvf4.block32.f32.e2m1.e2m1.f32.ue8m0",
        "m16n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.f32.ue8m0",
        "m16n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.f32.ue4m3",
    ]
    return {"RTX Blackwell": names}


_N8 = range(8, 257, 8)


def _wgmma():
    names = [f"m64n{n}k8.f32.tf32.tf32" for n in _N8]
    names += [f"m64n{n}k16.{d}.f16.f16" for d in ("f32", "f16") for n in _N8]
    names += [f"m64n{n}k16.f32.bf16.bf16" for n in _N8]
    names += [
        f"m64n{n}k32.{d}.{a}.{b}" for n in _N8 for d in ("f32", "f16") for a in _FP8 for b in _FP8
    ]
    return {"Hopper": names}


def _tcgen05():
    mn = [(m, n) for m in (64, 128) for n in _N8]
    names = [f"m{m}n{n}k8.kind::tf32.f32.tf32.tf32" for m, n in mn]
    names += [f"m{m}n{n}k16.kind::f16.f32.{t}.{t}" for m, n in mn for t in ("f16", "bf16")]
    names += [f"m{m}n{n}k16.kind::f16.f16.f16.f16" for m, n in mn]
    names += [
        f"m{m}n{n}k32.kind::f8f6f4.{d}.{a}.{b}"
        for m, n in mn
        for d in ("f32", "f16")
        for a in F8F6F4
        for b in F8F6F4
    ]
    return {"Blackwell": names}


def _tcgen05_block_scale():
    names = [
        f"m128n{n}k32.kind::mxf8f6f4.block32.f32.{a}.{b}.ue8m0"
        for n in _N8
        for a in F8F6F4
        for b in F8F6F4
    ]
    names += [f"m128n{n}k64.kind::mxf4.block32.f32.e2m1.e2m1.ue8m0" for n in _N8]
    names += [f"m128n{n}k64.kind::mxf4nvf4.block32.f32.e2m1.e2m1.ue8m0" for n in _N8]
    names += [
        f"m128n{n}k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.{s}"
        for n in _N8
        for s in ("ue8m0", "ue4m3")
    ]
    return {"Blackwell": names}


_CDNA1 = [
    "f32_32x32x2f32", "f32_32x32x1f32", "f32_16x16x4f32", "f32_16x16x1f32", "f32_4x4x1f32",
    "f32_32x32x8f16", "f32_32x32x4f16", "f32_16x16x16f16", "f32_16x16x4f16", "f32_4x4x4f16",
    "f32_32x32x4bf16", "f32_32x32x2bf16", "f32_16x16x8bf16", "f32_16x16x2bf16", "f32_4x4x2bf16",
]  # fmt: skip
_CDNA2 = [
    "f64_16x16x4f64", "f64_4x4x4f64",
    "f32_32x32x8bf16_1k", "f32_32x32x4bf16_1k", "f32_16x16x16bf16_1k", "f32_16x16x4bf16_1k",
    "f32_4x4x4bf16_1k",
]  # fmt: skip
_CDNA3 = [
    "f64_16x16x4_f64",
    "f64_4x4x4_4b_f64",
    "f32_32x32x1_2b_f32",
    "f32_16x16x1_4b_f32",
    "f32_4x4x1_16b_f32",
    "f32_32x32x2_f32",
    "f32_16x16x4_f32",
    "f32_16x16x8_xf32",
    "f32_32x32x4_xf32",
    "f32_32x32x4_2b_f16",
    "f32_16x16x4_4b_f16",
    "f32_4x4x4_16b_f16",
    "f32_32x32x8_f16",
    "f32_16x16x16_f16",
    "f32_32x32x4_2b_bf16",
    "f32_16x16x4_4b_bf16",
    "f32_4x4x4_16b_bf16",
    "f32_32x32x8_bf16",
    "f32_16x16x16_bf16",
] + [
    f"f32_{s}_{a}_{b}"
    for s in ("16x16x32", "32x32x16")
    for a in ("bf8", "fp8")
    for b in ("bf8", "fp8")
]


def _mfma():
    return {"CDNA1": list(_CDNA1), "CDNA2": _CDNA2 + _CDNA1, "CDNA3": list(_CDNA3)}


CATALOG: dict[str, dict[str, list[str]]] = {
    "mma": _mma(),
    "mma.block_scale": _mma_block_scale(),
    "wgmma": _wgmma(),
    "tcgen05.mma": _tcgen05(),
    "tcgen05.mma.block_scale": _tcgen05_block_scale(),
    "mfma": _mfma(),
}

# -- model parameters (MMA-Sim's tables) ------------------------------------------------
#: fractional bits kept by mma's fused dot-add, per architecture (16-bit and tf32 inputs)
MMA_FRAC = {"Volta": 23, "Turing": 24, "Ampere": 24, "Ada Lovelace": 24, "Hopper": 25,
            "Blackwell": 25, "RTX Blackwell": 25}  # fmt: skip
#: bytes of A consumed by one fused step of mma (products per step = bytes / element size)
MMA_STEP_BYTES = {"Volta": 8, "Turing": 16, "Ampere": 16, "Ada Lovelace": 16, "Hopper": 32,
                  "Blackwell": 32, "RTX Blackwell": 32}  # fmt: skip
#: exponent a zero term takes in the alignment, with fp16 and with fp32 results
MMA_EZERO_F16 = {"Volta": -19, "Turing": -20, "Ampere": -20, "Ada Lovelace": -20, "Hopper": -21,
                 "Blackwell": -21, "RTX Blackwell": -21}  # fmt: skip
MMA_EZERO_F32 = {"Volta": -131, "Turing": -132, "Ampere": -132, "Ada Lovelace": -132,
                 "Hopper": -133, "Blackwell": -133, "RTX Blackwell": -133}  # fmt: skip
