"""fp8kit.cuda.device_functions inside user kernels, and the example of docs/cuda.md."""

import re
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import fp8kit
import fp8kit.cuda
from fp8kit.cuda import device_functions

from .simdata import FLOAT8, host, inputs, same_bits, to_device

USER = [
    fp8kit.FloatFormat(name="u_e3m4", exponent_bits=3, mantissa_bits=4, bias=3, specials="ieee"),
    fp8kit.FloatFormat(name="u_e11m4", exponent_bits=11, mantissa_bits=4, bias=1023),
]


def user_kernel(enc, dec):
    @cuda.jit
    def kernel(x, codes, enc_out, dec_out):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            enc_out[i] = enc(x[i])
        for i in range(cuda.grid(1), codes.size, cuda.gridsize(1)):
            dec_out[i] = dec(codes[i])

    return kernel


# user kernels launched on a few blocks: numba-cuda warns of low occupancy on a GPU
@pytest.mark.filterwarnings("ignore:.*Grid size")
def _device_function_cases():
    """(fmt, dtype): float32 and float64 data for every format, each pair compiling its
    kernel in the simulator (~1.2 s): in the default run float64 for every other format
    (and P3109's k8p4se and k6p3uf in the slow run only)."""
    formats = [*FLOAT8, "bfloat16", "float16", *USER, "p3109_k8p3ue", "p3109_k8p4sf"]
    for k, fmt in enumerate(formats + ["p3109_k8p4se", "p3109_k6p3uf"]):
        for dtype in (np.float32, np.float64):
            default = fmt in formats and (dtype == np.float32 or k % 2 == 0)
            yield pytest.param(fmt, dtype, marks=() if default else pytest.mark.slow,
                               id=f"{getattr(fmt, 'name', fmt)}-{dtype.__name__}")  # fmt: skip


@pytest.mark.parametrize("fmt, dtype", list(_device_function_cases()))
def test_encode_one_and_decode_one_match_the_array_functions(fmt, dtype):
    fmt = fp8kit.get_format(fmt)
    if dtype == np.float32 and fmt.maxexp > 128:
        with pytest.raises(ValueError, match="cannot hold exactly; use dtype=np.float64"):
            device_functions(fmt, dtype=dtype)
        return
    x = inputs(dtype)
    codes = np.arange(min(1 << fmt.bits, 1 << 16), dtype=fmt.code_dtype)[::7]
    for saturate in (True, False):
        kernel = user_kernel(*device_functions(fmt, saturate=saturate, dtype=dtype))
        enc_out = cuda.device_array(x.size, fmt.code_dtype)
        dec_out = cuda.device_array(codes.size, dtype)
        kernel[2, 32](to_device(x), to_device(codes), enc_out, dec_out)
        with np.errstate(invalid="ignore"):
            same_bits(host(enc_out), fp8kit.encode(x, fmt, saturate=saturate))
        same_bits(host(dec_out), fp8kit.decode(codes, fmt, dtype=dtype))


def test_bad_arguments():
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        device_functions("float8_e4m3fn", dtype=np.float16)
    with pytest.raises(ValueError, match="unknown"):
        device_functions("e4m3")
    with pytest.raises(TypeError, match="saturate must be True or False"):
        device_functions("float8_e4m3fn", saturate="yes")


# user kernels launched on a few blocks: numba-cuda warns of low occupancy on a GPU
@pytest.mark.filterwarnings("ignore:.*Grid size")
def test_docs_example_runs():
    """The example in docs/cuda.md (between the sim-example markers) runs in the simulator
    and checks itself."""
    text = (Path(__file__).parents[2] / "docs" / "cuda.md").read_text()
    block = re.search(r"<!-- sim-example -->\s*```python\n(.*?)```", text, re.S)
    assert block, "docs/cuda.md has no sim-example block"
    exec(compile(block.group(1), "docs/cuda.md", "exec"), {})


@pytest.mark.parametrize("name", ["cast", "fake_convert", "device_functions", "is_device_array"])
def test_docstring_examples_run_here(name):
    """fp8kit.cuda's examples need device arrays, so outside this suite they are marked
    +SKIP; here they run (with the directive removed) and their output is checked."""
    import doctest

    obj = getattr(fp8kit.cuda, name)
    test = doctest.DocTestParser().get_doctest(obj.__doc__, {}, name, None, 0)
    assert test.examples
    for example in test.examples:
        example.options.pop(doctest.SKIP, None)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0
