"""fp8kit.fake_convert against the openvino CPU device, side by side in one run.

16M float32 values; per-tensor scale, and per-channel scale with shift on a 4000 x 4000
array; openvino's time is ``infer`` on a compiled one-node FakeConvert-13 model
(INFERENCE_PRECISION_HINT f32), both libraries on the same number of threads.

    python benchmarks/compare_fake_convert.py [--repeat 11] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fp8kit


def median_ms(f, repeat):
    f()
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        samples.append(time.perf_counter() - t)
    return float(np.median(samples)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--threads", type=int, default=fp8kit.get_num_threads())
    args = parser.parse_args()
    import openvino as ov
    from openvino import opset13 as ops

    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": args.threads}

    def compiled(shape, scale_shape, with_shift):
        data = ops.parameter(shape, ov.Type.f32)
        scale = ops.parameter(scale_shape, ov.Type.f32)
        params = [data, scale]
        if with_shift:
            shift = ops.parameter(scale_shape, ov.Type.f32)
            params.append(shift)
            node = ops.fake_convert(data, scale, shift, destination_type="f8e4m3")
        else:
            node = ops.fake_convert(data, scale, destination_type="f8e4m3")
        return core.compile_model(ov.Model([node], params), "CPU", config).create_infer_request()

    rng = np.random.default_rng(0)
    x = rng.standard_normal(16_000_000).astype(np.float32)
    out = np.empty_like(x)
    xc, outc = x.reshape(4000, 4000), out.reshape(4000, 4000)
    sc = rng.uniform(0.5, 2.0, (4000, 1)).astype(np.float32)
    sh = (sc * 0.1).astype(np.float32)
    per_tensor = compiled([x.size], [1], False)
    per_channel = compiled([4000, 4000], [4000, 1], True)
    s1 = np.float32([0.37])
    rows = []
    with fp8kit.num_threads(args.threads):
        copy = median_ms(lambda: np.copyto(out, x), args.repeat)
        for name, ov_call, fk_call, fk_ov_call in [
            ("per-tensor", lambda: per_tensor.infer([x, s1]),
             lambda: fp8kit.fake_convert(x, s1, out=out),
             lambda: fp8kit.fake_convert(x, s1, out=out, mode="openvino")),
            ("per-channel + shift", lambda: per_channel.infer([xc, sc, sh]),
             lambda: fp8kit.fake_convert(xc, sc, sh, out=outc),
             lambda: fp8kit.fake_convert(xc, sc, sh, out=outc, mode="openvino")),
        ]:  # fmt: skip
            t_ov = median_ms(ov_call, args.repeat)
            t_fk = median_ms(fk_call, args.repeat)
            t_fo = median_ms(fk_ov_call, args.repeat)
            rows.append((name, t_ov, t_fk, t_fo))
    print(
        f"openvino {ov.__version__}, {args.threads} threads, 16M float32, f8e4m3, "
        f"median of {args.repeat}; float32 copy {copy:.2f} ms"
    )
    print(
        "| case | openvino CPU ms | fp8kit ms | openvino / fp8kit | fp8kit / copy "
        "| fp8kit mode=openvino ms |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, t_ov, t_fk, t_fo in rows:
        print(
            f"| {name} | {t_ov:.2f} | {t_fk:.2f} | {t_ov / t_fk:.1f}x | {t_fk / copy:.2f} "
            f"| {t_fo:.2f} |"
        )


if __name__ == "__main__":
    main()
