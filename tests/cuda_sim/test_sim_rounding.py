"""Issue 8 on the GPU: the new formats and every rounding mode, stochastic rounding with the
same seed included, bit for bit the CPU kernels' results."""

import numpy as np
import pytest
from numba import cuda

import fp8kit
from fp8kit.formats import MORE_FORMATS

from .simdata import BF16, host, inputs, same_bits, to_device

MODES = ["nearest_away", "toward_zero", "toward_positive", "toward_negative", "stochastic"]
NEW = [f.name for f in MORE_FORMATS]


# The simulator runs a Python thread per element: the default run takes one case of each
# kind, -m slow the full cross product.
@pytest.mark.parametrize(
    "fmt, saturate",
    [pytest.param(f, s, marks=() if s else pytest.mark.slow) for f in NEW for s in (True, False)],
)
def test_new_formats_match_the_cpu(fmt, saturate):
    x = inputs(np.float32)
    d = to_device(x)
    same_bits(
        host(fp8kit.encode(d, fmt, saturate=saturate)), fp8kit.encode(x, fmt, saturate=saturate)
    )
    codes = np.arange(1 << fp8kit.get_format(fmt).bits, dtype=np.uint8)
    same_bits(host(fp8kit.decode(to_device(codes), fmt)), fp8kit.decode(codes, fmt))


_FMT_DTYPES = [
    ("float8_e4m3fn", np.float32), ("float8_e5m2fnuz", np.float64), ("bfloat16", np.float32),
    ("float8_e8m0fnu", np.float32), ("float4_e2m1fn", np.float16), ("float8_e4m3fn", BF16),
]  # fmt: skip


@pytest.mark.parametrize(
    "mode, fmt, dtype",
    [
        pytest.param(m, f, d, marks=() if i == j % len(_FMT_DTYPES) else pytest.mark.slow,
                     id=f"{m}-{f}-{np.dtype(d).name}")
        for j, m in enumerate(MODES)
        for i, (f, d) in enumerate(_FMT_DTYPES)
    ],
)  # fmt: skip
def test_every_rounding_mode_matches_the_cpu(mode, fmt, dtype):
    x = inputs(dtype)[::3]  # (every value kind still appears; the simulator is slow)
    kw = {"rounding": mode, "seed": 1234 if mode == "stochastic" else None}
    d = to_device(x)
    with np.errstate(invalid="ignore"):
        same_bits(host(fp8kit.encode(d, fmt, **kw)), fp8kit.encode(x, fmt, **kw))
        same_bits(host(fp8kit.round_to(d, fmt, **kw)), fp8kit.round_to(x, fmt, **kw))


# (each count compiles its element function in the simulator: 16 in the default run)
@pytest.mark.parametrize(
    "random_bits", [pytest.param(5, marks=pytest.mark.slow), 16,
                    pytest.param(32, marks=pytest.mark.slow)],
)  # fmt: skip
def test_stochastic_rounding_gives_the_cpus_bits_for_the_same_seed(random_bits):
    # more than one Philox block (4 * 256 * parts elements), so the blocked CPU generator
    # and the GPU's per-element words are compared across block boundaries
    rng = np.random.default_rng(random_bits)
    x = (rng.standard_normal(9000) * 3).astype(np.float32)
    kw = {"rounding": "stochastic", "seed": 2**40 + 17, "random_bits": random_bits}
    same_bits(host(fp8kit.encode(to_device(x), "float8_e4m3fn", **kw)),
              fp8kit.encode(x, "float8_e4m3fn", **kw))  # fmt: skip
    other = fp8kit.encode(x, "float8_e4m3fn", **{**kw, "seed": 3})
    assert (other != fp8kit.encode(x, "float8_e4m3fn", **kw)).any()


def test_unsupported_rounding_on_the_gpu_is_refused_clearly():
    d = to_device(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match="only rounding='nearest_even' is implemented"):
        fp8kit.fake_convert(d, np.float32(1.0), rounding="toward_zero")
    with pytest.raises(ValueError, match="only rounding='nearest_even' to Cast-21 types"):
        fp8kit.cast(d, "FLOAT8E4M3FN", rounding="stochastic", seed=1)
    f = cuda.to_device(np.asfortranarray(np.ones((4, 3), np.float32)))
    with pytest.raises(ValueError, match="needs C-contiguous arrays"):
        fp8kit.encode(f, "float8_e4m3fn", rounding="stochastic", seed=1)


#: IEEE P3109 formats (issue 20): signed extended, precision 1 (the integer-only path),
#: unsigned extended and finite, a 5-bit one, signed finite (SatFinite: +-Inf -> +-max);
#: formats are run-time data on the GPU too
P3109 = ["p3109_k8p4se", "p3109_k8p1se", "p3109_k8p3ue", "p3109_k6p3uf", "p3109_k8p4sf"]
_P3109_DEFAULT = {
    ("p3109_k8p1se", "nearest_even"),
    ("p3109_k8p3ue", "toward_zero"),
    ("p3109_k8p4sf", "nearest_even"),
}


@pytest.mark.parametrize(
    "fmt, mode",
    [
        pytest.param(f, m, marks=() if (f, m) in _P3109_DEFAULT else pytest.mark.slow)
        for f in P3109
        for m in ["nearest_even", *MODES]
    ],
)
def test_p3109_formats_match_the_cpu(fmt, mode):
    x = inputs(np.float32)[::4]
    x = np.concatenate([x, -x[:64]])  # negative input to the unsigned formats
    kw = {"rounding": mode, "seed": 1234 if mode == "stochastic" else None}
    d = to_device(x)
    with np.errstate(invalid="ignore"):
        for sat in (True, False):
            same_bits(
                host(fp8kit.encode(d, fmt, saturate=sat, **kw)),
                fp8kit.encode(x, fmt, saturate=sat, **kw),
            )
        same_bits(host(fp8kit.round_to(d, fmt, **kw)), fp8kit.round_to(x, fmt, **kw))
    codes = np.arange(1 << fp8kit.get_format(fmt).bits, dtype=np.uint8)
    same_bits(host(fp8kit.decode(to_device(codes), fmt)), fp8kit.decode(codes, fmt))


# Issue 20: the new modes and the flush options, same bits as the CPU (one compiled kernel
# per mode in the simulator: the default run takes two, -m slow all of them)
NEW_MODES = ["to_odd", "nearest_zero", "stochastic_c", "stochastic_b", "stochastic_odd",
             "stochastic_half"]  # fmt: skip


@pytest.mark.parametrize(
    "mode", [pytest.param(m, marks=() if m in ("to_odd", "stochastic_c") else pytest.mark.slow)
             for m in NEW_MODES],
)  # fmt: skip
def test_issue20_modes_match_the_cpu(mode):
    x = inputs(np.float32)[::3]
    kw = {"rounding": mode, "seed": 99 if mode.startswith("stochastic") else None,
          "random_bits": 7}  # fmt: skip
    with np.errstate(invalid="ignore"):
        same_bits(host(fp8kit.encode(to_device(x), "float8_e4m3fn", **kw)),
                  fp8kit.encode(x, "float8_e4m3fn", **kw))  # fmt: skip


FLUSH_OPTIONS = [{"flush_subnormals": True}, {"flush_subnormal_inputs": True},
                 {"flush_subnormals": True, "rounding": "toward_positive"},
                 {"flush_subnormal_inputs": True, "rounding": "toward_positive"}]  # fmt: skip


# (each option set compiles its element function in the simulator, ~3 s: float32 data with
# two of them in the default run, all four and float16 data in the slow run)
@pytest.mark.parametrize(
    "dtype, options",
    [(np.float32, FLUSH_OPTIONS[::3]),
     pytest.param(np.float32, FLUSH_OPTIONS, marks=pytest.mark.slow),
     pytest.param(np.float16, FLUSH_OPTIONS, marks=pytest.mark.slow)],
    ids=["float32", "float32-every", "float16-every"],
)  # fmt: skip
def test_flush_options_match_the_cpu(dtype, options):
    fi = np.finfo(dtype)
    x = np.array([fi.smallest_subnormal, -fi.smallest_subnormal, fi.smallest_normal, 2.0**-7,
                  -(2.0**-9), 2.0**-6, 1.0, -0.0, np.inf, np.nan], dtype)  # fmt: skip
    for kw in options:
        with np.errstate(invalid="ignore"):
            same_bits(host(fp8kit.round_to(to_device(x), "float8_e4m3fn", **kw)),
                      fp8kit.round_to(x, "float8_e4m3fn", **kw))  # fmt: skip
    with pytest.raises(ValueError, match="no flush options"):
        fp8kit.fake_convert(to_device(x), dtype(1.0), flush_subnormals=True)
