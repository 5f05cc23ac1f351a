"""Throughput of fp8kit's GPU kernels against device memory bandwidth and torch's casts.

Needs a CUDA GPU and numba-cuda (``pip install -e ".[cuda12]"`` or ``".[cuda13]"``); torch
with CUDA is optional (its ``.to(float8)`` casts are timed beside fp8kit's).  Run::

    python benchmarks/gpu_throughput.py              # 64M elements, 20 timed runs each
    python benchmarks/gpu_throughput.py --n 16777216 --repeat 50

For every operation it prints the median time of a call (CUDA events around the launch;
inputs and outputs preallocated on the device), the bytes read and written per second, and
that rate as a share of the device-to-device copy bandwidth measured in the same run; then
the host time per call on a small array (fp8kit's dispatch and numba-cuda's launch, which
bound calls of up to some 100M elements: docs/cuda.md).
Before timing, each result is checked bit for bit against fp8kit's CPU kernels on the
first million elements.  It ran on H100s on 2026-11-26 and 2026-11-27 (figures in
docs/cuda.md); under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1 ... --n 4096 --repeat 1``)
times mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def timer(cuda, fn, repeat: int) -> float:
    """Median seconds per call of ``fn`` (after one warm-up call that compiles)."""
    fn()
    cuda.synchronize()
    times = []
    for _ in range(repeat):
        if cuda.is_available() and not cuda.config.ENABLE_CUDASIM:
            start, end = cuda.event(), cuda.event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cuda.event_elapsed_time(start, end) / 1e3)
        else:  # the simulator has no timed events
            t = time.perf_counter()
            fn()
            cuda.synchronize()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 26, help="elements (default 64M)")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per operation")
    parser.add_argument("--no-check", action="store_true", help="skip the CPU comparison")
    args = parser.parse_args(argv)

    from numba import cuda

    if not cuda.is_available():
        print("no CUDA GPU found (numba.cuda.is_available() is False)", file=sys.stderr)
        return 2
    import ml_dtypes

    import fp8kit
    import fp8kit.cuda

    n = args.n
    rng = np.random.default_rng(0)
    x32 = (rng.standard_normal(n, dtype=np.float32) * 100).astype(np.float32)
    d32 = cuda.to_device(x32)
    d16 = cuda.to_device(x32.astype(np.float16))
    dbf = cuda.to_device(x32.astype(ml_dtypes.bfloat16).view(np.uint16))
    codes = fp8kit.encode(x32, "float8_e4m3fn")
    dcodes = cuda.to_device(codes)
    rows = 4096 if n % 4096 == 0 else 1
    scale = cuda.to_device(rng.uniform(0.5, 2, (rows, 1)).astype(np.float32))
    shift = cuda.to_device(rng.standard_normal((rows, 1)).astype(np.float32))
    d32r = d32.reshape(rows, n // rows)

    out8 = cuda.device_array(n, np.uint8)
    out16 = cuda.device_array(n, np.uint16)
    out32 = cuda.device_array(n, np.float32)
    out32r = out32.reshape(rows, n // rows)
    copy_dst = cuda.device_array(n, np.float32)

    def copy():
        copy_dst.copy_to_device(d32)

    copy_time = timer(cuda, copy, args.repeat)
    bandwidth = 2 * 4 * n / copy_time
    name = getattr(cuda.get_current_device(), "name", "CUDA simulator")
    print(f"device: {name.decode() if isinstance(name, bytes) else name}")
    print(f"elements: {n:,}; device-to-device copy of float32: {bandwidth / 1e9:.1f} GB/s\n")

    ops = [
        # (name, fp8kit call, bytes moved per element, CPU reference on host data)
        ("encode float32 -> float8_e4m3fn",
         lambda: fp8kit.encode(d32, "float8_e4m3fn", out=out8), 5,
         lambda: fp8kit.encode(x32, "float8_e4m3fn"), out8),
        ("encode float32 -> float8_e5m2",
         lambda: fp8kit.encode(d32, "float8_e5m2", out=out8), 5,
         lambda: fp8kit.encode(x32, "float8_e5m2"), out8),
        ("encode float32 -> bfloat16",
         lambda: fp8kit.encode(d32, "bfloat16", out=out16), 6,
         lambda: fp8kit.encode(x32, "bfloat16"), out16),
        ("encode float16 -> float8_e4m3fn",
         lambda: fp8kit.encode(d16, "float8_e4m3fn", out=out8), 3,
         lambda: fp8kit.encode(x32.astype(np.float16), "float8_e4m3fn"), out8),
        ("decode float8_e4m3fn -> float32",
         lambda: fp8kit.decode(dcodes, "float8_e4m3fn", out=out32), 5,
         lambda: fp8kit.decode(codes, "float8_e4m3fn"), out32),
        ("decode bfloat16 -> float32",
         lambda: fp8kit.decode(dbf, "bfloat16", out=out32), 6,
         lambda: fp8kit.decode(x32.astype(ml_dtypes.bfloat16).view(np.uint16), "bfloat16"),
         out32),
        ("round_to float32 -> float8_e4m3fn",
         lambda: fp8kit.round_to(d32, "float8_e4m3fn", out=out32), 8,
         lambda: fp8kit.round_to(x32, "float8_e4m3fn"), out32),
        ("fake_convert float32 per-tensor",
         lambda: fp8kit.fake_convert(d32, 2.0, out=out32), 8,
         lambda: fp8kit.fake_convert(x32, 2.0), out32),
        ("fake_convert float32 per-row + shift",
         lambda: fp8kit.fake_convert(d32r, scale, shift, out=out32r), 8,
         lambda: fp8kit.fake_convert(
             x32.reshape(rows, -1), scale.copy_to_host(), shift.copy_to_host()), out32),
        ("fake_convert float32 openvino",
         lambda: fp8kit.fake_convert(d32, 2.0, mode="openvino", out=out32), 8,
         lambda: fp8kit.fake_convert(x32, 2.0, mode="openvino"), out32),
    ]  # fmt: skip

    torch_ops = _torch_ops(x32)
    print("| operation | fp8kit | GB/s | of copy | torch `.to()` | fp8kit vs torch |")
    print("|---|---:|---:|---:|---:|---:|")
    check = min(n, 1 << 20)
    for name, call, nbytes, reference, out in ops:
        if not args.no_check:
            call()
            got = out.copy_to_host().reshape(-1)[:check]
            want = np.asarray(reference()).reshape(-1)[:check]
            if not np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")):
                print(f"{name}: GPU and CPU results differ", file=sys.stderr)
                return 1
        t = timer(cuda, call, args.repeat)
        rate = nbytes * n / t
        peer = ""
        if name in torch_ops:
            tt = timer(cuda, torch_ops[name], args.repeat)
            peer = f"| {tt * 1e3:.3f} ms | {tt / t:.2f}x "
        else:
            peer = "| | "
        print(f"| {name} | {t * 1e3:.3f} ms | {rate / 1e9:.1f} | {rate / bandwidth:.0%} {peer}|")
    print()
    for line in host_times(cuda, fp8kit):
        print(line)
    return 0


def host_times(cuda, fp8kit, n: int = 1024) -> list[str]:
    """Host time per call on a small array (the GPU idle): back-to-back calls, then one
    synchronize, best of three rounds; beside it numba-cuda's own launch of the same
    kernel, preconfigured (the floor fp8kit's dispatch adds to)."""
    from fp8kit.cuda import _dispatch, _kernels

    simulated = bool(cuda.config.ENABLE_CUDASIM)
    calls = 2 if simulated else 500
    d32 = cuda.to_device(np.linspace(-500, 500, n, dtype=np.float32))
    out8 = cuda.device_array(n, np.uint8)
    fmt = fp8kit.get_format("float8_e4m3fn")
    kernel = _kernels.encode_kernel(fmt, np.dtype(np.float32), True, False)[0]
    launch = _dispatch._configured(kernel, *_dispatch.launch_config(n))
    bits = d32.view(np.uint32)
    rows = []
    for name, call in [
        ("fp8kit.encode(x, 'float8_e4m3fn', out=out)",
         lambda: fp8kit.encode(d32, "float8_e4m3fn", out=out8)),
        ("fp8kit.encode(x, 'float8_e4m3fn')", lambda: fp8kit.encode(d32, "float8_e4m3fn")),
        ("fp8kit.decode(codes, 'float8_e4m3fn', out=y)",
         lambda: fp8kit.decode(out8, "float8_e4m3fn", out=d32)),
        ("numba-cuda launch alone (preconfigured)", lambda: launch(bits, out8, out8)),
    ]:  # fmt: skip
        call()
        cuda.synchronize()
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(calls):
                call()
            cuda.synchronize()
            best = min(best, (time.perf_counter() - t) / calls)
        rows.append(f"host time per call, {n:,} elements: {name}: {best * 1e6:.1f} us")
    return rows


def _torch_ops(x32: np.ndarray) -> dict:
    """torch's CUDA casts of the same data, where torch with CUDA is installed."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    t32 = torch.from_numpy(x32).cuda()
    t16 = t32.half()
    out = {}
    for name, dtype, src in [
        ("encode float32 -> float8_e4m3fn", getattr(torch, "float8_e4m3fn", None), t32),
        ("encode float32 -> float8_e5m2", getattr(torch, "float8_e5m2", None), t32),
        ("encode float32 -> bfloat16", torch.bfloat16, t32),
        ("encode float16 -> float8_e4m3fn", getattr(torch, "float8_e4m3fn", None), t16),
    ]:
        if dtype is not None:
            dst = torch.empty(src.shape, dtype=dtype, device="cuda")
            out[name] = lambda dst=dst, src=src: dst.copy_(src)
    if hasattr(torch, "float8_e4m3fn"):
        c8 = t32.to(torch.float8_e4m3fn)
        o32 = torch.empty_like(t32)
        out["decode float8_e4m3fn -> float32"] = lambda: o32.copy_(c8)
    return out


if __name__ == "__main__":
    sys.exit(main())
