"""The small-array fast paths of encode, decode and round_to (fp8kit/codec.py): a call on a
C-contiguous numpy array below the threading threshold reuses the kernel and constants that
an earlier fully checked call with the same (fmt, dtype, option) key recorded.  They must give
the full path's bits and never skip a check that depends on the data or on an argument."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit import codec

FORMATS = ["float8_e4m3fn", "float8_e5m2fnuz", "bfloat16", "float6_e3m2fn", "float4_e2m1fn"]


def data(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape))).astype(dtype)
    x.flat[:4] = [np.nan, np.inf, -0.0, 1e30]
    return x


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(1000,), (7, 33), (2, 3, 5)])
def test_fast_paths_give_the_full_paths_bits(fmt, shape):
    x = data(shape)
    for _ in range(2):  # the first call records the plan, the second runs it
        codes = fp8kit.encode(x, fmt)
        full = np.empty(shape, codes.dtype)
        fp8kit.encode(x, fmt, out=full)  # out=: never the fast path
        np.testing.assert_array_equal(codes, full)
        assert codes.shape == shape and codes.flags.c_contiguous
        r = fp8kit.round_to(x, fmt)
        np.testing.assert_array_equal(r.view(np.uint32), fp8kit.round_to(x.copy(order="F"),
                                      fmt).view(np.uint32))  # fmt: skip
        d = fp8kit.decode(codes, fmt)
        np.testing.assert_array_equal(d.view(np.uint32), fp8kit.decode(codes, fmt,
                                      out=np.empty(shape, np.float32)).view(np.uint32))  # fmt: skip
        typed = fp8kit.astype(x, fmt)
        np.testing.assert_array_equal(fp8kit.decode(typed).view(np.uint32), d.view(np.uint32))
    assert (fmt, x.dtype, True) in codec._FAST_ENCODE
    assert (fmt, x.dtype, True) in codec._FAST_ROUND


def test_saturate_and_dtype_are_part_of_the_key():
    x = np.float32([1e6, -1e6, np.inf] * 10)
    for _ in range(2):
        assert fp8kit.encode(x, "float8_e4m3fn")[:3].tolist() == [0x7E, 0xFE, 0x7E]
        assert fp8kit.encode(x, "float8_e4m3fn", saturate=False)[:3].tolist() == [0x7F, 0xFF, 0x7F]
        assert fp8kit.decode(np.uint8([0x38] * 4), "float8_e4m3fn", dtype=np.float64).dtype == (
            np.float64
        )
        assert fp8kit.decode(np.uint8([0x38] * 4), "float8_e4m3fn").dtype == np.float32


def test_checks_that_depend_on_data_or_arguments_still_run():
    codes = np.uint8([0, 1, 15])
    for _ in range(2):
        fp8kit.decode(codes, "float4_e2m1fn")  # uint8 holding 4-bit codes: range-checked
    with pytest.raises(ValueError, match=r"codes\[1\] = 16 is not a code of float4_e2m1fn"):
        fp8kit.decode(np.uint8([0, 16, 1]), "float4_e2m1fn")
    x = np.float32([1.0, 2.0])
    fp8kit.encode(x, "float8_e4m3fn")
    with pytest.raises(TypeError, match="saturate must be True or False"):
        fp8kit.encode(x, "float8_e4m3fn", saturate="yes")
    with pytest.raises(ValueError, match="random_bits"):
        fp8kit.encode(x, "float8_e4m3fn", random_bits=40)
    with pytest.raises(ValueError, match="seed is only used"):
        fp8kit.encode(x, "float8_e4m3fn", seed=1)
    with pytest.raises(ValueError, match="unknown fmt"):
        fp8kit.encode(x, "float8_e9m9")
    with pytest.raises(TypeError):
        fp8kit.encode(np.int32([1, 2]), "float8_e4m3fn")
    # a masked array (an ndarray subclass) keeps its mask, not the fast path's plain result
    m = np.ma.masked_array(x, mask=[False, True])
    assert isinstance(fp8kit.encode(m, "float8_e4m3fn"), np.ma.MaskedArray)
    # a 0-d array still gives a scalar
    assert np.ndim(fp8kit.encode(np.float32(1.0), "float8_e4m3fn")) == 0


def test_byte_swapped_and_strided_inputs_take_the_full_path():
    x = data((600,))
    want = fp8kit.encode(x, "float8_e5m2")
    np.testing.assert_array_equal(fp8kit.encode(x.astype(">f4"), "float8_e5m2"), want)
    np.testing.assert_array_equal(fp8kit.encode(x.astype(">f4"), "float8_e5m2"), want)
    np.testing.assert_array_equal(fp8kit.encode(x[::2], "float8_e5m2"), want[::2])
    bf = x.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(
        fp8kit.encode(bf, "float8_e5m2"), fp8kit.encode(bf.astype(np.float32), "float8_e5m2")
    )
