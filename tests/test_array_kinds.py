"""xarray DataArrays, numpy masked arrays, torch CPU tensors and DLPack objects through the
one dispatch layer (fp8kit/_backends.py)."""

import ml_dtypes
import numpy as np
import pytest

import fp8kit
from fp8kit import _backends

X = np.array([[1.0, -2.5, 1e9], [0.3, -0.0, 448.0]], np.float32)
FMT = "float8_e4m3fn"

CALLS = {
    "encode": lambda x: fp8kit.encode(x, FMT),
    "round_to": lambda x: fp8kit.round_to(x, FMT),
    "astype": lambda x: fp8kit.astype(x, FMT),
    "cast": lambda x: fp8kit.cast(x, "int8"),
    "fake_convert": lambda x: fp8kit.fake_convert(x, 1.0),
    "decode": lambda x: fp8kit.decode(fp8kit.astype(x, FMT)),
}


def bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "V" or a.dtype.itemsize < 4 else a


def test_backend_choice():
    np_ = np.ones(2)
    assert _backends.kind_of(np_, None, 1.0, [1.0]) == "numpy"
    assert _backends.kind_of(np.ma.array(np_)) == "masked"
    torch = pytest.importorskip("torch")
    assert _backends.kind_of(np_, torch.ones(2)) == "torch"
    da = pytest.importorskip("dask.array")
    assert _backends.kind_of(np.ma.array(np_), da.ones(2), torch.ones(2)) == "dask"


@pytest.mark.parametrize("name", CALLS)
def test_xarray_in_xarray_out(name):
    xr = pytest.importorskip("xarray")
    a = xr.DataArray(X, dims=("r", "c"), coords={"r": [10, 20]}, name="w", attrs={"u": "V"})
    res = CALLS[name](a)
    assert isinstance(res, xr.DataArray)
    assert res.dims == a.dims and res.name == "w" and res.attrs == {"u": "V"}
    assert res.coords["r"].values.tolist() == [10, 20]
    np.testing.assert_array_equal(bits(res.values), bits(CALLS[name](X)))
    lazy = CALLS[name](a.chunk({"r": 1}))  # Dask-backed: stays lazy
    assert type(lazy.data).__module__.startswith("dask")
    np.testing.assert_array_equal(bits(lazy.values), bits(CALLS[name](X)))


def test_xarray_apply_ufunc_positional_format():
    xr = pytest.importorskip("xarray")
    pytest.importorskip("dask.array")
    a = xr.DataArray(X, dims=("r", "c")).chunk({"c": 2})
    res = xr.apply_ufunc(fp8kit.encode, a, FMT, dask="parallelized", output_dtypes=[np.uint8])
    np.testing.assert_array_equal(res.values, fp8kit.encode(X, FMT))
    res = xr.apply_ufunc(fp8kit.round_to, a.compute(), FMT)
    np.testing.assert_array_equal(res.values, fp8kit.round_to(X, FMT))


@pytest.mark.parametrize("name", CALLS)
def test_masked_arrays_keep_their_mask(name):
    mask = np.array([[0, 1, 1], [0, 0, 1]], bool)
    m = np.ma.array(X, mask=mask)
    res = CALLS[name](m)
    assert isinstance(res, np.ma.MaskedArray)
    np.testing.assert_array_equal(res.mask, mask)
    ref = CALLS[name](X)
    np.testing.assert_array_equal(bits(res.data)[~mask], bits(ref)[~mask])


def test_masked_elements_never_raise():
    codes = np.ma.array(np.array([56, 300, 3]), mask=[0, 1, 0])  # 300 is no code
    res = fp8kit.decode(codes, FMT)
    assert res.mask.tolist() == [False, True, False] and res[0] == 1.0
    res = fp8kit.cast(np.ma.array(["1.5", "not a number"], mask=[0, 1]), "float32")
    assert res.mask.tolist() == [False, True] and res[0] == 1.5
    with pytest.raises(TypeError, match="pack: masked arrays are not supported"):
        fp8kit.pack(np.ma.array(np.zeros(4, np.uint8)), "float4_e2m1fn")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_torch_cpu_tensors(dtype):
    torch = pytest.importorskip("torch")
    t = torch.tensor(X.astype(np.float64), dtype=getattr(torch, dtype), requires_grad=True)
    x = t.detach().float().numpy().astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    for name in ("encode", "round_to", "astype", "fake_convert"):
        if name == "fake_convert" and dtype == "float64":
            continue
        res = CALLS[name](t)
        assert type(res) is np.ndarray
        np.testing.assert_array_equal(bits(res), bits(CALLS[name](x)))
    view = _backends.as_numpy(t, "encode")  # zero-copy, bfloat16 as ml_dtypes
    assert view.dtype == x.dtype and view.ctypes.data == t.data_ptr()


def test_torch_float8_and_errors():
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.0, 448.0], dtype=torch.float8_e4m3fn)
    assert fp8kit.decode(t).tolist() == [1.0, 448.0]  # the format comes from the dtype
    with pytest.raises(TypeError, match="torch tensor on meta"):
        fp8kit.encode(torch.ones(3, device="meta"), FMT)


def test_dlpack_only_object():
    class OnlyDLPack:
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, **kw):
            return self._a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    res = fp8kit.encode(OnlyDLPack(X), FMT)
    np.testing.assert_array_equal(res, fp8kit.encode(X, FMT))

    class BrokenDLPack:
        def __dlpack__(self, **kw):
            raise BufferError("no")

    with pytest.raises(TypeError, match="could not read BrokenDLPack through __dlpack__"):
        fp8kit.encode(BrokenDLPack(), FMT)


def test_plain_arrays_never_import_numpy_ma():
    """Telling masked arrays apart does not import ``numpy.ma`` (5-6 ms of a first study
    call): a masked array means it is imported already (``_backends.is_masked``)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, fp8kit\n"
        "x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)\n"
        "fp8kit.study.sweep({'w': x}, ['float8_e4m3fn'], ['tensor', 'block:32'])\n"
        "fp8kit.study.quantize(x, 'float8_e4m3fn', 'block')\n"
        "fp8kit.study.error_metrics(x, x, fmt='float8_e4m3fn')\n"
        "fp8kit.round_to(x, 'float8_e4m3fn')\n"
        "assert 'numpy.ma' not in sys.modules\n"
        "from fp8kit._backends import is_masked\n"
        "import numpy.ma\n"
        "assert is_masked(np.ma.masked_array(x)) and not is_masked(x)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
