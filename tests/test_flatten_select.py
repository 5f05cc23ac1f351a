"""Branch-free conditional expressions in flattened kernels (issue 16, compile time).

:func:`fp8kit._kernels.flatten.flatten` writes ``a if c else b`` as one LLVM ``select``
(:func:`fp8kit._kernels.bits.select`) where both operands are safe to evaluate, and
``and``/``or`` of comparisons as ``&``/``|``: Numba then types and lowers one call instead
of three blocks and a phi node.  These tests pin what is rewritten, what is not (operands
that read memory, divide or call anything else keep their branch), that ``select`` types
its result as a conditional expression would, and that kernels give the same bits both ways.
"""

from __future__ import annotations

import ast

import numpy as np
import pytest
from numba import njit

import fp8kit
from fp8kit._kernels import flatten as kf
from fp8kit._kernels.bits import as_bits, select
from fp8kit._kernels.flatten import flatten

ZERO = np.float64(0.0)
LIMIT = np.int64(5)
ONE = np.uint64(1)


def _calls(func, name="select"):
    tree = ast.parse(flatten(func).__flat_source__)
    return sum(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith(name)
        for n in ast.walk(tree)
    )


def _ifexps(func):
    tree = ast.parse(flatten(func).__flat_source__)
    return sum(isinstance(n, ast.IfExp) for n in ast.walk(tree))


def _kernel_safe(x, out):
    for i in range(x.size):
        v = x[i]
        a = v if v > ZERO else -v  # (arithmetic: select)
        b = as_bits(a) if a < ZERO else as_bits(v + a)  # (pure intrinsics: select)
        out[i] = a + (b & ONE)


def _kernel_unsafe(x, out):
    for i in range(x.size):
        v = x[i]
        d = v / x[0] if v != ZERO else ZERO  # (a division: keeps its branch)
        e = x[i + 1] if i + 1 < x.size else ZERO  # (an array read: keeps its branch)
        out[i] = d + e


def _kernel_boolop(x, out):
    for i in range(x.size):
        v = x[i]
        if v > ZERO and v < LIMIT:  # comparisons: v > 0 & v < 5
            out[i] = v
        if i < 3 and x[i] > ZERO:  # an array read: short-circuit kept
            out[i] = -v


def test_safe_conditional_expressions_become_selects():
    assert _calls(_kernel_safe) == 2
    assert _ifexps(_kernel_safe) == 0


def test_reads_and_divisions_keep_their_branch():
    assert _calls(_kernel_unsafe) == 0
    assert _ifexps(_kernel_unsafe) == 2


def test_and_of_comparisons_becomes_bitwise():
    tree = ast.parse(flatten(_kernel_boolop).__flat_source__)
    ops = [type(n.op) for n in ast.walk(tree) if isinstance(n, ast.BoolOp)]
    assert ops == [ast.And]  # only the one that reads x[i]
    assert any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitAnd) for n in ast.walk(tree))


def test_switched_off_keeps_conditional_expressions(monkeypatch):
    monkeypatch.setattr(kf, "USE_SELECT", False)
    assert _calls(_kernel_safe) == 0
    assert _ifexps(_kernel_safe) == 2


@pytest.mark.parametrize("kernel", [_kernel_safe, _kernel_unsafe, _kernel_boolop])
def test_rewritten_kernels_compute_what_the_source_does(kernel):
    x = np.array([-3.0, -0.0, 0.0, 1.5, 4.0, 7.0, np.inf, np.nan], np.float64)
    want, got = np.zeros_like(x), np.zeros_like(x)
    njit(kernel)(x, want)  # (the source as Numba compiles it: no rewrite)
    njit(flatten(kernel))(x, got)
    np.testing.assert_array_equal(got, want)


@njit
def _select_types(c, i, u, f):
    return select(c, i, u), select(i, f, f * 2.0), select(c, 1, 2), select(c, u, np.uint32(7))


def _ifexp_types(c, i, u, f):
    return (i if c else u), (f if i else f * 2.0), (1 if c else 2), (u if c else np.uint32(7))


def test_select_types_and_values_as_a_conditional_expression():
    args = (True, np.int64(-4), np.uint32(9), np.float32(1.5))
    for c in (True, False):
        got = _select_types(c, *args[1:])
        ref = njit(_ifexp_types)(c, *args[1:])
        assert got == ref
        assert [type(g) for g in got] == [type(r) for r in ref]
    # an integer condition is its truth, as in ``if``
    assert _select_types(True, np.int64(0), np.uint32(0), np.float32(1.5))[1] == 3.0


@pytest.fixture
def without_selects(fresh_kernels):
    """Kernels compiled with their conditional expressions kept (no disk cache), then
    restored."""
    fresh_kernels(kf, "USE_SELECT", False)


def _results(x):
    with fp8kit.num_threads(1):
        return [
            fp8kit.encode(x, "float8_e4m3fn"),
            fp8kit.encode(x.astype(np.float64), "float8_e5m2fnuz"),
            fp8kit.round_to(x, "float8_e4m3fn", rounding="stochastic", seed=7),
            fp8kit.round_to(x, "float6_e3m2fn", rounding="toward_zero"),
            fp8kit.fake_convert(x, 3.0, 0.5, destination_type="f8e4m3"),
        ]


def test_kernels_give_the_same_bits_with_and_without_selects(request):
    rng = np.random.default_rng(17)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, 464.0, 480.0, 1e-9, -2.0**-9,
                        2.0**-10, 3.0 * 2.0**-10, 28.0, 30.0, 1e30], np.float32)  # fmt: skip
    x = (rng.standard_normal(200_000) * rng.choice([1e-3, 1.0, 300.0], 200_000)).astype(np.float32)
    x = np.concatenate([special, -special, x])
    with_sel = _results(x)
    request.getfixturevalue("without_selects")
    plain = _results(x)
    for a, b in zip(with_sel, plain, strict=True):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def test_a_source_file_changed_since_the_import_is_not_flattened(monkeypatch):
    """inspect reads the file as it is now: where the kernel's lines hold other code (an
    edit during a long session), flatten raises FlattenError, on which the kernel is
    compiled from its own bytecode, never from the other code."""
    kf._source.cache_clear()
    monkeypatch.setattr(kf.inspect, "getsource", lambda f: "def other(x, out):\n    pass\n")
    with pytest.raises(kf.FlattenError, match="changed"):
        flatten(_kernel_safe)
    monkeypatch.setattr(kf.inspect, "getsource", lambda f: "    x = (\n")
    with pytest.raises(kf.FlattenError, match="not found"):
        flatten(_kernel_safe)
    monkeypatch.undo()
    assert _calls(_kernel_safe) == 2


#: A closure-style constant tuple as the kernels' format constants are (numpy scalars, a
#: flag, a nested pair).
PARAMS = (np.uint32(0x7FFFFFFF), np.uint32(3), False, (np.uint32(1), np.uint32(2)))


@njit(inline="always")
def _unpacking_helper(v, params):
    mask, add, flag, pair = params
    r = (v & mask) + add
    if flag:  # (a constant test: only the else branch stays)
        r = r * pair[0]
    else:
        r = r + pair[1]
    return r


def _kernel_const_tuple(x, out):
    for i in range(x.size):
        out[i] = _unpacking_helper(x[i], PARAMS) + PARAMS[1]


def test_items_of_constant_tuples_become_constants():
    """A helper that unpacks a constant tuple (the format's constants) or indexes it gets
    each item as a constant of its own: no tuple for Numba to type and index, and a test on
    an item folds (only the branch taken is compiled)."""
    loop = ast.parse(flatten(_kernel_const_tuple).__flat_source__).body[0].body[0].body[-1]
    assert isinstance(loop, ast.For)
    left = [n for n in ast.walk(loop) if isinstance(n, (ast.If, ast.IfExp, ast.Subscript))]
    assert all(isinstance(n, ast.Subscript) and n.value.id in ("x", "out") for n in left)
    x = np.concatenate([np.arange(300, dtype=np.uint32), np.uint32([0x80000005, 0xFFFFFFF0])])
    want, got = np.empty_like(x), np.empty_like(x)
    njit(_kernel_const_tuple)(x, want)  # (Numba's own inlining, the tuple as is)
    njit(flatten(_kernel_const_tuple))(x, got)
    assert np.array_equal(got, want)
    assert np.array_equal(got, ((x & np.uint32(0x7FFFFFFF)) + 3 + 2 + 3).astype(np.uint32))


U32 = np.uint32


def _kernel_scalar_constants(x, out):
    u = np.uint32  # (an alias, as fake_rounding writes it)
    half = np.float32(0.5)
    for i in range(x.size):
        v = x[i] & u(0x7FFFFFFF)
        w = v + np.uint32(1 << 23) if v < U32(0x7F800000) else v  # (a module-level alias)
        f = np.float32(np.float32(v) * half) + np.float32(-(2.0**-3))
        f = f if f < np.float32(np.inf) else np.float32(0.0)
        out[i] = (w >> np.uint32(2)) + np.uint32(f) + np.uint32(-1)  # (-1: numpy raises)


def test_numpy_scalars_of_constants_become_constants():
    """``np.uint32(0x7F800000)`` (or of ``np.inf``), through aliases too, becomes a closure
    constant of that type (one statement for Numba where the call took four); a value
    numpy refuses (``np.uint32(-1)``, which Numba wraps) stays a call; the bits are the
    source's."""
    src = flatten(_kernel_scalar_constants).__flat_source__
    calls = [ast.unparse(n) for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)]
    scalar = sorted(c for c in calls if c.startswith(("np.", "u(", "U32(")))
    assert scalar == ["np.float32(np.float32(v) * float32_)", "np.float32(v)",
                      "np.uint32(-1)", "np.uint32(f)"]  # fmt: skip
    x = np.array([0, 1, 5, 0x7F7FFFFF, 0x7F800000, 0xFFFFFFFF, 12345678], np.uint32)
    want, got = np.empty_like(x), np.empty_like(x)
    njit(_kernel_scalar_constants)(x, want)
    njit(flatten(_kernel_scalar_constants))(x, got)
    assert np.array_equal(got, want)


@njit(inline="always")
def _shifted(v, k, wide=False):
    if wide:  # (a defaulted flag: folded where left out)
        return v << k
    return v >> k


SCALES = np.array([2], np.uint64)


@njit(inline="always")
def _defaulted_array(v, s=SCALES):  # (an array default: not a constant)
    return v * s[0]


def _kernel_defaults(x, out):
    for i in range(x.size):
        out[i] = _shifted(x[i], ONE) + _shifted(x[i], ONE, True) + _shifted(x[i], ONE, wide=True)


def test_parameters_left_out_take_their_constant_defaults():
    """A helper called without its defaulted parameters is inlined with their defaults as
    constants (encode_unsigned_mode's ``in_range``: the call had stayed a call, and the
    kernel was compiled unflattened, 7% slower); a default that is not a constant is not
    inlined (the flattener raises, and the kernel keeps its source)."""
    src = flatten(_kernel_defaults).__flat_source__
    assert "_shifted(" not in src
    x = np.arange(1000, dtype=np.uint64)
    want, got = np.empty_like(x), np.empty_like(x)
    njit(_kernel_defaults)(x, want)
    njit(flatten(_kernel_defaults))(x, got)
    assert np.array_equal(got, want)
    assert np.array_equal(got, (x >> ONE) + 2 * (x << ONE))

    def kernel(x, out):
        for i in range(x.size):
            out[i] = _defaulted_array(x[i])

    with pytest.raises(kf.FlattenError, match="every parameter"):
        flatten(kernel)


def test_the_unsigned_kernels_are_flattened():
    """encode_unsigned_mode's defaulted flag leaves every unsigned kernel flattenable."""
    from fp8kit._kernels import codec as kc
    from fp8kit._kernels import lean

    kc.FLATTEN_FALLBACKS.clear()
    for dtype in (np.float32, np.float64, np.float16):
        for mode in (0, 2):
            kernel = lean.unsigned_kernel(fp8kit.get_format("float8_e8m0fnu"), np.dtype(dtype),
                                          True, mode=mode)  # fmt: skip
            kc._flat(kernel._make(False))
    assert not kc.FLATTEN_FALLBACKS
