"""Every public function and method documents its parameters, what it returns, what it raises
and an example (numpy style); every public class its fields and an example.

Public: the names in the ``__all__`` of ``fp8kit``, ``fp8kit.promotion`` and
``fp8kit.study``, and the methods of those classes not starting with ``_`` (properties are
documented by a sentence).  The examples run as doctests (``--doctest-modules``).
"""

import inspect
import re

import pytest

import fp8kit
from fp8kit import promotion, study

# Functions that raise nothing of their own for any argument of the documented types.
NO_RAISES = {
    "fp8kit.get_num_threads",  # no arguments
    "fp8kit.registered_formats",  # no arguments
    "fp8kit.cast_table",  # no arguments
    "fp8kit.promotion.knob_table",
    "fp8kit.promotion.operands_of",
    "fp8kit.study.demo_tensors",
    "fp8kit.study.DelayedScaling.reset",
    "fp8kit.study.ErrorMetrics.as_dict",
    "fp8kit.study.ErrorMetrics.from_totals",
    "fp8kit.study.SweepRow.as_dict",
    "fp8kit.study.SummaryRow.as_dict",
    "fp8kit.study.GemmError.as_dict",
}
SECTION = re.compile(r"^ *([A-Z][a-z]+)\n *-{3,} *$", re.M)


def public_objects():
    found = {}
    for module in (fp8kit, promotion, study):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not callable(obj):
                continue
            qual = f"{module.__name__}.{name}"
            if any(o is obj for o in found.values()):
                continue  # re-exported: checked once
            found[qual] = obj
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if attr.startswith("_"):
                        continue
                    if isinstance(value, (classmethod, staticmethod)):
                        value = value.__func__
                    if inspect.isfunction(value):
                        found[f"{qual}.{attr}"] = value
    return found


OBJECTS = public_objects()


def sections(obj) -> set[str]:
    return set(SECTION.findall(inspect.getdoc(obj) or ""))


def own_parameters(obj) -> list[str]:
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return []  # the message
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return []
    return [p for p in params if p not in ("self", "cls") and not p.startswith("_")]


def test_public_objects_are_found():
    assert {"fp8kit.encode", "fp8kit.promotion.result_type", "fp8kit.study.sweep"} <= set(OBJECTS)
    assert "fp8kit.study.DelayedScaling.quantize" in OBJECTS
    assert set(NO_RAISES) <= set(OBJECTS)


@pytest.mark.parametrize("qual", sorted(OBJECTS))
def test_docstring_sections(qual):
    obj = OBJECTS[qual]
    have = sections(obj)
    missing = []
    if own_parameters(obj) and not have & {"Parameters", "Attributes"}:
        missing.append("Parameters")
    if not inspect.isclass(obj):
        if not have & {"Returns", "Yields"}:
            missing.append("Returns")
        if qual not in NO_RAISES and "Raises" not in have:
            missing.append("Raises")
    if "Examples" not in have:
        missing.append("Examples")
    assert not missing, f"{qual}: docstring lacks {', '.join(missing)}"
