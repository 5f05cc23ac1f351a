"""fp8kit.fake_convert against the openvino CPU device (compiled one-node FakeConvert-13)."""

import numpy as np

import fp8kit

from ._grid import pick

SIZES = pick([1_000_000], [1_000_000, 16_000_000])
LAYOUTS = ["per-tensor", "per-channel+shift"]
IMPLEMENTATIONS = ["fp8kit", "fp8kit_openvino_mode", "openvino"]


def _openvino_request(shape, scale_shape, with_shift):
    # (imported by the openvino rows only: asv starts a process per row)
    try:
        import openvino as ov
        from openvino import opset13 as ops
    except ImportError:  # openvino is optional: its rows are n/a
        raise NotImplementedError("openvino is not installed") from None
    data = ops.parameter(list(shape), ov.Type.f32)
    scale = ops.parameter(list(scale_shape), ov.Type.f32)
    params = [data, scale]
    if with_shift:
        shift = ops.parameter(list(scale_shape), ov.Type.f32)
        params.append(shift)
        node = ops.fake_convert(data, scale, shift, destination_type="f8e4m3")
    else:
        node = ops.fake_convert(data, scale, destination_type="f8e4m3")
    config = {"INFERENCE_PRECISION_HINT": "f32",
              "INFERENCE_NUM_THREADS": fp8kit.get_num_threads()}  # fmt: skip
    compiled = ov.Core().compile_model(ov.Model([node], params), "CPU", config)
    return compiled.create_infer_request()


class FakeConvert:
    """16M or 1M float32 values to f8e4m3 and back; outputs preallocated (fp8kit)."""

    params = [IMPLEMENTATIONS, LAYOUTS, SIZES]
    param_names = ["implementation", "layout", "size"]

    def setup(self, implementation, layout, size):
        rng = np.random.default_rng(0)
        rows = 1000
        x = rng.standard_normal(size).astype(np.float32)
        if layout == "per-tensor":
            scale, shift = np.float32([0.37]), None
        else:
            x = x.reshape(rows, size // rows)
            scale = rng.uniform(0.5, 2.0, (rows, 1)).astype(np.float32)
            shift = (scale * 0.1).astype(np.float32)
        out = np.empty_like(x)
        if implementation == "openvino":
            request = _openvino_request(x.shape, scale.shape, shift is not None)
            inputs = [x, scale] + ([] if shift is None else [shift])
            self.run = lambda: request.infer(inputs)
        else:
            mode = "openvino" if implementation.endswith("openvino_mode") else "spec"
            self.run = lambda: fp8kit.fake_convert(x, scale, shift, out=out, mode=mode)
        self.run()  # compile outside the timing

    def time_fake_convert(self, implementation, layout, size):
        self.run()
