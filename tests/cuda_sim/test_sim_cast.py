"""Cast-21's float8/bfloat16/float16 paths on device arrays: bit for bit fp8kit.cast."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
import fp8kit.cuda

from .simdata import BF16, FLOAT8, SUBSAMPLE16, host, inputs, same_bits, to_device

DESTS = [*FLOAT8, "bfloat16", "float16", "float32", "float64"]
#: the GPU twin follows Cast's default ("conformance"), as the host
GPU = {}


@pytest.mark.parametrize("saturate", [True, False], ids=["sat", "nosat"])
@pytest.mark.parametrize("src", FLOAT8)
def test_every_float8_code_to_every_float_type(src, saturate):
    codes = np.arange(256, dtype=np.uint8)
    a8 = codes.view(getattr(ml_dtypes, src))
    for dst in DESTS:
        want = fp8kit.cast(a8, dst, saturate=saturate, **GPU)
        got = fp8kit.cuda.cast(to_device(codes), dst, saturate=saturate, source=src)
        same_bits(host(got), want)
    # an ml_dtypes device array names its own type
    same_bits(host(fp8kit.cast(to_device(a8), "float32")), fp8kit.cast(a8, "float32"))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: d.__name__)
def test_floats_to_float8_bfloat16_float16(dtype):
    x = inputs(dtype)
    d = to_device(x)
    for dst in [*FLOAT8, "bfloat16", "float16"]:
        for saturate in (True, False):
            got = fp8kit.cast(d, dst, saturate=saturate)
            with np.errstate(invalid="ignore", over="ignore"):
                want = fp8kit.cast(x, dst, saturate=saturate, **GPU)
            # float16 results are float16 device arrays; float8/bfloat16 ones their codes
            assert got.dtype == (np.float16 if dst == "float16" else f"u{want.dtype.itemsize}")
            same_bits(host(got), want)


def test_bfloat16_codes():
    codes = SUBSAMPLE16
    b = codes.view(BF16)
    for dst in ["float8_e4m3fn", "float8_e5m2fnuz", "float16", "float32", "float64"]:
        got = fp8kit.cuda.cast(to_device(codes), dst, source="BFLOAT16")
        same_bits(host(got), fp8kit.cast(b, dst, **GPU))
    same_bits(host(fp8kit.cast(to_device(b), "float32")), fp8kit.cast(b, "float32"))


#: float64 values where Cast's default and the GPU's former bits differ: +-Inf into FNUZ
#: types with saturate (+-max; "fnuz-inf-nan": NaN), values rounded twice through float32
#: ("round-once": once), an overflow of float32
EDGES = [np.inf, -np.inf, 1 + 2**-4 + 2**-40, 65519.999999, 1 + 2**-11 + 2**-40, 1e300, -1e39]


@pytest.mark.parametrize("rules", ["conformance", "legacy", "fnuz-inf-nan", "round-once"])
def test_rules_on_the_gpu(rules):
    x = np.array(EDGES)
    for dtype in (np.float64, np.float32):
        with np.errstate(over="ignore"):
            xs = x.astype(dtype)
        d = to_device(xs)
        for dst in ["float8_e4m3fn", "float8_e5m2fnuz", "bfloat16"]:
            for saturate in (True, False):
                got = fp8kit.cast(d, dst, saturate=saturate, rules=rules)
                with np.errstate(invalid="ignore", over="ignore"):
                    want = fp8kit.cast(xs, dst, saturate=saturate, rules=rules)
                same_bits(host(got), want)
    # the default and the named rules differ on these values
    fnuz = host(fp8kit.cast(to_device(x[:2]), "float8_e4m3fnuz", rules=rules))
    assert fnuz.tolist() == ([0x80, 0x80] if rules in ("legacy", "fnuz-inf-nan") else [0x7F, 0xFF])
    once = host(fp8kit.cast(to_device(x[2:3]), "float8_e4m3fn", rules=rules))
    assert once.tolist() == ([0x39] if rules in ("legacy", "round-once") else [0x38])


def test_bad_rules_on_the_gpu():
    with pytest.raises(ValueError, match="unknown rules name 'nope'"):
        fp8kit.cast(to_device(np.ones(2)), "float16", rules="nope")


REFUSED = [
    # (dtype of x, to, keywords, error, message)
    pytest.param(np.float32, "float64", {}, TypeError, "float32 -> float64", id="plain-float"),
    pytest.param(np.float32, "int8", {}, TypeError, "float32 -> int8", id="to-int"),
    pytest.param(np.uint8, "float32", {}, TypeError, "source=", id="codes-without-source"),
    pytest.param(
        np.uint8, "float32", {"source": "float32"}, ValueError, "source must be", id="bad-source"
    ),
    pytest.param(
        np.uint16, "float32", {"source": "e4m3fn"}, ValueError, "unknown", id="unknown-source"
    ),
    pytest.param(
        np.uint16, "float32", {"source": "float8_e4m3fn"}, TypeError, "dtype uint8", id="dtype"
    ),
]


@pytest.mark.parametrize("dtype, to, kwargs, error, match", REFUSED)
def test_refused_casts(dtype, to, kwargs, error, match):
    with pytest.raises(error, match=match):
        fp8kit.cuda.cast(to_device(np.ones(3, dtype)), to, **kwargs)
