"""The OPENVINO oracle tables: the element type that ConvertPromoteTypes-14 infers.

``python scripts/oracles/openvino_table.py`` writes tests/data/promotion/openvino.json and
openvino_u64_targets.json.  Each cell builds one node, ``opset14.convert_promote_types``,
on two Parameters of the given element types (shape [2] for a tensor, [] for a 0-d tensor)
and reads the inferred element type of its outputs; ``"error"`` when OpenVINO refuses the
pair (its NODE_VALIDATION_CHECK).  A Python scalar is what ``opset14.constant`` makes of it
(boolean, i64 or f64, rank 0; a complex scalar cannot be a constant: ``"error"``).

openvino.json has one grid per (promote_unsafe, pytorch_scalar_promotion) with the default
u64 target f32; openvino_u64_targets.json has the tensor-tensor grid with promote_unsafe=True
for several u64_integer_promotion_target values.  The operands are every element type of
``openvino.Type`` that fp8kit represents (u1, u2, f4e2m1 and f8e8m0 as ml_dtypes' uint1, uint2,
float4_e2m1fn and float8_e8m0fnu); ``not_represented`` lists the others (u3, u6, nf4, string,
dynamic).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

#: fp8kit (ml_dtypes) name -> OpenVINO element type name
OV_NAMES = {
    "bool": "boolean",
    "int4": "i4",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint1": "u1",
    "uint2": "u2",
    "uint4": "u4",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float4_e2m1fn": "f4e2m1",
    "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
    "float8_e8m0fnu": "f8e8m0",
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
}
FROM_OV = {v: k for k, v in OV_NAMES.items()}
DTYPES = list(OV_NAMES)
ATTRIBUTES = [(False, False), (False, True), (True, False), (True, True)]
U64_TARGETS = ["f64", "f16", "bf16", "f8e4m3", "i64", "i32", "u64", "u8", "i4", "boolean"]


def op_key(promote_unsafe, pytorch_scalar_promotion, target="f32"):
    return (
        f"promote_unsafe={int(promote_unsafe)},"
        f"pytorch_scalar_promotion={int(pytorch_scalar_promotion)},"
        f"u64_integer_promotion_target={target}"
    )


def build():
    import openvino as ov
    from openvino import opset14 as ops

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return ops.constant(C.PY_VALUES[op])
        shape = [2] if kind == "tensor" else []
        return ops.parameter(shape, getattr(ov.Type, OV_NAMES[name]))

    def promote(unsafe, pt, target="f32"):
        def cell(a, b):
            try:
                node = ops.convert_promote_types(make(a), make(b), unsafe, pt, target)
            except (RuntimeError, TypeError):  # complex constants, NODE_VALIDATION_CHECK
                return "error"
            t0, t1 = node.get_output_element_type(0), node.get_output_element_type(1)
            assert t0 == t1, (a, b, t0, t1)
            return FROM_OV.get(t0.get_type_name(), t0.get_type_name())

        return cell

    every = sorted(
        t.get_type_name()
        for t in (getattr(ov.Type, n) for n in dir(ov.Type) if not n.startswith("_"))
        if isinstance(t, ov.Type)
    )
    not_represented = [t for t in every if t not in FROM_OV]
    version = f"openvino {ov.get_version()}"
    ops_all = C.operands(DTYPES, scalars=False) + ["py:bool", "py:int", "py:float", "py:complex"]
    main = {
        "preset": "OPENVINO",
        "generator": "scripts/oracles/openvino_table.py",
        "library": version,
        "not_represented": not_represented,
        "operands": ops_all,
        "ops": {op_key(u, p): C.grid(ops_all, promote(u, p)) for u, p in ATTRIBUTES},
    }
    ops_t = list(DTYPES)
    targets = {
        "preset": "OPENVINO (u64_integer_promotion_target)",
        "generator": "scripts/oracles/openvino_table.py",
        "library": version,
        "operands": ops_t,
        "ops": {
            op_key(True, False, t): C.grid(ops_t, promote(True, False, t)) for t in U64_TARGETS
        },
    }
    return {"openvino": main, "openvino_u64_targets": targets}


if __name__ == "__main__":
    C.main(build, ["openvino", "openvino_u64_targets"])
