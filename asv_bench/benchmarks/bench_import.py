"""Start-up costs, each measured in a fresh interpreter (asv ``timeraw_`` benchmarks).

A ``timeraw_`` function returns the code to time, or ``(code, setup_code)``; asv runs the
setup and then times the code once in a new Python process per sample.  The cold first
calls of every public function (``timeraw_public_cold``, each compiling in an empty Numba
cache) are a handful by default and all of them with ``FP8KIT_ASV_FULL=1``.
"""

from ._grid import FULL

# Setup for the first-call benchmarks: an empty Numba disk cache (fresh temporary
# NUMBA_CACHE_DIR, set before numba is imported, removed at exit), fp8kit imported and the
# inputs built, so the timed statement is only the first call.  Codes for decode come from
# ml_dtypes so that no fp8kit kernel has been compiled before the timed call.
_FIRST_CALL_SETUP = """
import atexit, os, shutil, subprocess, sys, tempfile
cache_dir = tempfile.mkdtemp(prefix="fp8kit-asv-numba-")
atexit.register(shutil.rmtree, cache_dir, True)
os.environ["NUMBA_CACHE_DIR"] = cache_dir
{warm}
import ml_dtypes
import numpy as np
import fp8kit
x = np.random.default_rng(0).standard_normal(4096, dtype=np.float32)
codes = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
big = np.random.default_rng(0).standard_normal(1 << 20, dtype=np.float32)
a8 = big[: 64 * 512].reshape(64, 512).astype(ml_dtypes.float8_e4m3fn)
b8 = big[: 512 * 256].reshape(512, 256).astype(ml_dtypes.float8_e4m3fn)
a8z, b8z = a8.astype(ml_dtypes.float8_e4m3fnuz), b8.astype(ml_dtypes.float8_e4m3fnuz)
HOPPER = ("Hopper", "wgmma", "m64n256k32.f32.e4m3.e4m3")
"""

# Fills the (fresh) cache from another process first, for the warm-cache variant.
_WARM_CACHE = """
subprocess.run(
    [sys.executable, "-c",
     "import numpy as np, ml_dtypes, fp8kit; x = np.zeros(8, np.float32); "
     "fp8kit.decode(fp8kit.encode(x, 'float8_e4m3fn'), 'float8_e4m3fn'); "
     "a = np.ones((4, 64), ml_dtypes.float8_e4m3fn); "
     "fp8kit.matmul(a, a.T.copy(), instruction=('Hopper', 'wgmma', 'm64n256k32.f32.e4m3.e4m3'))"],
    check=True,
)
"""

_FIRST_CALL = {
    "encode": "fp8kit.encode(x, 'float8_e4m3fn')",
    "decode": "fp8kit.decode(codes, 'float8_e4m3fn')",
    "matmul": "fp8kit.matmul(a8, b8, instruction=HOPPER)",
}


def timeraw_import_fp8kit():
    """``import fp8kit`` (nothing compiles at import)."""
    return "import fp8kit"


def timeraw_import_dependencies():
    """numpy + ml_dtypes + numba alone: the floor under ``import fp8kit``."""
    return "import numpy, ml_dtypes, numba"


def timeraw_first_call_compile(op):
    """First encode/decode call with an empty Numba cache: compiles one kernel."""
    return _FIRST_CALL[op], _FIRST_CALL_SETUP.format(warm="")


timeraw_first_call_compile.params = ["encode", "decode"]
timeraw_first_call_compile.param_names = ["op"]


def timeraw_first_call_cached(op):
    """First encode/decode/matmul call when another process already filled the cache."""
    return _FIRST_CALL[op], _FIRST_CALL_SETUP.format(warm=_WARM_CACHE)


timeraw_first_call_cached.params = ["encode", "decode", "matmul"]
timeraw_first_call_cached.param_names = ["op"]


# Every public function that runs kernels, on 1M float32 elements (threaded), cold: each
# one in a fresh process with an empty cache.  (Kept in step with benchmarks/compare.py.)
_PUBLIC_COLD = {
    # the floor: Numba's own first compile in a process, with a trivial kernel
    "trivial_njit": "__import__('numba').njit(lambda a: a[0] + 1)(big)",
    "encode": "fp8kit.encode(big, 'float8_e4m3fn')",
    "encode_float64": "fp8kit.encode(big.astype(np.float64), 'float8_e4m3fn')",
    "encode_bfloat16": "fp8kit.encode(big.astype(ml_dtypes.bfloat16), 'float8_e4m3fn')",
    "decode": "fp8kit.decode(codes, 'float8_e4m3fn')",
    "decode_to_float64": "fp8kit.decode(codes, 'float8_e4m3fn', dtype=np.float64)",
    "decode_to_bfloat16": "fp8kit.decode(codes, 'float8_e4m3fn', dtype=ml_dtypes.bfloat16)",
    "round_to": "fp8kit.round_to(big, 'float8_e4m3fn')",
    "round_to_bfloat16": "fp8kit.round_to(big.astype(ml_dtypes.bfloat16), 'float8_e4m3fn')",
    "astype": "fp8kit.astype(big, 'float8_e4m3fn')",
    "cast": "fp8kit.cast(big, 'FLOAT8E4M3FN')",
    "cast_bfloat16": "fp8kit.cast(big.astype(ml_dtypes.bfloat16), 'FLOAT8E4M3FN')",
    "cast_integer": "fp8kit.cast((big * 1000).astype(np.int16), np.int8)",
    "convert_promote_types": "fp8kit.convert_promote_types(big, (big * 1000).astype(np.int16))",
    "pack": "fp8kit.pack(codes & np.uint8(15), 'float4_e2m1fn')",
    "unpack": "fp8kit.unpack(np.zeros(64, np.uint8), 'float4_e2m1fn', 128)",
    "fake_convert": "fp8kit.fake_convert(big, 2.0, destination_type='f8e4m3')",
    "fake_convert_bfloat16": "fp8kit.fake_convert(big.astype(ml_dtypes.bfloat16), "
    "np.array(2.0, ml_dtypes.bfloat16), destination_type='f8e4m3')",
    "round_to_stochastic": "fp8kit.round_to(big, 'float8_e4m3fn', rounding='stochastic', seed=1)",
    "round_to_stochastic_bfloat16": "fp8kit.round_to(big.astype(ml_dtypes.bfloat16), "
    "'float8_e4m3fn', rounding='stochastic', seed=1)",
    "round_to_stochastic_float64": "fp8kit.round_to(big.astype(np.float64), 'float8_e4m3fn', "
    "rounding='stochastic', seed=1)",
    "encode_stochastic": "fp8kit.encode(big, 'float8_e4m3fn', rounding='stochastic', seed=1)",
    "study_quantize": "fp8kit.study.quantize(big.reshape(1024, 1024), 'float8_e4m3fn', 'block')",
    "study_quantize_tensor": "fp8kit.study.quantize(big.reshape(1024, 1024), 'float8_e4m3fn')",
    "study_scale_for": "fp8kit.study.scale_for(big.reshape(1024, 1024), 'float8_e4m3fn', "
    "'channel')",
    "study_mx_scales": "fp8kit.study.mx_scales(big.reshape(1024, 1024), 'float8_e4m3fn')",
    "study_error_metrics": "fp8kit.study.error_metrics(big, big, fmt='float8_e4m3fn')",
    "round_to_float64": "fp8kit.round_to(big.astype(np.float64), 'float8_e4m3fn')",
    "round_to_float4": "fp8kit.round_to(big, 'float4_e2m1fn')",
    "encode_float4": "fp8kit.encode(big, 'float4_e2m1fn')",
    "encode_to_bfloat16": "fp8kit.encode(big, 'bfloat16')",
    "decode_float16": "fp8kit.decode(big.astype(np.float16).view(np.uint16), 'float16')",
    "study_quantize_float64": "fp8kit.study.quantize(big.reshape(1024, 1024).astype(np.float64), "
    "'float8_e4m3fn', 'block')",
    "encode_toward_zero": "fp8kit.encode(big, 'float8_e4m3fn', rounding='toward_zero')",
    "fake_convert_openvino": "fp8kit.fake_convert(big, 2.0, destination_type='f8e4m3', "
    "mode='openvino')",
    "study_sweep": "fp8kit.study.sweep({'w': big.reshape(1024, 1024)}, "
    "['float8_e4m3fn', 'float8_e5m2'], ['tensor', 'channel', 'block:32'])",
    # the options the fourteenth pass made native
    "round_to_toward_zero": "fp8kit.round_to(big, 'float8_e4m3fn', rounding='toward_zero')",
    "round_to_flush_subnormals": "fp8kit.round_to(big, 'float8_e4m3fn', flush_subnormals=True)",
    "encode_e8m0": "fp8kit.encode(big, 'float8_e8m0fnu')",
    "encode_p3109_precision_1": "fp8kit.encode(big, 'p3109_k8p1se')",
    "fake_convert_toward_zero": "fp8kit.fake_convert(big, 2.0, rounding='toward_zero')",
    "fake_convert_stochastic": "fp8kit.fake_convert(big, 2.0, rounding='stochastic', seed=1)",
    "study_quantize_stochastic": "fp8kit.study.quantize(big.reshape(1024, 1024), "
    "'float8_e4m3fn', 'block', rounding='stochastic', seed=1)",
    # the fifteenth pass: Cast's legacy integer conversion native
    "cast_legacy_integer": "fp8kit.cast(big, np.int8, rules='legacy')",
    "round_to_stochastic_c": "fp8kit.round_to(big, 'float8_e4m3fn', rounding='stochastic_c', "
    "seed=1)",
    # the sixteenth pass: stochastic rounding to the 16-bit formats native
    "round_to_stochastic_to_bfloat16": "fp8kit.round_to(big, 'bfloat16', rounding='stochastic', "
    "seed=1)",
    "encode_float16_p3109_precision_1": "fp8kit.encode(big.astype(np.float16), 'p3109_k8p1se')",
    # the seventeenth pass: the options that still compiled a Numba kernel
    "round_to_stochastic_flush": "fp8kit.round_to(big, 'float8_e4m3fn', rounding='stochastic', "
    "seed=1, flush_subnormals=True)",
    "round_to_stochastic_e8m0": "fp8kit.round_to(big, 'float8_e8m0fnu', rounding='stochastic', "
    "seed=1)",
    "encode_p3109_precision_1_toward_zero": "fp8kit.encode(big, 'p3109_k8p1se', "
    "rounding='toward_zero')",
    "round_to_bfloat16_toward_zero": "fp8kit.round_to(big, 'bfloat16', rounding='toward_zero')",
    "round_to_bfloat16_data_to_float16": "fp8kit.round_to(big.astype(ml_dtypes.bfloat16), "
    "'float16')",
    "fake_convert_one_nan_row": "fp8kit.fake_convert(big.reshape(1024, 1024), "
    "np.where(np.arange(1024)[:, None] == 9, np.nan, 1.5).astype(np.float32))",
    # the eighteenth pass: round_to of the unsigned P3109 formats, the variants to 16-bit
    # formats, float64 data stochastically to bfloat16
    "round_to_p3109_unsigned_precision_1": "fp8kit.round_to(big, 'p3109_k8p1ue')",
    "round_to_stochastic_c_to_bfloat16": "fp8kit.round_to(big, 'bfloat16', "
    "rounding='stochastic_c', seed=1)",
    "round_to_float64_stochastic_to_bfloat16": "fp8kit.round_to(big.astype(np.float64), "
    "'bfloat16', rounding='stochastic', seed=1)",
    "round_to_float64_stochastic_to_float16": "fp8kit.round_to(big.astype(np.float64), "
    "'float16', rounding='stochastic', seed=1)",
    # the nineteenth pass: FakeConvert with many NaN scales, the variants of float64 data
    "fake_convert_nan_rows": "fp8kit.fake_convert(big.reshape(1024, 1024), "
    "np.where(np.arange(1024)[:, None] % 7 == 0, np.nan, 1.5).astype(np.float32))",
    "round_to_float64_stochastic_c_to_float16": "fp8kit.round_to(big.astype(np.float64), "
    "'float16', rounding='stochastic_c', seed=1)",
    # the twentieth pass: the last stochastic cases on Numba kernels
    "round_to_p3109_unsigned_precision_1_stochastic": "fp8kit.round_to(big, 'p3109_k8p1ue', "
    "rounding='stochastic', seed=1)",
    "round_to_float64_stochastic_c_to_bfloat16_8_bits": "fp8kit.round_to(big.astype(np.float64), "
    "'bfloat16', rounding='stochastic_c', seed=1, random_bits=8)",
    "encode_float64_stochastic_e8m0_23_bits": "fp8kit.encode(big.astype(np.float64), "
    "'float8_e8m0fnu', rounding='stochastic', seed=1, random_bits=23)",
    # the matrix products (one kernel per model; the fused model's fast kernel)
    "matmul_hopper": "fp8kit.matmul(a8, b8, instruction=HOPPER)",
    "matmul_cdna3": "fp8kit.matmul(a8z, b8z, instruction=('CDNA3', 'mfma', "
    "'f32_32x32x16_fp8_fp8'))",
    "matmul_exact": "fp8kit.matmul(a8, b8, instruction='exact')",
    "scaled_mm": "fp8kit.scaled_mm(a8, b8, 1.0, 1.0, out_dtype=np.float32)",
}


def timeraw_public_cold(op):
    """First call of each public function with an empty Numba cache (compiles)."""
    return _PUBLIC_COLD[op], _FIRST_CALL_SETUP.format(warm="")


_DEFAULT_COLD = ["trivial_njit", "encode", "decode", "round_to", "cast", "fake_convert",
                 "study_sweep", "matmul_hopper"]  # fmt: skip
timeraw_public_cold.params = list(_PUBLIC_COLD) if FULL else _DEFAULT_COLD
timeraw_public_cold.param_names = ["op"]
timeraw_public_cold.timeout = 300
