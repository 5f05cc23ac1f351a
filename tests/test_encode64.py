"""float64 -> formats rounded on the high words' 32-bit lanes (fp8kit._kernels.encode64)
give exactly the codes of the float64 kernels: every value of each format, the midpoints,
their float64 neighbours, low-word-only sticky bits and NaN payloads, specials and random
bit patterns, for every registered format and saturation the kernel takes."""

import numpy as np
import pytest

import fp8kit
from fp8kit._kernels.codec import dummy, encode_kernel
from fp8kit._kernels.encode64 import encode64_kernel
from fp8kit._kernels.tables import code_values
from fp8kit.formats import FloatFormat, registered_formats

SATURATE = [True, False, "propagate"]
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324,
           2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308]  # fmt: skip
LOW_WORD = [0x7FF0000000000001, 0xFFF0000000000001, 0x7FF8000000000000, 0x7FF0000100000000,
            0x0000000000000001, 0x8000000080000000]  # fmt: skip


def _inputs(fmt, rng):
    vals = code_values(fmt)
    v = np.unique(np.abs(vals[np.isfinite(vals)]))
    v = np.concatenate([v, -v])
    v.sort()
    base = np.concatenate([v, v[:-1] + (v[1:] - v[:-1]) / 2, np.array(SPECIAL)])
    with np.errstate(over="ignore"):  # (the neighbours of +-max float64 are +-Inf)
        xs = [base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf)]
    bits = np.concatenate(xs).view(np.uint64)
    extra = [
        bits | np.uint64(1),  # a sticky bit in the low word only
        bits ^ rng.integers(0, 1 << 32, bits.size, dtype=np.uint64),
        np.array(LOW_WORD, np.uint64),
        rng.integers(0, 1 << 64, 50_000, dtype=np.uint64, endpoint=False),
        (rng.standard_normal(50_000) * 2.0 ** rng.uniform(-150, 150, 50_000)).view(np.uint64),
    ]
    return np.concatenate([bits, *extra])


# formats not registered: float64's exponent range (no subnormal path), and one whose
# subnormals are below float32's range (the float64 kernel keeps it)
WIDE = [
    FloatFormat(name="t_e11m4", exponent_bits=11, mantissa_bits=4, bias=1023, specials="ieee"),
    FloatFormat(name="t_e10m3", exponent_bits=10, mantissa_bits=3, bias=1000, specials="fn"),
]


@pytest.mark.parametrize("fmt", list(registered_formats().values()) + WIDE, ids=lambda f: f.name)
def test_float64_kernel_on_32bit_lanes_matches_the_float64_kernel(fmt):
    rng = np.random.default_rng(7)
    for sat in SATURATE:
        kernel = encode64_kernel(fmt, sat)
        if kernel is None:
            assert fmt.mantissa_bits == 0 or fmt.specials == "unsigned" or fmt in WIDE
            continue
        x = _inputs(fmt, rng)
        old, _ = encode_kernel(fmt, np.dtype(np.float64), sat)
        cd = fmt.code_dtype if fmt.bits in (8, 16) else np.uint8
        want, got = np.empty(x.size, cd), np.empty(x.size, cd)
        old.serial(x, dummy(np.uint32), dummy(np.uint8), want)
        kernel.serial(x, dummy(np.uint32), dummy(np.uint8), got)
        np.testing.assert_array_equal(got, want, err_msg=str(sat))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2fnuz", "float16"])
def test_encode_takes_it_and_threads(name):
    """The common formats are routed to it; through fp8kit.encode on several chunks."""
    fmt = fp8kit.get_format(name)
    assert encode64_kernel(fmt, True) is not None
    x = _inputs(fmt, np.random.default_rng(3))
    x = np.tile(x, (1 << 18) // x.size + 2)
    old, _ = encode_kernel(fmt, np.dtype(np.float64), True)
    want = np.empty(x.size, fmt.code_dtype)
    old.serial(x, dummy(np.uint32), dummy(np.uint8), want)
    np.testing.assert_array_equal(fp8kit.encode(x.view(np.float64), fmt), want)
