"""encode, decode and round_to on device arrays: bit for bit the CPU kernels' results."""

import ml_dtypes
import numpy as np
import pytest
from numba import cuda

import fp8kit

from .simdata import BF16, FLOAT8, SUBSAMPLE16, host, inputs, same_bits, to_device

USER = [
    fp8kit.FloatFormat(name="u_e3m4", exponent_bits=3, mantissa_bits=4, bias=3, specials="ieee"),
    fp8kit.FloatFormat(name="u_e2m1fn", exponent_bits=2, mantissa_bits=1, bias=1, specials="fn"),
    # wider than float32: float32/16-bit data are widened to float64 inside the element
    fp8kit.FloatFormat(name="u_e11m4", exponent_bits=11, mantissa_bits=4, bias=1023),
    # float64 subnormals round to its subnormals: the integer-only ("generic") rounding
    fp8kit.FloatFormat(name="u_e10m4b1020", exponent_bits=10, mantissa_bits=4, bias=1020),
]
DTYPES = [np.float16, BF16, np.float32, np.float64]


def fid(f):
    return f if isinstance(f, str) else f.name


CASES = [(f, d) for f in [*FLOAT8, "bfloat16", "float16"] for d in DTYPES] + [
    (f, d)
    for f in USER
    for d in (np.float32, np.float64)  # 16-bit loads are covered above
]


# (each case compiles its element function in the simulator, ~0.5 s: saturate=False with
# float32 data in the default run, with the other types in the slow one)
@pytest.mark.parametrize(
    "fmt, dtype, saturate",
    [pytest.param(f, d, sat, marks=() if sat or d == np.float32 else pytest.mark.slow)
     for f, d in CASES for sat in (True, False)],
    ids=[f"{fid(f)}-{np.dtype(d).name}-{s}" for f, d in CASES for s in ("sat", "nosat")],
)  # fmt: skip
def test_encode_and_round_to_match_the_cpu(fmt, dtype, saturate):
    x = inputs(dtype)
    d = to_device(x)
    codes = fp8kit.encode(d, fmt, saturate=saturate)
    assert isinstance(codes, type(d)) and codes.dtype == fp8kit.get_format(fmt).code_dtype
    rounded = fp8kit.round_to(d, fmt, saturate=saturate)
    assert rounded.dtype == x.dtype
    # (the CPU path warns on signalling NaNs where it widens 16-bit data to float64 first)
    with np.errstate(invalid="ignore"):
        same_bits(host(codes), fp8kit.encode(x, fmt, saturate=saturate))
        same_bits(host(rounded), fp8kit.round_to(x, fmt, saturate=saturate))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", [*FLOAT8, USER[0], USER[1]], ids=fid)
def test_decode_every_8bit_code(fmt, dtype):
    codes = np.arange(256, dtype=np.uint8)
    if fmt in USER:
        codes = codes[: 1 << fmt.bits]
    got = fp8kit.decode(to_device(codes), fmt, dtype=dtype)
    want = fp8kit.decode(codes, fmt, dtype=dtype)
    # bfloat16 values come back as their uint16 bits (device arrays have no bfloat16)
    assert got.dtype == (np.uint16 if np.dtype(dtype) == BF16 else np.dtype(dtype))
    same_bits(host(got), want)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", ["bfloat16", "float16", USER[3]], ids=fid)
def test_decode_16bit_codes_subsampled(fmt, dtype):
    codes = SUBSAMPLE16[SUBSAMPLE16 < (1 << fp8kit.get_format(fmt).bits)]
    got = fp8kit.decode(to_device(codes), fmt, dtype=dtype)
    same_bits(host(got), fp8kit.decode(codes, fmt, dtype=dtype))


def test_codes_beyond_a_narrow_format_decode_to_nan():
    # the CPU raises for them; the GPU cannot check without a round trip to the host
    fmt = fp8kit.FloatFormat(
        name="u_e2m1fn", exponent_bits=2, mantissa_bits=1, bias=1, specials="fn"
    )
    with pytest.raises(ValueError, match="is not a code of u_e2m1fn"):
        fp8kit.decode(np.array([16], np.uint8), fmt)
    got = host(fp8kit.decode(to_device(np.array([7, 16, 255], np.uint8)), fmt))
    assert np.isnan(got).all()


def test_ml_dtypes_device_arrays_carry_their_format():
    x = inputs(np.float32)[:300]
    a8 = fp8kit.astype(x, "float8_e5m2")
    # a numba device array may hold an ml_dtypes dtype: made as docs/cuda.md says
    d8 = cuda.to_device(a8.view(np.uint8)).view(a8.dtype)
    same_bits(host(fp8kit.decode(d8)), fp8kit.decode(a8))
    # encoding float8 data widens it exactly first, as on the CPU
    same_bits(host(fp8kit.encode(d8, "float8_e4m3fn")), fp8kit.encode(a8, "float8_e4m3fn"))
    b16 = x.astype(ml_dtypes.bfloat16)
    same_bits(host(fp8kit.round_to(to_device(b16), "float8_e4m3fn")),
              fp8kit.round_to(b16, "float8_e4m3fn"))  # fmt: skip


def test_layouts_out_and_in_place():
    x = inputs(np.float32)[:600].reshape(20, 30)
    want = fp8kit.encode(x, "float8_e4m3fn")
    # F-contiguous in, F-contiguous out
    xf = np.asfortranarray(x)
    got = fp8kit.encode(cuda.to_device(xf), "float8_e4m3fn")
    assert got.is_f_contiguous()
    same_bits(host(got), want)
    # out= (numba device array), returned as given
    out = cuda.device_array(x.shape, np.uint8)
    assert fp8kit.encode(to_device(x), "float8_e4m3fn", out=out) is out
    same_bits(host(out), want)
    # exactly in place
    d = to_device(x)
    assert fp8kit.round_to(d, "float8_e5m2", out=d) is d
    same_bits(host(d), fp8kit.round_to(x, "float8_e5m2"))
    # 0-d and empty arrays
    z = fp8kit.encode(to_device(np.float32(500.0).reshape(())), "float8_e4m3fn")
    assert z.shape == () and host(z)[()] == 126
    assert fp8kit.encode(to_device(np.zeros((0, 3), np.float32)), "float8_e4m3fn").shape == (0, 3)


def test_partial_overlap_reads_the_input_first():
    # out overlaps x shifted by one element: the result must be that of a separate copy
    x = inputs(np.float32)[:257]
    d = to_device(x)
    src, dst = d[1:], d[:-1]
    fp8kit.round_to(src, "float8_e4m3fn", out=dst)
    same_bits(host(d)[:-1], fp8kit.round_to(x[1:], "float8_e4m3fn"))


def test_grid_stride_loop_covers_more_elements_than_threads():
    from fp8kit.cuda._dispatch import launch_config

    blocks, threads = launch_config(1 << 40)  # the most threads a launch gets
    n = 2 * blocks * threads + 5
    assert launch_config(n) == (blocks, threads)
    x = np.linspace(-500, 500, n, dtype=np.float32)
    same_bits(host(fp8kit.encode(to_device(x), "float8_e4m3fn")), fp8kit.encode(x, "float8_e4m3fn"))


def test_no_copy_to_the_host(monkeypatch):
    x = to_device(inputs(np.float32)[:100])
    array_type = type(x)  # the simulator's FakeCUDAArray, or numba's DeviceNDArray

    def refuse(*args, **kwargs):
        raise AssertionError("a device array was copied to the host")

    monkeypatch.setattr(array_type, "copy_to_host", refuse)
    monkeypatch.setattr(array_type, "__array__", refuse, raising=False)
    for result in [
        fp8kit.encode(x, "float8_e4m3fn"),
        fp8kit.round_to(x, "bfloat16"),
        fp8kit.decode(fp8kit.encode(x, "float8_e5m2"), "float8_e5m2"),
        fp8kit.cast(x, "float8_e5m2"),
        fp8kit.fake_convert(x, 2.0),
    ]:
        assert isinstance(result, array_type)


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_packed_kernels_at_every_length_and_alignment(offset, monkeypatch):
    """8-bit codes of large arrays go four per thread as 32-bit words (and decoded values
    as 64-bit words) where their address allows: codes and values at every offset, lengths
    around multiples of 4, give the bits of the CPU; aligned arrays take the packed
    kernels, others not."""
    from fp8kit.cuda import _dispatch, _kernels

    taken = []
    x = np.linspace(-500, 500, 64, dtype=np.float32)
    monkeypatch.setattr(_kernels, "encode_packed_kernel", lambda *a: taken.append(a))
    fp8kit.encode(to_device(x), "float8_e4m3fn")
    assert not taken  # (small arrays: the one-element kernels, see PACKED_MIN)
    monkeypatch.undo()
    monkeypatch.setattr(_dispatch, "PACKED_MIN", 0)
    for name in ("encode_packed_kernel", "lookup_packed_kernel"):
        real = getattr(_kernels, name)
        monkeypatch.setattr(_kernels, name, lambda *a, _f=real, _n=name: taken.append(_n) or _f(*a))
    rng = np.random.default_rng(offset)
    for n in [1, 2, 3, 4, 5, 7, 8, 9, 131]:
        x = (rng.standard_normal(n) * np.exp2(rng.uniform(-12, 10, n))).astype(np.float32)
        x[:2] = [np.nan, -np.inf][: min(n, 2)]
        for dtype, fmt in [(np.float32, "float8_e4m3fn"), (np.float16, "float8_e5m2"),
                           (BF16, "float8_e4m3fnuz"), (np.float64, "float8_e5m2fnuz")]:  # fmt: skip
            xd = x.astype(dtype)
            want = fp8kit.encode(xd, fmt)
            taken.clear()
            buf = cuda.device_array(n + 8, np.uint8)
            out = buf[offset : offset + n]
            assert fp8kit.encode(to_device(xd), fmt, out=out) is out
            same_bits(host(out), want)
            assert taken == (["encode_packed_kernel"] if offset == 0 else []), (n, offset)
            codes = to_device(np.concatenate([np.zeros(offset, np.uint8), want]))[offset:]
            for to in (np.float16, BF16, np.float32, np.float64):
                item = np.dtype(to).itemsize
                for start in (0, 1):  # values at an 8-byte boundary, or one element past it
                    taken.clear()
                    bits = cuda.device_array(n + 8, f"u{item}")[start : start + n]
                    values = bits if to == BF16 else bits.view(to)
                    fp8kit.decode(codes, fmt, dtype=to, out=values)
                    same_bits(host(bits), fp8kit.decode(want, fmt, dtype=to))
                    packed = offset == 0 and start * item % 8 == 0
                    assert taken == (["lookup_packed_kernel"] if packed else []), (n, to, start)
