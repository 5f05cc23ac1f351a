"""The asv suite for its users (issue 45): small grids by default and the full ones behind
FP8KIT_ASV_FULL=1; torch, openvino, mmaemu and Dask optional (their rows n/a, as asv shows a
NotImplementedError in setup); `.[bench]` installs no torch; run_each.py finds every
benchmark asv finds."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASV = ROOT / "asv_bench"

COUNT = """
import importlib, inspect, json, run_each
rows = {}
for name in run_each.benchmark_names():
    parts = name.split(".")
    obj = importlib.import_module("benchmarks." + parts[0])
    for p in parts[1:]:
        obj = getattr(obj, p)
    owner = obj if len(parts) == 2 else getattr(importlib.import_module("benchmarks." + parts[0]),
                                                 parts[1])
    params = getattr(obj, "params", None) or getattr(owner, "params", None) or []
    if params and not isinstance(params[0], (list, tuple)):
        params = [params]
    n = 1
    for p in params:
        n *= len(p)
    rows[name] = n
print(json.dumps(rows))
"""


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ASV,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


def test_default_grids_are_small_and_the_full_ones_a_switch_away():
    small = _python(COUNT, FP8KIT_ASV_FULL="0")
    full = _python(COUNT, FP8KIT_ASV_FULL="1")
    assert small.returncode == 0 and full.returncode == 0, small.stderr + full.stderr
    small, full = json.loads(small.stdout), json.loads(full.stdout)
    assert set(small) == set(full) and len(small) >= 30  # the same benchmarks, fewer rows
    # (asv --quick of the default suite: 120 rows, 3.2 minutes on 2 busy cores)
    assert sum(small.values()) <= 150, small
    assert sum(full.values()) >= 5 * sum(small.values())


def test_peers_are_optional():
    """Without torch, openvino and Dask the suite imports and their rows are n/a."""
    res = _python(
        """
import sys
for m in ("torch", "openvino", "dask", "dask.array", "mmaemu", "mmasim"):
    sys.modules[m] = None  # (as if not installed)
from benchmarks import bench_codec, bench_dask, bench_fake_convert, bench_matmul
cases = [
    lambda: bench_codec.Encode().setup("torch", "float8_e4m3fn", 1000),
    lambda: bench_codec.Decode().setup("torch", "bfloat16", 1000),
    lambda: bench_fake_convert.FakeConvert().setup("openvino", "per-tensor", 1000),
    lambda: bench_dask.DaskEncode().setup(),
    lambda: bench_matmul.ScaledMM().setup("mmaemu", True),
]
for case in cases:
    try:
        case()
    except NotImplementedError:
        continue
    raise AssertionError("ran without its library")
bench_codec.Encode().setup("fp8kit", "float8_e4m3fn", 1000)  # fp8kit's own rows run
print("ok")
"""
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_bench_extra_installs_no_torch():
    text = (ROOT / "pyproject.toml").read_text()
    bench = re.search(r"^bench = \[(.*?)^\]", text, re.M | re.S)[1]  # (no tomllib on 3.10)
    assert '"asv>=0.6"' in bench
    for peer in ("torch", "mmasim", "mmaemu"):
        assert f'"{peer}' not in bench, peer
    conf = json.loads((ASV / "asv.conf.json").read_text())
    assert "torch" not in conf["matrix"]["req"]
