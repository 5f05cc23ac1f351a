"""The disputed cases of ONNX Cast, as ONNX's oracles answer them.

``python scripts/oracles/cast_disputes.py`` writes tests/data/cast/disputes.json: for each case
of ``CASES`` (one value cast from one type to another), the Cast text's answer (written here,
from the spec pages), and what ONNX's conformance suite (the expected output of a case that
feeds the value, if one does), ``onnx.reference`` and ONNX Runtime (CPU) give, from the
installed onnx and onnxruntime.  docs/cast.md's generated ``cast-disputes`` table reads the
file (the docs build needs neither library) and adds fp8kit's answers, computed live;
tests/test_cast_disputes.py checks that the file is what the installed libraries say.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "cast" / "disputes.json"

#: (id, the question, x, from, to, saturate, the Cast text's answer, the rule of fp8kit that
#: gives the other reading).  The text: Cast-21's tables and sentences
#: (../shared/specs/onnx-Cast-21.txt) and, for FLOAT4E2M1, ONNX's float4 page.
CASES = [
    ("fnuz-inf", "+Inf into FLOAT8E4M3FNUZ (saturate=1)", "inf", "float32",
     "float8_e4m3fnuz", True, "NaN (table)", "fnuz-inf-nan"),
    ("fnuz-minus-inf", "-Inf into FLOAT8E5M2FNUZ (saturate=1)", "-inf", "float32",
     "float8_e5m2fnuz", True, "NaN (table)", "fnuz-inf-nan"),
    ("float4-nan", "NaN into FLOAT4E2M1", "nan", "float32", "float4_e2m1fn", True,
     "6 (float4 page)", "float4-nan-six"),
    ("int4-below", "-9.0 into INT4", "-9", "float32", "int4", True, "undefined (OOR)",
     "int-clamp"),
    ("uint4-above", "448.0 into UINT4", "448", "float32", "uint4", True, "undefined (OOR)",
     "int-clamp"),
    ("int4-half", "7.5 into INT4", "7.5", "float32", "int4", True, "not said", "reference-int"),
    ("int8-above", "300.0 into INT8", "300", "float32", "int8", True, "undefined (OOR)",
     "int-clamp"),
    ("int32-nan", "NaN into INT32", "nan", "float32", "int32", True, "undefined (OOR)",
     "int-clamp"),
    ("float8-nan-int32", "FLOAT8E4M3FN NaN into INT32", "nan", "float8_e4m3fn", "int32", True,
     "undefined (OOR)", "reference-int"),
    ("uint32-nan", "NaN into UINT32", "nan", "float32", "uint32", True, "undefined (OOR)",
     "reference-int"),
    ("e5m2-61440", "61440 into FLOAT8E5M2 (saturate=0)", "61440", "float32", "float8_e5m2",
     False, "+Inf (table)", None),
    ("e4m3fn-480", "480 into FLOAT8E4M3FN (saturate=0)", "480", "float32", "float8_e4m3fn",
     False, "NaN (table)", None),
    ("float8-minus-zero-bool", "FLOAT8E4M3FN -0 into BOOL", "-0.0", "float8_e4m3fn", "bool",
     True, "False ('+/- 0.0 to False')", None),
    ("int32-bfloat16", "INT32 2**24 + 2**16 + 1 into BFLOAT16", "16842753", "int32", "bfloat16",
     True, "not said", "round-once"),
    ("float64-e4m3fn", "DOUBLE 1 + 2**-4 + 2**-40 into FLOAT8E4M3FN", "1.0625000000009095",
     "float64", "float8_e4m3fn", True, "not said", "round-once"),
    ("float64-float16", "DOUBLE 65519.999999 into FLOAT16", "65519.999999", "float64",
     "float16", True, "+Inf if OOR (it is in range)", "round-once"),
    ("string-int-exponent", '"1e3" into INT32', "1e3", "string", "int32", True,
     "undefined (float-like strings to INT)", "exact-strings"),
    ("string-float-twice", '"1.000000059604644775390625000000001" into FLOAT',
     "1.000000059604644775390625000000001", "string", "float32", True, "not said",
     "exact-strings"),
    ("string-bool-half", '"0.5" into BOOL', "0.5", "string", "bool", True, "not said",
     "exact-strings"),
    ("double-string", "DOUBLE 1/3 into STRING", "0.3333333333333333", "float64", "string",
     True, "plain floating-point representation", "exact-strings"),
    ("float-inf-string", "FLOAT +Inf into STRING", "inf", "float32", "string", True,
     "not said", "exact-strings"),
]  # fmt: skip


def show(value) -> str:
    """One answer as the table prints it (``value``: a 0-d array or numpy scalar)."""
    a = np.asarray(value)
    if a.dtype.kind in "OUS":
        return '"' + str(a[()]) + '"'
    if a.dtype == np.bool_:
        return str(bool(a))
    if a.dtype.kind in "iu" or a.dtype.name in ("int4", "uint4", "int2", "uint2"):
        return str(int(a))
    v = float(a.astype(np.float64))
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def value(text: str, type_name: str) -> np.ndarray:
    """The input: ``text`` (an exact decimal) as a length-1 array of ``type_name``."""
    import ml_dtypes  # noqa: F401 - the narrow dtypes

    from fp8kit.cast import ALL_CAST_TYPES

    if type_name == "string":
        return np.array([text], dtype=object)
    dtype = ALL_CAST_TYPES[type_name].dtype
    if dtype.kind in "iu":
        return np.array([int(text)], dtype)
    return np.array([float(text)]).astype(dtype)


def _suite_answers():
    """{(from, to, saturate): [(input, expected output), ...]} of the conformance suite."""
    import onnx
    from onnx import helper, numpy_helper
    from onnx_cast_oracle import conformance_cases

    from fp8kit.cast import cast_type

    out: dict = {}
    for c in conformance_cases():
        (node,) = c.model.graph.node
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ((inputs, outputs),) = c.data_sets
        x, y = numpy_helper.to_array(inputs[0]), numpy_helper.to_array(outputs[0])
        to = onnx.TensorProto.DataType.Name(c.model.graph.output[0].type.tensor_type.elem_type)
        try:
            key = (cast_type(x.dtype).name, cast_type(to).name, bool(attrs.get("saturate", 1)))
        except (TypeError, ValueError):
            continue
        out.setdefault(key, []).extend(zip(x.ravel(), y.ravel(), strict=True))
    return out


def _same_input(a, b) -> bool:
    fa, fb = float(np.float64(a)), float(np.float64(b))
    if math.isnan(fa) or math.isnan(fb):
        return math.isnan(fa) and math.isnan(fb)
    return fa == fb and math.copysign(1, fa) == math.copysign(1, fb)


def record() -> dict:
    """The file's content, from the installed onnx and onnxruntime."""
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    import onnx
    import onnxruntime
    from onnx_cast_oracle import onnx_cast
    from ort_cast_oracle import ort_cast, supports

    suite = _suite_answers()
    rows = []
    for cid, question, text, src, dst, sat, spec, rule in CASES:
        # four copies: a whole vector (numpy's and ORT's float -> uint32 give other bits in
        # the last n % 4 elements of an array, their scalar loop); the first one is shown
        x = np.repeat(value(text, src), 4)
        expected = [y for xi, y in suite.get((src, dst, sat), []) if _same_input(xi, x[0])]
        opset = 25 if dst == "float4_e2m1fn" else 21
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ref = show(onnx_cast(x, src, dst, sat, opset=opset)[0])
            except Exception:  # noqa: BLE001 - the evaluator's own errors
                ref = "refuses"
            ort = show(ort_cast(x, src, dst, sat)[0]) if supports(src, dst, sat) else "no kernel"
        rows.append(
            {
                "id": cid,
                "question": question,
                "x": text,
                "from": src,
                "to": dst,
                "saturate": sat,
                "cast_text": spec,
                "suite": show(expected[0]) if expected else None,
                "onnx_reference": ref,
                "onnxruntime": ort,
                "rule": rule,
            }
        )
    return {
        "generated_by": "scripts/oracles/cast_disputes.py",
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "cases": rows,
    }


def dump(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


def main() -> None:
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(dump(record()))
    print(f"wrote {DATA.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
