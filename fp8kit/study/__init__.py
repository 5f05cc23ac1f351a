"""Quantization-error studies: how much accuracy a low-precision format costs on your data.

Metrics (:func:`error_metrics`), scaling recipes (:func:`scale_for`, :func:`mx_scales`,
:class:`DelayedScaling`: per tensor, per channel, MX blocks under the OCP rule or torchao's
and cuBLAS's, NVFP4, tiles), scaled quantization through FakeConvert's fused kernel
(:func:`quantize`, which also returns the scale it used) and sweeps over formats and
recipes (:func:`sweep`), which the
``fp8kit study`` command prints; the model-level summary of a sweep (:func:`summarize`) and
its rows as records (:func:`records`) or a pandas DataFrame (:func:`to_dataframe`); and
the error of a layer's output ``x @ w.T`` computed from quantized operands by tensor-core
accumulators (:func:`gemm_error`).
"""

from .gemm import GemmError, gemm_error
from .metrics import ErrorMetrics, error_metrics
from .report import SummaryRow, records, summarize, to_dataframe
from .scaling import DelayedScaling, mx_scales, quantize, scale_for
from .sweep import Scaling, SweepRow, TensorFile, demo_tensors, parse_scaling, sweep

__all__ = [
    "DelayedScaling",
    "ErrorMetrics",
    "GemmError",
    "Scaling",
    "SummaryRow",
    "SweepRow",
    "TensorFile",
    "demo_tensors",
    "error_metrics",
    "gemm_error",
    "mx_scales",
    "parse_scaling",
    "quantize",
    "records",
    "scale_for",
    "summarize",
    "sweep",
    "to_dataframe",
]
