"""A fingerprint of fp8kit's results, to compare across dependency versions.

``python .ci/bits.py OUT.json`` writes a digest of the bits of each of ~360 results: encode
and round_to of every float16 and bfloat16 bit pattern and of random float32 and float64
data (specials and random bit patterns among them) to formats of every special-value
convention, with and without saturation; decode of every code to the four float dtypes;
every rounding mode (stochastic ones seeded); fake_convert, the study's quantize and
scales, casts to integers and packing.  .ci/run's min-versions job runs it with the
dependency floors and with the newest versions and requires the same file.
"""

import hashlib
import json
import sys
import warnings

import ml_dtypes
import numpy as np

import fp8kit
from fp8kit.codec import ROUNDING_MODES

warnings.simplefilter("ignore")  # (numpy's own casts of the boundary values warn)


def digest(a) -> str:
    a = np.ascontiguousarray(np.asarray(a))
    what = a.tobytes() + f"{a.dtype}{a.shape}".encode()
    return hashlib.sha256(what).hexdigest()[:16]


def main(path: str) -> None:
    rng = np.random.default_rng(12345)
    f32 = rng.standard_normal(100_000) * rng.choice([1e-9, 1e-3, 1.0, 300.0, 1e6], 100_000)
    f32 = f32.astype(np.float32)
    f32[:8] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 448.0, 464.0, -57344.0]
    f32 = np.concatenate([f32, rng.integers(0, 2**32, 50_000, dtype=np.uint32).view(np.float32)])
    f64 = np.concatenate(
        [f32.astype(np.float64), rng.integers(0, 2**64, 50_000, dtype=np.uint64).view(np.float64)]
    )
    inputs = {
        "f16": np.arange(65536, dtype=np.uint16).view(np.float16),
        "bf16": np.arange(65536, dtype=np.uint16).view(ml_dtypes.bfloat16),
        "f32": f32,
        "f64": f64,
    }
    user = fp8kit.FloatFormat(
        name="bits_e3m4", exponent_bits=3, mantissa_bits=4, bias=3, specials="ieee"
    )
    formats = [
        "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "bfloat16",
        "float16", "float8_e8m0fnu", "float4_e2m1fn", "float6_e3m2fn", "p3109_k8p3se",
        "p3109_k8p4uf", user,
    ]  # fmt: skip
    out = {}
    for f in formats:
        fmt = fp8kit.get_format(f) if isinstance(f, str) else f
        for iname, x in inputs.items():
            for sat in (True, False):
                out[f"encode/{fmt.name}/{iname}/{sat}"] = digest(fp8kit.encode(x, f, saturate=sat))
                out[f"round/{fmt.name}/{iname}/{sat}"] = digest(fp8kit.round_to(x, f, saturate=sat))
        codes = np.arange(2**fmt.bits, dtype=np.uint8 if fmt.bits <= 8 else np.uint16)
        for dt in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16):
            out[f"decode/{fmt.name}/{np.dtype(dt)}"] = digest(fp8kit.decode(codes, f, dtype=dt))
    for f in ("float8_e4m3fn", "float8_e5m2", "p3109_k8p3se"):
        for mode in ROUNDING_MODES:
            for iname in ("f32", "bf16", "f64"):
                seed = {"seed": 7} if "stochastic" in mode else {}
                codes = fp8kit.encode(inputs[iname], f, rounding=mode, **seed)
                out[f"mode/{f}/{mode}/{iname}"] = digest(codes)
    x = f32[:76800].reshape(300, 256)
    b = x.astype(ml_dtypes.bfloat16)
    out["fake/columns"] = digest(fp8kit.fake_convert(x, np.full((1, 256), 0.5, np.float32)))
    out["fake/rows"] = digest(fp8kit.fake_convert(b, np.full((300, 1), 2.0, b.dtype)))
    out["fake/e5m2"] = digest(fp8kit.fake_convert(x, np.float32(0.25), None, "f8e5m2"))
    g = (rng.standard_normal((256, 128)) * 3).astype(np.float32)
    out["quantize/tensor"] = digest(fp8kit.study.quantize(g, "float8_e4m3fn"))
    out["quantize/block"] = digest(fp8kit.study.quantize(g, "float8_e4m3fn", "block"))
    out["quantize/f64"] = digest(fp8kit.study.quantize(g.astype(np.float64), "float8_e5m2"))
    out["scale/channel"] = digest(fp8kit.study.scale_for(g, "float8_e4m3fn", "channel"))
    for to in ("float8_e4m3fn", "int4", "uint8", "float4_e2m1fn"):
        out[f"cast/{to}"] = digest(fp8kit.cast(f32, to))
    out["pack"] = digest(fp8kit.pack(fp8kit.encode(f32[:4096], "float4_e2m1fn"), "float4_e2m1fn"))
    with open(path, "w") as file:
        json.dump(out, file, indent=0, sort_keys=True)
    import numba

    print(f"{len(out)} results' bits with numba {numba.__version__}, numpy {np.__version__}, "
          f"ml_dtypes {ml_dtypes.__version__}, Python {sys.version.split()[0]}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
