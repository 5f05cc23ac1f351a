"""Exhaustive 16-bit sweeps (``-m slow``) and the GPU benchmark script's own check."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import fp8kit

from .simdata import BF16, FLOAT8, host, same_bits, to_device

ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def test_benchmark_script_runs_and_checks_against_the_cpu(capsys):
    path = Path(__file__).parents[2] / "benchmarks" / "gpu_throughput.py"
    spec = importlib.util.spec_from_file_location("gpu_throughput", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--n", "4096", "--repeat", "1"]) == 0  # 1: a result differed
    assert "| fake_convert float32 openvino |" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_every_16bit_input(dtype):
    x = ALL16.view(dtype)
    d = to_device(x)
    for fmt in [*FLOAT8, "bfloat16", "float16"]:
        for saturate in (True, False):
            same_bits(host(fp8kit.encode(d, fmt, saturate=saturate)),
                      fp8kit.encode(x, fmt, saturate=saturate))  # fmt: skip
            same_bits(host(fp8kit.round_to(d, fmt, saturate=saturate)),
                      fp8kit.round_to(x, fmt, saturate=saturate))  # fmt: skip
    for out in (np.float16, BF16, np.float32, np.float64):
        fmt = "float16" if dtype == np.float16 else "bfloat16"
        same_bits(host(fp8kit.decode(to_device(ALL16), fmt, dtype=out)),
                  fp8kit.decode(ALL16, fmt, dtype=out))  # fmt: skip


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:(overflow|invalid|divide)")
@pytest.mark.parametrize(
    "mode, dest", [("spec", "f8e4m3"), ("openvino-fp16", "f8e4m3"), ("openvino-f32", "f8e5m2")]
)
def test_fake_convert_every_float16_input(mode, dest):
    x = ALL16.view(np.float16).reshape(256, 256)
    scale = np.linspace(0.01, 100, 256, dtype=np.float16).reshape(256, 1)
    shift = np.linspace(-4, 4, 256, dtype=np.float16).reshape(256, 1)
    got = fp8kit.fake_convert(to_device(x), to_device(scale), to_device(shift), dest, mode=mode)
    same_bits(host(got), fp8kit.fake_convert(x, scale, shift, dest, mode=mode))
