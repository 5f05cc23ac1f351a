"""Oracle for ``fp8kit.cast``: ONNX Cast-21 run by onnx's reference evaluator, plus input data.

A helper module for the tests, not a test file.  ``onnx_cast`` builds a one-node opset-21 ``Cast``
model and runs it with :class:`onnx.reference.ReferenceEvaluator`; ``edge_values`` and
``random_values`` give inputs of every Cast-21 type.

Type names are fp8kit's: ``"bool"``, ``"int4"``, ``"uint4"``, ``"int8"`` ... ``"uint64"``,
``"float16"``, ``"bfloat16"``, ``"float32"``, ``"float64"``, ``"float8_e4m3fn"``,
``"float8_e4m3fnuz"``, ``"float8_e5m2"``, ``"float8_e5m2fnuz"`` and ``"string"``.

The reference is essentially ``x.astype(dtype)`` (with ``np.clip`` first for float8 targets when
``saturate``), so it inherits numpy's and ml_dtypes' behaviour, including some that is
platform dependent or raises.  Casts the reference cannot do raise ``TypeError`` (wrapped by the
evaluator): int4 <-> uint4; bfloat16, float8, int4 and uint4 -> string; string -> bfloat16,
float8, int4 and uint4.  String -> integer types parses with Python's ``int()`` (so "2.5" raises
``ValueError`` and out-of-range values raise ``OverflowError``).
"""

import functools

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

ONNX_TYPE = {
    "bool": TensorProto.BOOL,
    "int4": TensorProto.INT4,
    "uint4": TensorProto.UINT4,
    "int8": TensorProto.INT8,
    "int16": TensorProto.INT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
    "float8_e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
    "float8_e5m2": TensorProto.FLOAT8E5M2,
    "float8_e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ,
    "string": TensorProto.STRING,
    # Cast-25 added FLOAT4E2M1 and FLOAT8E8M0, Cast-28 FLOAT6E2M3 and FLOAT6E3M2
    "float4_e2m1fn": TensorProto.FLOAT4E2M1,
    "float8_e8m0fnu": TensorProto.FLOAT8E8M0,
    "float6_e2m3fn": TensorProto.FLOAT6E2M3,
    "float6_e3m2fn": TensorProto.FLOAT6E3M2,
    "int2": TensorProto.INT2,  # Cast-25
    "uint2": TensorProto.UINT2,
}

# dtype of the arrays holding each type.  Strings are object arrays of Python ``str`` (onnx's own
# mapping for STRING); the evaluator also accepts "<U" arrays, and returns "<U" arrays for string
# outputs.
NUMPY_DTYPE = {
    "bool": np.dtype(np.bool_),
    "int4": np.dtype(ml_dtypes.int4),
    "uint4": np.dtype(ml_dtypes.uint4),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "string": np.dtype(object),
    "float4_e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "float6_e2m3fn": np.dtype(ml_dtypes.float6_e2m3fn),
    "float6_e3m2fn": np.dtype(ml_dtypes.float6_e3m2fn),
    "int2": np.dtype(ml_dtypes.int2),
    "uint2": np.dtype(ml_dtypes.uint2),
}

FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
FLOATS = ("float16", "bfloat16", "float32", "float64", *FLOAT8)
INTS = ("int4", "uint4", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@functools.lru_cache(maxsize=2048)  # 24 x 24 types x 2 saturate modes x 2 opsets fit
def _evaluator(from_type, to_type, saturate, opset=21):
    node = helper.make_node("Cast", ["x"], ["y"], to=ONNX_TYPE[to_type], saturate=int(saturate))
    graph = helper.make_graph(
        [node],
        "cast",
        [helper.make_tensor_value_info("x", ONNX_TYPE[from_type], [None])],
        [helper.make_tensor_value_info("y", ONNX_TYPE[to_type], [None])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model)


def onnx_cast(x, from_type: str, to_type: str, saturate: bool = True, opset: int = 21):
    """Cast ``x`` (of ``from_type``) to ``to_type`` with the onnx reference's Cast-21 (or the
    Cast of ``opset``: 25 for FLOAT4E2M1 and FLOAT8E8M0, 28 for the float6 types).

    ``x`` must already have ``NUMPY_DTYPE[from_type]`` if it is an array (lists are converted;
    string input may also be a "<U" array).  The result is what the evaluator returns, reshaped to
    ``x``'s shape; numpy's floating-point warnings ("invalid value encountered in cast",
    "overflow encountered in cast") are silenced.

    >>> onnx_cast(np.int16([200, -200]), "int16", "int8").tolist()
    [-56, 56]
    """
    want = NUMPY_DTYPE[from_type]
    if from_type == "string":
        x = np.asarray(x, dtype=object)
    elif isinstance(x, np.ndarray):
        if x.dtype != want:
            raise TypeError(f"{from_type} input must have dtype {want}, not {x.dtype}")
    else:
        x = np.asarray(x, dtype=want)
    with np.errstate(all="ignore"):
        (y,) = _evaluator(from_type, to_type, bool(saturate), opset).run(None, {"x": x.reshape(-1)})
    return y.reshape(x.shape)


def _unique_bits(a):
    """``a`` without bitwise duplicates, in first-seen order."""
    if a.dtype == object:
        return a
    bits = a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize > 1 else a.view(np.uint8)
    _, first = np.unique(bits, return_index=True)
    return a[np.sort(first)]


def _all_codes(type_name):
    """Every bit pattern of an 8- or 16-bit float type."""
    dtype = NUMPY_DTYPE[type_name]
    return np.arange(2 ** (8 * dtype.itemsize), dtype=f"u{dtype.itemsize}").view(dtype)


def _narrow_float_points(name):
    """Overflow thresholds and subnormal ties of a narrow float format (float8: every value and
    every tie between neighbours too)."""
    fi = ml_dtypes.finfo(NUMPY_DTYPE[name]) if name != "float32" else np.finfo(np.float32)
    top, tiny = float(fi.max), float(fi.smallest_subnormal)
    ulp_top = 2.0 ** (np.floor(np.log2(top)) - fi.nmant)
    points = [
        top,
        top + ulp_top / 2,  # overflow threshold: the tie between max and the next power
        top + ulp_top,
        tiny,
        tiny / 2,  # tie between 0 and the smallest subnormal
        tiny * 1.5,  # tie between the two smallest subnormals
        float(fi.smallest_normal),
        float(fi.smallest_normal) - tiny,  # largest subnormal
    ]
    if name in FLOAT8:
        values = np.sort(np.unique(np.abs(_all_codes(name).astype(np.float64))))
        values = values[np.isfinite(values)]
        points += [*values, *((values[1:] + values[:-1]) / 2)]  # exact values and ties
    return points


def _int_points():
    points = [0, 1, -1, 2, 7, 8, -8, -9, 15, 16, 17, 100, 127, 128, -128, -129, 200, -200]
    points += [240, 248, 255, 256, 257, 300, 448, 449, 464, 465, 480, 1000]
    points += [2**15 - 1, 2**15, -(2**15), -(2**15) - 1, 2**16 - 1, 2**16, 57344, 61439, 61440]
    points += [65504, 65519, 65520, 70000, -70000, 2**24 + 1, 2**24 + 2**16 + 1, 2**31 - 1]
    points += [2**31, -(2**31), -(2**31) - 1, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 5]
    points += [2**40 + 2**32 + 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**53 + 2**29 + 1]
    points += [2**60 + 2**52 + 1, 2**63 - 1, -(2**63), 2**63, 2**63 + 2**39 + 1, 2**64 - 1]
    return points


def _float_points():
    points = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan]
    points += [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1.0, -1.0, 2.7, -2.7, 0.1, 1 / 3, 3.14]
    points += [7.9, -8.5, 9.0, 15.5, 16.0, 17.0, -17.3, -0.9, 0.9]
    for name in INTS:  # just inside and just beyond every integer range
        info = ml_dtypes.iinfo(NUMPY_DTYPE[name])
        lo, hi = float(info.min), float(info.max)
        points += [lo - 1, lo - 0.5, lo, lo + 0.5, hi - 0.5, hi, hi + 0.5, hi + 0.9, hi + 1]
        points += [2 * (hi + 1), -2 * (hi + 1)]
    points += [255.9, 1e10, -1e10, 1e20, -1e20, 1e30, -1e30, 1e300, -1e300, 3e9, -3e9]
    for name in (*FLOAT8, "float16", "bfloat16", "float32"):
        points += _narrow_float_points(name)
    # float64 -> narrower: above a tie by less than float32 can hold (double-rounding probes)
    for m in (2, 3, 7, 10, 23):
        points += [1 + 2.0 ** -(m + 1) + 2.0**-40, 1 + 2.0 ** -(m + 1) - 2.0**-40]
    points += [2.0**-10 + 2.0**-40, 61439.99999999, 464.00000000001, 65519.999999]
    points = np.array(points, dtype=np.float64)
    return np.concatenate([points, -points])


def edge_values(type_name: str) -> np.ndarray:
    """Edge-case inputs of ``type_name`` (dtype ``NUMPY_DTYPE[type_name]``), without duplicates.

    8- and 16-bit floats: every code; int4/uint4: all 16 values.  float32/float64: zeros,
    infinities, NaNs, max, subnormals, every float8 value and the ties between them, the overflow
    thresholds of every narrower float (and their neighbours), ties such as +-0.5, values in and
    just beyond every integer range, and values that round differently in one step than through
    float32.
    Integers: 0, +-1, min, max and values that wrap in narrower types or round in floats.
    Strings: numeric strings that the reference parses for float targets (Python ``float()``
    syntax); only the integral ones parse for integer targets, none for bfloat16/float8/int4.
    """
    dtype = NUMPY_DTYPE[type_name]
    if type_name == "bool":
        return np.array([False, True])
    if type_name in ("int4", "uint4"):
        info = ml_dtypes.iinfo(dtype)
        return np.arange(int(info.min), int(info.max) + 1).astype(dtype)
    if type_name in FLOATS and dtype.itemsize <= 2:
        return _all_codes(type_name)
    if type_name in INTS:
        info = np.iinfo(dtype)
        points = [info.min, info.max, *_int_points()]
        return _unique_bits(np.array([p for p in points if info.min <= p <= info.max], dtype=dtype))
    if type_name in ("float32", "float64"):
        points = _float_points()
        with np.errstate(all="ignore"):
            x = points.astype(dtype)
            nudged = [np.nextafter(x, dtype.type(np.inf)), np.nextafter(x, dtype.type(-np.inf))]
        x = np.concatenate([x, *nudged])
        source = np.concatenate([points] * 3)
        # drop finite points that overflowed (the infinities are in the list anyway)
        return _unique_bits(x[np.isfinite(x) | ~np.isfinite(source)])
    if type_name == "string":
        return np.array(
            [
                *("0", "-0", "1", "-1", "7", "100", "-200", "65504", "2147483648"),
                *("3.14", "-2.5", "0.5", "1.5", "100.5", "1.", ".5", "+3", " 7", "7 ", " 7 "),
                *("1E8", "1e8", "1e-5", "1E-45", "1e10", "-1e10", "1e-7", "1e400", "-1e400"),
                *("1e-400", "448", "464", "465", "57344", "61440", "65520", "3.4028235e38"),
                *("3.4028236e38", "1.000000059604644775390625000000001"),
                *("+INF", "INF", "-INF", "inf", "-inf", "+inf", "Inf", "iNf", "Infinity"),
                *("-Infinity", "NaN", "nan", "NAN", "-nan", "+nan"),
            ],
            dtype=object,
        )
    raise KeyError(type_name)


def random_values(type_name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` random values of ``type_name``: random bit patterns for floats, full-range ints.

    Strings are Python ``repr`` of random float64 bit patterns and random int64 values (all
    parse for float targets).
    """
    dtype = NUMPY_DTYPE[type_name]
    if type_name == "bool":
        return rng.integers(0, 2, n).astype(np.bool_)
    if type_name in FLOATS:
        bits = np.dtype(f"u{dtype.itemsize}")
        return rng.integers(0, np.iinfo(bits).max, n, dtype=bits, endpoint=True).view(dtype)
    if type_name in ("int4", "uint4"):
        info = ml_dtypes.iinfo(dtype)
        return rng.integers(int(info.min), int(info.max), n, endpoint=True).astype(dtype)
    if type_name in INTS:
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if type_name == "string":
        floats = random_values("float64", n, rng)
        ints = random_values("int64", n, rng)
        pick = rng.integers(0, 2, n).astype(bool)
        return np.array(
            [
                repr(float(f)) if p else str(int(i))
                for f, i, p in zip(floats, ints, pick, strict=True)
            ],
            dtype=object,
        )
    raise KeyError(type_name)


@functools.cache
def conformance_cases() -> tuple:
    """Every Cast and CastLike node case of ONNX's conformance suite that the installed onnx
    ships (``test_cast_*`` and ``test_castlike_*``, the ``_expanded`` ones included).

    Importing a case module of ``onnx.backend.test.case.node`` registers its cases; only the
    modules named ``cast*`` are imported (``collect_testcases()`` imports every operator's,
    10 s or more), falling back to ``collect_testcases`` if onnx reorganises that package.
    """
    import importlib
    import pkgutil
    import warnings

    import onnx.backend.test.case.node as node

    with warnings.catch_warnings():  # the case generators overflow on purpose
        warnings.simplefilter("ignore")
        registry = getattr(node, "_NodeTestCases", None)
        if isinstance(registry, list) and getattr(node, "_TargetOpType", None) is None:
            for info in pkgutil.iter_modules(node.__path__):
                if info.name.startswith("cast"):
                    importlib.import_module(f"{node.__name__}.{info.name}")
            cases = list(registry)
        else:
            cases = node.collect_testcases(None)
    names = ("test_cast_", "test_castlike_")
    unique = {c.name: c for c in cases if c.name.startswith(names)}
    return tuple(unique.values())
