"""The dependency floors: pyproject.toml's are the versions .ci/run's min-versions job
installs (.ci/min-versions.txt), and the one use of Numba's private pass-manager API
(fp8kit._kernels.native._library_class) falls back to Numba's own pipeline, with a
warning, where Numba's internals are not as it knows them."""

import ctypes
import itertools
import re
import sys
from pathlib import Path

import pytest
from llvmlite import ir
from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ImportError:  # Python 3.10 (pytest installs tomli there)
    import tomli as tomllib

from fp8kit._kernels import native

ROOT = Path(__file__).parents[1]
CONSTRAINTS = ROOT / ".ci" / "min-versions.txt"


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _floors() -> dict[str, Version]:
    """pyproject's dependencies, each with its floor (a ``>=`` clause, required)."""
    floors = {}
    for line in _pyproject()["project"]["dependencies"]:
        req = Requirement(line)
        lower = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert len(lower) == 1, f"{line}: a dependency needs one floor (>=)"
        assert req.marker is None and not req.extras, line
        floors[req.name.replace("_", "-").lower()] = lower[0]
    return floors


def _constraints() -> dict[str, Version]:
    pins = {}
    for raw in CONSTRAINTS.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.]*)", line)
        assert match, f"{CONSTRAINTS.name}: {raw!r} is not name==version"
        pins[match[1].replace("_", "-").lower()] = Version(match[2])
    return pins


def test_min_versions_are_pyprojects_floors():
    """Every dependency has a floor, .ci/min-versions.txt pins exactly those floors (no
    more, no fewer), so the min-versions job tests the versions pyproject admits."""
    assert _constraints() == _floors()


def test_python_floor_and_upper_bounds():
    """requires-python has a floor .ci/run can read; no dependency has an upper bound
    (none was measured necessary: add one only with the failure that needs it)."""
    text = (ROOT / "pyproject.toml").read_text()
    floor = re.search(r'^requires-python = ">=(\d+\.\d+)"$', text, re.M)
    assert floor and floor[1] == _pyproject()["project"]["requires-python"][2:]
    run = (ROOT / ".ci" / "run").read_text()
    assert "min-versions.txt" in run and "requires-python" in run
    for line in _pyproject()["project"]["dependencies"]:
        assert {s.operator for s in Requirement(line).specifier} == {">="}, line


def test_installed_versions_meet_the_floors():
    from importlib.metadata import version

    for name, floor in _floors().items():
        assert Version(version(name)) >= floor, name


_COUNT = itertools.count()
_ARGS = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3


def _emit(context, builder, args):
    """lo * 7 + hi (the kernel signature's i32 result)."""
    lo, hi = args[5], args[6]
    return builder.trunc(builder.add(builder.mul(lo, ir.Constant(lo.type, 7)), hi), ir.IntType(32))


def _run(passes=None) -> int:
    """Compile :func:`_emit` afresh through native.py's library class and call it."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    name = f"fp8kit_floors_{next(_COUNT)}"
    with global_compiler_lock:
        library = native._compile(cpu_target.target_context, name, _emit, passes=passes)
        address = library.get_pointer_to_function(name)
    fn = ctypes.CFUNCTYPE(ctypes.c_int32, *_ARGS)(address)
    result = fn(None, None, None, None, None, 5, 11, 0)
    del library
    return result


@pytest.mark.parametrize("passes", [None, native.LEAN_PASSES])
def test_numbas_pass_managers_as_known(passes):
    """This Numba's pass managers are of a shape native.py knows: no warning (the suite
    turns warnings into errors), the right result."""
    native._library_class.cache_clear()
    assert _run(passes) == 46


@pytest.mark.parametrize("passes", [None, native.LEAN_PASSES])
def test_unknown_pass_managers_fall_back_with_a_warning(monkeypatch, passes):
    """A simulated Numba upgrade: its private pass-manager methods answer fp8kit in a
    shape it does not know (Numba's own calls are answered as before).  The kernel is
    optimised by Numba's own pipeline instead, with one RuntimeWarning: no crash, the
    same result."""
    from numba.core.registry import cpu_target

    codegen = type(cpu_target.target_context.codegen())
    module_pm, builder = codegen._module_pass_manager, getattr(codegen, "_pass_builder", None)

    def from_fp8kit():
        return sys._getframe(2).f_globals.get("__name__") == native.__name__

    def odd_module_pm(self, **kwargs):
        made = module_pm(self, **kwargs)
        return (made, None, None) if from_fp8kit() else made

    def odd_builder(self, **kwargs):
        if from_fp8kit():
            raise AttributeError("_pass_builder")
        return builder(self, **kwargs)

    monkeypatch.setattr(codegen, "_module_pass_manager", odd_module_pm)
    if builder is not None:
        monkeypatch.setattr(codegen, "_pass_builder", odd_builder)
    native._library_class.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="pass managers are not those fp8kit knows"):
            assert _run(passes) == 46
        assert _run(passes) == 46  # (warned once)
    finally:
        native._library_class.cache_clear()
