"""The ONEFLOW oracle tables: OneFlow 0.9.0's operators on the CPU.

OneFlow 0.9.0 installs only on Python 3.10 (its cp310 wheel; it needs ``numpy<2``), and its
shared libraries need ``nvidia-cudnn-cu11==8.5.0.96`` and ``nvidia-cublas-cu11==11.10.3.66``::

    python3.10 -m venv /tmp/of310
    /tmp/of310/bin/pip install oneflow==0.9.0 "numpy<2" \\
        nvidia-cudnn-cu11==8.5.0.96 nvidia-cublas-cu11==11.10.3.66
    /tmp/of310/bin/python scripts/oracles/oneflow_table.py

The script puts the two packages' lib folders on ``LD_LIBRARY_PATH`` and runs itself again;
OneFlow then runs on the CPU with a warning about the missing GPU.  It writes

- tests/data/promotion/oneflow.json: ``x + y``, ``x / y`` and ``x == y`` on every ordered pair
  of OneFlow's types (bool, uint8, int8, int32, int64, float16, bfloat16, float32, float64;
  0.9.0 has no int16 or complex dtype) as tensors of shape (2,), 0-d tensors and Python
  scalars.  The dtype is the one the operator returns (eager dispatch infers it; nothing is
  computed);
- tests/data/promotion/oneflow_nary.json: ``x.sum()``, ``x.prod()``, ``flow.cumsum(x, 0)`` and
  ``x.mean()`` of a tensor and a 0-d tensor of each type, ``flow.cat`` of 3 to 6 tensors
  (OneFlow's TensorProcessor converts all inputs to their common type at once; cat takes
  dimensioned tensors only) and chains ``a + b + c + ...`` of 3 to 6 tensors, 0-d tensors and
  Python scalars (the first operand a tensor or 0-d tensor).

A cell is the result's dtype, ``"error"`` (OneFlow raised: "Can only calculate the mean of
floating types", "The scalar in scalar_div should be float or int", ...), ``"nokernel"``
(OneFlow chose a type but has no CPU kernel for it: "Cannot find the kernel matching Current
OperatorConf", e.g. uint8 + int8, whose common type int16 has no kernel) or ``"crash"``
(OneFlow 0.9.0 dies with SIGSEGV on any Python complex scalar: those cells run in a forked
child, as do the reductions, whose 0-d cumsum aborts in the kernel).
"""

from __future__ import annotations

import operator
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DTYPES = ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def _nvidia_lib_dirs() -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0])
    return sorted(str(p) for p in root.glob("*/lib") if p.is_dir())


def _ensure_libraries() -> None:
    """Run again with the cuDNN/cuBLAS wheels' lib folders on LD_LIBRARY_PATH (the dynamic
    loader reads it at start only)."""
    dirs = _nvidia_lib_dirs()
    have = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    if dirs and not set(dirs) <= set(have):
        env = dict(os.environ, LD_LIBRARY_PATH=":".join(dirs + [h for h in have if h]))
        env.setdefault("GLOG_minloglevel", "2")  # OneFlow's glog warnings
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def _classify(e: BaseException) -> str:
    text = str(e)
    if "Cannot find the kernel" in text:
        return "nokernel"
    return "error"


def _forked(fn) -> str:
    """``fn()`` (a str) in a forked child: a segfault or abort there is ``"crash"``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        try:
            msg = fn()
        except Exception as e:  # OneFlow raises its own exception types
            msg = _classify(e)
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and data:
        return data.decode()
    return "crash"


def build_all():
    import oneflow as flow

    def make(op):
        kind, name = C.split(op)
        if kind == "py":
            return C.PY_VALUES[op]
        return flow.ones((2,) if kind == "tensor" else (), dtype=getattr(flow, name))

    def name_of(dt):
        return str(dt).replace("oneflow.", "")

    def guarded(fn, risky: bool):
        def run():
            return name_of(fn().dtype)

        if risky:
            return _forked(run)
        try:
            return run()
        except Exception as e:  # OneFlow raises its own exception types
            return _classify(e)

    def binary(fn):
        def cell(a, b):
            return guarded(lambda: fn(make(a), make(b)), "py:complex" in (a, b))

        return cell

    ops = C.operands(DTYPES)
    pairs = {
        "preset": "ONEFLOW",
        "generator": "scripts/oracles/oneflow_table.py",
        "library": f"oneflow {flow.__version__} (eager, CPU)",
        "operands": ops,
        "ops": {
            "add": C.grid(ops, binary(operator.add), skip_py_pairs=True),
            "divide": C.grid(ops, binary(operator.truediv), skip_py_pairs=True),
            "compare": C.grid(ops, binary(operator.eq), skip_py_pairs=True),
        },
    }

    reducers = {
        "sum": lambda x: x.sum(),
        "prod": lambda x: x.prod(),
        "cumsum": lambda x: flow.cumsum(x, 0),
        "mean": lambda x: x.mean(),
    }
    red_ops = C.operands(DTYPES, scalars=False)

    def chain(m):
        def run():
            x = make(m[0])
            for o in m[1:]:
                x = x + make(o)
            return x

        return guarded(run, "py:complex" in m)

    cats = C.random_mixes(DTYPES, count=300, seed=4451, zero_dim=False, scalars=False)
    chains = C.random_mixes(DTYPES, count=400, seed=4452, lead=("tensor", "0d"))
    nary = {
        "preset": "ONEFLOW",
        "generator": "scripts/oracles/oneflow_table.py",
        "library": f"oneflow {flow.__version__} (eager, CPU)",
        "reductions": {
            "operands": red_ops,
            "ops": C.reduction_cells(
                red_ops, lambda r, a: guarded(lambda: reducers[r](make(a)), True)
            ),
        },
        "mixes": {
            "cat": [m + [guarded(lambda: flow.cat([make(o) for o in m]), False)] for m in cats],  # noqa: B023
            "chain": [m + [chain(m)] for m in chains],
        },
    }
    return {"oneflow": pairs, "oneflow_nary": nary}


if __name__ == "__main__":
    _ensure_libraries()
    C.main(build_all, ["oneflow", "oneflow_nary"])
