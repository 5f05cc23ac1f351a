"""Kernels flattened at the source level: every ``@njit(inline="always")`` helper a kernel
calls is written into the kernel's own body before Numba sees it.

Why: Numba inlines such a call by running its untyped pipeline on the helper again and
deep-copying the helper's IR twice, at every call site (~20 ms each on a cold first
call), and the branches on compile-time constants inside a helper are pruned only after
that.  Here the helper's Python source is spliced in once (its locals renamed, its
parameters replaced by the caller's names or constants, its ``return`` statements turned
into assignments), and an ``if`` or conditional expression whose test is made of
compile-time constants (closure values, module constants) keeps only the branch taken.
The machine code is the same; the kernel has no inlined call sites left and fewer IR
statements to type and lower.

The flattened kernel is an ordinary Python function compiled from the generated source,
with the original kernel's file name, line, name and closure values (plus those of the
helpers it absorbed), so that Numba's disk cache locates and keys it as before: the
closure values and the bytecode are the key, and every kernel closes over
:func:`fp8kit._kernels.codec.source_version` for edits that change neither.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import hashlib
import inspect
import itertools
import operator
import textwrap

import numpy as np

#: Values a test may be folded on (closure cells and module constants of these types).
_PLAIN = (bool, int, float, str, type(None), np.generic)


def _plain(value) -> bool:
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, _PLAIN)


def _pure_calls():
    from . import bits

    return {
        bits.as_float, bits.as_bits, bits.cast_like, bits.shr, bits.shl,
        bits.half_to_single_bits, bits.widen32, bits.to_unsigned_truncated, bits.fma,
        bits.select, min, max,
    }  # fmt: skip


_PURE_CALLS: set = set()


def _is_inline(obj) -> bool:
    if getattr(obj, "_fp8kit_written_in", False) and hasattr(obj, "py_func"):
        return True
    opts = getattr(obj, "targetoptions", None)
    return isinstance(opts, dict) and opts.get("inline") == "always" and hasattr(obj, "py_func")


def written_in(func):
    """``@njit`` of ``func`` that the flattener writes into the CPU kernels calling it, as
    it writes an ``inline="always"`` helper, while numba.cuda still compiles it as a device
    function of its own, called: the matrix products' model steps, whose GPU kernel (every
    model, read at run time) took 66 s to compile with all of them inline where it takes
    7 s with them called.  Not flattened (a construct the flattener does not know), a CPU
    kernel calls it too."""
    from numba import njit

    dispatcher = njit(func)
    dispatcher._fp8kit_written_in = True
    return dispatcher


@functools.cache
def _source(func) -> ast.FunctionDef:
    # (the file as it is now: edited since the import, its lines may hold other code; then
    # the helper-built kernel is compiled, from the function's own bytecode)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except SyntaxError as exc:
        raise FlattenError(f"{func.__qualname__}: source not found ({exc})") from None
    node = tree.body[0] if tree.body else None
    if not (isinstance(node, ast.FunctionDef) and node.name == func.__name__):
        raise FlattenError(f"{func.__qualname__}: its file has changed since the import")
    node.decorator_list = []
    return node


@functools.cache
def _assigned(node: ast.FunctionDef) -> frozenset[str]:
    names = {a.arg for a in node.args.args}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
    return frozenset(names)


@functools.cache
def _stored_params(node: ast.FunctionDef) -> frozenset[str]:
    params = {a.arg for a in node.args.args}
    return frozenset(
        sub.id
        for sub in ast.walk(node)
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.id in params
    )


class FlattenError(Exception):
    """A construct the flattener does not take (the caller compiles the helper-built
    kernel instead)."""


_Unsupported = FlattenError


_FOLD_FAIL = object()


class _Flattener:
    def __init__(self):
        self.globals: dict = {}
        self.free: dict = {}
        self.consts: dict = {}  # output name -> plain value (for folding)
        self.inline: dict = {}  # marker name -> dispatcher
        self.count = itertools.count()
        self.reserved: set[str] = set()  # the kernel's own locals

    # ------------------------------------------------------------------ names
    def _intern(self, table, name, value):
        other = self.free if table is self.globals else self.globals
        cand, k = name, 1
        while True:
            if cand not in self.reserved and cand not in other:
                if cand not in table or table[cand] is value:
                    break
                old = table[cand]
                if _plain(value) and type(old) is type(value) and repr(old) == repr(value):
                    break
            k += 1
            cand = f"{name}__{k}"
        table[cand] = value
        if _plain(value):
            self.consts[cand] = value
        return cand

    def localize(self, func, node: ast.FunctionDef, prefix: str, subst: dict):
        """The body of ``node`` (a copy) with its locals renamed (``prefix``), its
        parameters in ``subst`` replaced, its free and global names interned."""
        local = _assigned(node)
        freevars = func.__code__.co_freevars
        cells = [c.cell_contents for c in func.__closure__ or ()]
        closure = dict(zip(freevars, cells, strict=True))
        glb = func.__globals__
        fl = self

        class Rename(ast.NodeTransformer):
            def visit_Name(self, n):
                if n.id in subst and isinstance(n.ctx, ast.Load):
                    return copy.deepcopy(subst[n.id])
                if n.id in local:
                    return ast.copy_location(ast.Name(prefix + n.id, n.ctx), n)
                if not isinstance(n.ctx, ast.Load):
                    raise _Unsupported(f"{func.__name__}: store to non-local {n.id}")
                if n.id in closure:
                    value = closure[n.id]
                    if _is_inline(value):
                        return ast.copy_location(ast.Name(fl.marker(value), n.ctx), n)
                    return ast.copy_location(ast.Name(fl._intern(fl.free, n.id, value), n.ctx), n)
                if n.id in glb:
                    value = glb[n.id]
                elif hasattr(builtins, n.id):
                    value = getattr(builtins, n.id)
                else:
                    raise _Unsupported(f"{func.__name__}: unknown name {n.id}")
                if _is_inline(value):
                    return ast.copy_location(ast.Name(fl.marker(value), n.ctx), n)
                return ast.copy_location(ast.Name(fl._intern(fl.globals, n.id, value), n.ctx), n)

        rename = Rename()

        def rebuild(n):
            # (a copy and the renaming in one pass: deepcopy plus a NodeTransformer
            # measured 3x slower)
            if type(n) is ast.Name:
                return rename.visit_Name(n)
            new = type(n).__new__(type(n))
            for f in n._fields:
                v = getattr(n, f, None)
                if isinstance(v, ast.AST):
                    v = rebuild(v)
                elif isinstance(v, list):
                    v = [rebuild(x) if isinstance(x, ast.AST) else x for x in v]
                setattr(new, f, v)
            return new

        return [rebuild(s) for s in node.body if not _is_docstring(s)]

    def marker(self, disp):
        name = f"__inline_{id(disp)}"
        self.inline[name] = disp
        return name

    # ---------------------------------------------------------------- folding
    def fold(self, e):
        """The value of ``e`` if it is made of compile-time constants, else _FOLD_FAIL."""
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, ast.Name):
            return self.consts.get(e.id, _FOLD_FAIL) if isinstance(e.ctx, ast.Load) else _FOLD_FAIL
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            v = self.fold(e.operand)
            return _FOLD_FAIL if v is _FOLD_FAIL else (not v)
        if isinstance(e, ast.BoolOp):
            vals = [self.fold(v) for v in e.values]
            if any(v is _FOLD_FAIL for v in vals):
                return _FOLD_FAIL
            if isinstance(e.op, ast.And):
                return all(vals)
            return any(vals)
        if isinstance(e, ast.Compare):
            left = self.fold(e.left)
            if left is _FOLD_FAIL:
                return _FOLD_FAIL
            ops = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot)
            for op, comp in zip(e.ops, e.comparators, strict=True):
                right = self.fold(comp)
                if right is _FOLD_FAIL or type(op) not in ops:
                    return _FOLD_FAIL
                fn = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
                      ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
                      ast.Is: operator.is_, ast.IsNot: operator.is_not}[type(op)]  # fmt: skip
                if not fn(left, right):
                    return False
                left = right
            return True
        return _FOLD_FAIL

    def simplify_bool(self, e):
        """``e`` with constant operands of ``and``/``or`` dropped where that keeps its
        truth value (a partially known test)."""
        if not isinstance(e, ast.BoolOp):
            return e
        keep = []
        for v in e.values:
            c = self.fold(v)
            if c is _FOLD_FAIL:
                keep.append(v)
            elif isinstance(e.op, ast.And) and not c:
                return ast.Constant(False)
            elif isinstance(e.op, ast.Or) and c:
                return ast.Constant(True)
        if not keep:
            return ast.Constant(isinstance(e.op, ast.And))
        return keep[0] if len(keep) == 1 else ast.BoolOp(e.op, keep)

    # ------------------------------------------------------------ statements
    def block(self, stmts):
        out = []
        for s in stmts:
            out.extend(self.stmt(s))
            if out and isinstance(out[-1], (ast.Return, ast.Continue, ast.Break)):
                break  # (the rest is unreachable)
        return out

    def stmt(self, s):
        if isinstance(s, ast.If):
            test = self.simplify_bool(s.test)
            c = self.fold(test)
            if c is not _FOLD_FAIL:
                return self.block(s.body if c else s.orelse)
            pre, test = self.expr(test)
            return [*pre, ast.If(test, self.block(s.body) or [ast.Pass()], self.block(s.orelse))]
        if isinstance(s, ast.For):
            if s.orelse:
                raise _Unsupported("for-else")
            pre, it = self.expr(s.iter)
            return [*pre, ast.For(s.target, it, self.block(s.body) or [ast.Pass()], [])]
        if isinstance(s, ast.While):
            pre, test = self.expr(s.test)
            if pre or s.orelse:
                raise _Unsupported("inline call in a while test")
            return [ast.While(test, self.block(s.body) or [ast.Pass()], [])]
        if isinstance(s, ast.Assign):
            v = s.value
            if isinstance(v, ast.IfExp) and self.fold(v.test) is _FOLD_FAIL and self._calls(v):
                # a runtime choice between inlined calls: an if statement (both branches are
                # not evaluated, as in the source)
                other = ast.Assign(copy.deepcopy(s.targets), v.orelse)
                return self.stmt(ast.If(v.test, [ast.Assign(s.targets, v.body)], [other]))
            pre, value = self.expr(v)
            return [*pre, ast.Assign(s.targets, value)]
        if isinstance(s, ast.AugAssign):
            pre, value = self.expr(s.value)
            return [*pre, ast.AugAssign(s.target, s.op, value)]
        if isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name):
                disp = self.inline.get(s.value.func.id)
                if disp is not None:
                    pre, _ = self.call(disp, s.value, result=False)
                    return pre
            pre, value = self.expr(s.value)
            return [*pre, ast.Expr(value)]
        if isinstance(s, ast.Return):
            if s.value is None:
                return [s]
            pre, value = self.expr(s.value)
            return [*pre, ast.Return(value)]
        if isinstance(s, (ast.Pass, ast.Break, ast.Continue)):
            return [s]
        raise _Unsupported(type(s).__name__)

    def _calls(self, e) -> bool:
        return any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.inline
            for n in ast.walk(e)
        )

    # ----------------------------------------------------------- expressions
    def expr(self, e):
        """(statements to run first, the expression) for ``e`` with its inline calls
        spliced in: calls are hoisted in evaluation order."""
        t = type(e)
        if t is ast.Name or t is ast.Constant:
            return [], e
        if t is ast.Call and type(e.func) is ast.Name and e.func.id in self.inline:
            return self.call(self.inline[e.func.id], e)
        if isinstance(e, ast.IfExp):
            c = self.fold(self.simplify_bool(e.test))
            if c is not _FOLD_FAIL:
                return self.expr(e.body if c else e.orelse)
            pre, test = self.expr(e.test)
            pb, body = self._hoistable(e.body)
            po, orelse = self._hoistable(e.orelse)
            return pre + pb + po, ast.IfExp(test, body, orelse)
        if isinstance(e, ast.BoolOp):
            s = self.simplify_bool(e)
            if not isinstance(s, ast.BoolOp):
                return self.expr(s)
            pre, first = self.expr(s.values[0])
            rest = []
            for v in s.values[1:]:
                p, v = self._hoistable(v)
                pre += p
                rest.append(v)
            return pre, ast.BoolOp(s.op, [first, *rest])
        pre = []
        for field, value in ast.iter_fields(e):
            if isinstance(value, ast.expr):
                p, v = self.expr(value)
                pre += p
                setattr(e, field, v)
            elif isinstance(value, list):
                new = []
                for item in value:
                    if isinstance(item, ast.expr):
                        p, v = self.expr(item)
                        pre += p
                        new.append(v)
                    elif isinstance(item, ast.keyword):
                        p, v = self.expr(item.value)
                        pre += p
                        item.value = v
                        new.append(item)
                    else:
                        new.append(item)
                setattr(e, field, new)
        return pre, e

    def _hoistable(self, e):
        """:meth:`expr` for an operand that is evaluated only on a condition: its inline
        calls may run unconditionally only where they read no array and have no loop."""
        pre, e = self.expr(e)
        for s in pre:
            for n in ast.walk(s):
                const = (
                    isinstance(n, ast.Subscript)
                    and isinstance(n.value, ast.Name)
                    and n.value.id in self.consts  # an item of a constant tuple
                )
                if isinstance(n, (ast.Subscript, ast.For, ast.While)) and not const:
                    raise _Unsupported("inline call reading an array in a conditional operand")
        return pre, e

    def call(self, disp, call: ast.Call, result: bool = True):
        func = disp.py_func
        node = _source(func)
        params = [a.arg for a in node.args.args]
        if node.args.vararg or node.args.kwonlyargs or node.args.kwarg:
            raise _Unsupported(f"{func.__name__}: only positional parameters")
        args = list(call.args)
        for kw in call.keywords:
            args.append((kw.arg, kw.value))
        positional = [a for a in args if not isinstance(a, tuple)]
        if len(positional) > len(params):
            raise _Unsupported(f"{func.__name__}: too many arguments")
        bound = dict(zip(params, positional, strict=False))
        bound.update(a for a in args if isinstance(a, tuple))
        # (parameters left out take their defaults: constants only, as Numba folds them)
        defaults = dict(zip(params[len(params) - len(node.args.defaults):], node.args.defaults,
                            strict=True))  # fmt: skip
        for name, default in defaults.items():
            if name not in bound and isinstance(default, ast.Constant):
                bound[name] = default
        if set(bound) != set(params):
            raise _Unsupported(f"{func.__name__}: every parameter must be passed")
        n = next(self.count)
        prefix = f"_{func.__name__.lstrip('_')}{n}_"
        stored = _stored_params(node)
        pre, subst = [], {}
        for name in params:
            p, value = self.expr(bound[name])
            pre += p
            simple = isinstance(value, ast.Constant) or (
                isinstance(value, ast.Name) and value.id in self.consts
            )
            if name not in stored and (simple or isinstance(value, ast.Name)):
                subst[name] = value
            else:
                tmp = prefix + name
                pre.append(ast.Assign([ast.Name(tmp, ast.Store())], value))
                subst[name] = ast.Name(tmp, ast.Load())
        # (parameters stored in the body keep their own local under the prefix)
        body = self.localize(
            func, node, prefix, {k: v for k, v in subst.items() if k not in stored}
        )
        if stored:
            for name in stored:
                tmp = prefix + name
                if not (isinstance(subst[name], ast.Name) and subst[name].id == tmp):
                    pre.append(ast.Assign([ast.Name(tmp, ast.Store())], subst[name]))
        body = self.block(body)
        ret = prefix + "ret"
        body, _ = _lower_returns(body, ret)
        pre += body
        return pre, ast.Name(ret, ast.Load())


def _is_docstring(s) -> bool:
    return (
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Constant)
        and isinstance(s.value.value, str)
    )


def _has_return(s) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(s))


def _lower_returns(stmts, ret):
    """``stmts`` with each ``return v`` made ``ret = v`` and the code after a conditional
    return moved into the branch that does not return."""
    out = []
    for i, s in enumerate(stmts):
        if isinstance(s, ast.Return):
            value = s.value if s.value is not None else ast.Constant(None)
            out.append(ast.Assign([ast.Name(ret, ast.Store())], value))
            return out, True
        if isinstance(s, ast.If) and _has_return(s):
            rest = stmts[i + 1 :]
            body, _ = _lower_returns(s.body + copy.deepcopy(rest), ret)
            orelse, _ = _lower_returns(s.orelse + copy.deepcopy(rest), ret)
            out.append(ast.If(s.test, body or [ast.Pass()], orelse))
            return out, True
        if _has_return(s):
            raise _Unsupported("return inside a loop of an inlined helper")
        out.append(s)
    return out, False


def flatten(kernel):
    """``kernel`` (a Python function for :func:`numba.njit`) with every inline helper it
    calls, directly or through other helpers, written into its body; see the module
    docstring.  Returns a new function with the same name, file and first line."""
    if not _PURE_CALLS:
        _PURE_CALLS.update(_pure_calls())
    fl = _Flattener()
    node = _source(kernel)
    fl.reserved = _assigned(node)
    body = fl.localize(kernel, node, "", {})
    body = fl.block(body)
    body = optimize(body, [a.arg for a in node.args.args], fl)
    # Numba's disk cache keys a function by its bytecode and its closure values.  Folding
    # drops some closure names from the code (the branches they chose are in the code
    # instead, but a changed constant may not change the bytecode): one int closing over
    # the flattened source and every closure value keeps them all in the key.
    key_name = fl._intern(fl.free, "flat_key", object())
    body.insert(0, ast.parse(f"if {key_name} == 0:\n    return").body[0])
    free = sorted(fl.free)
    fdef = ast.FunctionDef(
        name=kernel.__name__,
        args=copy.deepcopy(node.args),
        body=body or [ast.Pass()],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    factory = ast.FunctionDef(
        name="_factory",
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(n) for n in free],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[],
        ),  # fmt: skip
        body=[fdef, ast.Return(ast.Name(kernel.__name__, ast.Load()))],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    mod = ast.fix_missing_locations(ast.Module([factory], type_ignores=[]))
    source = ast.unparse(mod)
    digest = hashlib.sha256(source.encode())
    for name in free:
        if name != key_name:
            digest.update(f"{name}={fl.free[name]!r};".encode())
    fl.free[key_name] = int.from_bytes(digest.digest()[:6], "little") + 1
    code = compile(mod, kernel.__code__.co_filename, "exec")
    scope = dict(fl.globals)
    scope["__name__"] = kernel.__module__
    exec(code, scope)
    func = scope["_factory"](*(fl.free[n] for n in free))
    func.__code__ = func.__code__.replace(co_firstlineno=kernel.__code__.co_firstlineno)
    func.__qualname__ = kernel.__qualname__
    func.__module__ = kernel.__module__
    func.__flat_source__ = source
    return func


def _children(n):
    out = []
    for f in n._fields:
        v = getattr(n, f, None)
        if isinstance(v, ast.AST):
            out.append(v)
        elif isinstance(v, list):
            out.extend(x for x in v if isinstance(x, ast.AST))
    return out


class _Info:
    """Where each name of a flattened function is stored and loaded: structural positions
    (a path of (statement list, index) pairs), for a dominance test that holds within one
    loop iteration; and the parent of each load."""

    def __init__(self, body, params):
        self.stores: dict[str, list] = {p: [((), None)] for p in params}
        self.loads: dict[str, list] = {}
        self.unstable: set[str] = set()  # loop targets and augmented stores
        self._stmts(body, ())

    def _stmts(self, stmts, path):
        key = id(stmts)
        for i, s in enumerate(stmts):
            here = path + ((key, i),)
            t = type(s)
            if t is ast.For:
                for n in ast.walk(s.target):
                    if type(n) is ast.Name:
                        self.unstable.add(n.id)
                        self.stores.setdefault(n.id, []).append((here, s))
                self._expr(s.iter, s, here)
                self._stmts(s.body, here)
            elif t is ast.While:
                self._expr(s.test, s, here)
                self._stmts(s.body, here)
            elif t is ast.If:
                self._expr(s.test, s, here)
                self._stmts(s.body, here + (("body", 0),))
                self._stmts(s.orelse, here + (("orelse", 0),))
            elif t is ast.Assign:
                for tgt in s.targets:
                    self._target(tgt, s, here)
                self._expr(s.value, s, here)
            elif t is ast.AugAssign:
                if type(s.target) is ast.Name:
                    self.unstable.add(s.target.id)
                    self.stores.setdefault(s.target.id, []).append((here, s))
                    self.loads.setdefault(s.target.id, []).append((here, s.target, s))
                else:
                    self._target(s.target, s, here)
                self._expr(s.value, s, here)
            else:
                for c in _children(s):
                    self._expr(c, s, here)

    def _target(self, tgt, s, here):
        t = type(tgt)
        if t is ast.Name:
            self.stores.setdefault(tgt.id, []).append((here, s))
        elif t is ast.Tuple:
            for x in tgt.elts:
                self._target(x, s, here)
        else:  # a subscript store reads its array and index
            for c in _children(tgt):
                self._expr(c, tgt, here)

    def _expr(self, e, parent, here):
        if type(e) is ast.Name:
            self.loads.setdefault(e.id, []).append((here, e, parent))
            return
        for c in _children(e):
            self._expr(c, e, here)

    @staticmethod
    def dominates(store_path, use_path) -> bool:
        if not store_path:
            return True  # a parameter, stored at entry
        base, (lst, i) = store_path[:-1], store_path[-1]
        if use_path[: len(base)] != base or len(use_path) <= len(base):
            return False
        ulst, j = use_path[len(base)]
        return ulst == lst and j > i

    def single(self, name):
        """The (path, statement) of ``name``'s only store if it dominates every load."""
        st = self.stores.get(name, ())
        if len(st) != 1 or name in self.unstable:
            return None
        path = st[0][0]
        if all(self.dominates(path, u[0]) for u in self.loads.get(name, ())):
            return st[0]
        return None

    def stable_at(self, name, path) -> bool:
        """Does ``name`` hold one value from ``path`` on (never stored, or stored once
        where that dominates ``path``)?"""
        if name not in self.stores:
            return True
        st = self.single(name)
        return st is not None and self.dominates(st[0], path)


def _tuple_use(parent, n) -> bool:
    """Is this load of a tuple an item with a constant index or a whole unpack?"""
    if type(parent) is ast.Subscript and parent.value is n:
        return type(parent.slice) is ast.Constant and type(parent.slice.value) is int
    if type(parent) is ast.Assign and parent.value is n:
        t = parent.targets[0]
        return (
            len(parent.targets) == 1
            and type(t) is ast.Tuple
            and all(type(x) is ast.Name for x in t.elts)
        )
    return False


def _pure_call(e: ast.Call, fl, *more) -> bool:
    """Does ``e`` call one of the scalar bit intrinsics, a numpy scalar type or ``more``
    (a name or ``module.name`` of the flattened function's globals)?"""
    f = e.func
    if type(f) is ast.Name:
        obj = fl.globals.get(f.id)
    elif type(f) is ast.Attribute and type(f.value) is ast.Name:
        obj = getattr(fl.globals.get(f.value.id), f.attr, None)
    else:
        return False
    number = isinstance(obj, type) and issubclass(obj, np.number)
    return obj in _PURE_CALLS or number or any(obj is m for m in more)


def _no_effect(e, fl) -> bool:
    """Can ``e`` be dropped when its value is unused?  (It calls nothing but the scalar
    bit intrinsics and numpy scalar types: reading an array element has no effect.)"""
    t = type(e)
    if t is ast.Name or t is ast.Constant:
        return True
    if t is ast.Call:
        if not _pure_call(e, fl):
            return False
    elif t in (ast.NamedExpr, ast.Lambda):
        return False
    return all(_no_effect(c, fl) for c in _children(e))


def _name(n):
    return ast.Name(n, ast.Load())


def _round(body, params, fl) -> tuple[list, bool]:
    """One round of copy propagation, scalar replacement of tuples, constant folding and
    dead-store removal on a flattened body (Numba types and lowers every tuple, item and
    copy: fewer statements compile faster)."""
    info = _Info(body, params)
    subst: dict[str, ast.expr] = {}  # name -> what its loads become
    drop: set[int] = set()  # statements to delete
    split: dict[int, list] = {}  # tuple store -> its replacement statements
    items: dict[str, list] = {}  # tuple name -> element expressions
    counter = itertools.count()
    for name, st in info.stores.items():
        if len(st) != 1 or st[0][1] is None:
            continue
        s = st[0][1]
        if type(s) is not ast.Assign or len(s.targets) != 1:
            continue
        tgt = s.targets[0]
        if type(tgt) is not ast.Name or info.single(name) is None:
            continue
        path = st[0][0]
        v = s.value
        if (
            type(v) is ast.Constant
            or (type(v) is ast.Name and v.id != name and info.stable_at(v.id, path))
            or _scalar_type(v, fl) is not None
        ):  # (u = np.uint32: u(k) folds below)
            subst[name] = v
            drop.add(id(s))
        elif type(v) is ast.Tuple and not any(type(x) is ast.Starred for x in v.elts):
            if not all(_tuple_use(par, n) for _, n, par in info.loads.get(name, ())):
                continue
            elts, new = [], []
            for x in v.elts:
                if type(x) is ast.Constant or (type(x) is ast.Name and info.stable_at(x.id, path)):
                    elts.append(x)
                else:
                    tmp = f"{name}__{next(counter)}"
                    new.append(ast.Assign([ast.Name(tmp, ast.Store())], x))
                    elts.append(_name(tmp))
            items[name] = elts
            split[id(s)] = new

    def resolve(e):
        seen = 0
        while type(e) is ast.Name and e.id in subst and seen < 1000:
            e, seen = subst[e.id], seen + 1
        return e

    changed = bool(subst or items)

    def leaf(e):
        if type(e) is ast.Attribute:  # (a numpy scalar type: see _scalar_type)
            return copy.deepcopy(e)
        return _name(e.id) if type(e) is ast.Name else ast.Constant(e.value)

    def const_items(name):
        """The items of the constant tuple ``name`` (a closure or module value), or None."""
        value = fl.consts.get(name)
        return value if type(value) is tuple else None

    def const_item(name, k):
        # (an item of a constant tuple as a constant of its own: Numba then types a
        # constant, not the tuple and an index, and a test on it folds here)
        return _name(fl._intern(fl.free, f"{name}_{k}", const_items(name)[k]))

    def rw(e):
        nonlocal changed
        t = type(e)
        if t is ast.Name:
            if type(e.ctx) is ast.Load and e.id in subst:
                return leaf(resolve(e))
            return e
        if t is ast.Constant:
            return e
        if t is ast.Subscript and type(e.value) is ast.Name and e.value.id in items:
            return rw(leaf(items[e.value.id][e.slice.value]))
        if (
            t is ast.Subscript and type(e.value) is ast.Name and type(e.ctx) is ast.Load
            and const_items(e.value.id) is not None and type(e.slice) is ast.Constant
            and type(e.slice.value) is int
            and 0 <= e.slice.value < len(const_items(e.value.id))  # (-k: a UnaryOp)
        ):  # fmt: skip
            changed = True
            return const_item(e.value.id, e.slice.value)
        if t is ast.Call and len(e.args) == 1 and not e.keywords:
            # np.uint32(0x7F800000): a closure constant of that type (one statement for
            # Numba to type and lower where the call took four)
            func = resolve(e.func) if type(e.func) is ast.Name else e.func
            ctor = _scalar_type(func, fl)
            value = _number(rw(e.args[0]), fl) if ctor is not None else _FOLD_FAIL
            if value is not _FOLD_FAIL:
                try:
                    value = ctor(value)
                except (OverflowError, ValueError, TypeError):  # (what Numba would wrap)
                    pass
                else:
                    changed = True
                    return _name(fl._intern(fl.free, f"{ctor.__name__}_", value))
        if t is ast.IfExp:
            c = fl.fold(fl.simplify_bool(rw(e.test)))
            if c is not _FOLD_FAIL:
                changed = True
                return rw(e.body if c else e.orelse)
        for f in e._fields:
            v = getattr(e, f, None)
            if isinstance(v, ast.AST):
                setattr(e, f, rw(v))
            elif isinstance(v, list):
                setattr(e, f, [rw(x) if isinstance(x, ast.AST) else x for x in v])
        return e

    def dead(s) -> bool:
        t = s.targets[0]
        names = [t] if type(t) is ast.Name else getattr(t, "elts", [None])
        return all(
            type(x) is ast.Name and x.id not in info.loads and x.id not in subst for x in names
        ) and _no_effect(s.value, fl)

    def stmts(body):
        nonlocal changed
        out = []
        for s in body:
            key = id(s)
            if key in drop:
                continue
            if key in split:
                out.extend(rw(x) for x in split[key])
                continue
            t = type(s)
            if t is ast.Assign:
                tgt = s.targets[0]
                if len(s.targets) == 1 and type(tgt) is ast.Tuple:
                    v = s.value
                    if type(v) is ast.Name and v.id in items:
                        out.extend(
                            ast.Assign([x], rw(leaf(e)))
                            for x, e in zip(tgt.elts, items[v.id], strict=True)
                        )
                        continue
                    whole = const_items(v.id) if type(v) is ast.Name else None
                    if (
                        whole is not None and len(whole) == len(tgt.elts)
                        and all(type(x) is ast.Name for x in tgt.elts)
                    ):  # fmt: skip
                        changed = True
                        out.extend(
                            ast.Assign([x], const_item(v.id, k)) for k, x in enumerate(tgt.elts)
                        )
                        continue
                    if (
                        type(v) is ast.Tuple
                        and len(v.elts) == len(tgt.elts)
                        and all(type(x) is ast.Name for x in tgt.elts)
                    ):
                        names = {x.id for x in tgt.elts}
                        if not any(type(n) is ast.Name and n.id in names for n in ast.walk(v)):
                            changed = True
                            out.extend(
                                ast.Assign([x], rw(y))
                                for x, y in zip(tgt.elts, v.elts, strict=True)
                            )
                            continue
                if len(s.targets) == 1 and dead(s):
                    changed = True
                    continue
                s.value = rw(s.value)
                s.targets = [rw(x) for x in s.targets]
                out.append(s)
            elif t is ast.If:
                test = fl.simplify_bool(rw(s.test))
                c = fl.fold(test)
                if c is not _FOLD_FAIL:
                    changed = True
                    out.extend(stmts(s.body if c else s.orelse))
                    continue
                s.test = test
                s.body = stmts(s.body) or [ast.Pass()]
                s.orelse = stmts(s.orelse)
                out.append(s)
            elif t is ast.For or t is ast.While:
                if t is ast.For:
                    s.iter = rw(s.iter)
                else:
                    s.test = rw(s.test)
                s.body = stmts(s.body) or [ast.Pass()]
                out.append(s)
            else:
                out.append(rw(s))
            if type(out[-1]) in (ast.Return, ast.Continue, ast.Break):
                break
        return out

    return stmts(body), changed


#: numpy scalar types whose calls on a constant fold into a constant (their value is the
#: one Numba's conversion gives: an int in range, or a float rounded to nearest even).
_SCALAR_TYPES = (np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32,
                 np.int64, np.float32, np.float64)  # fmt: skip


def _scalar_type(e, fl):
    """The numpy scalar type ``e`` names (``np.uint32``, a module attribute, or a name
    bound to one), or None."""
    if type(e) is ast.Attribute and type(e.value) is ast.Name and fl.globals.get(e.value.id) is np:
        value = getattr(np, e.attr, None)
    elif type(e) is ast.Name and type(e.ctx) is ast.Load:
        value = fl.globals.get(e.id, fl.free.get(e.id))
    else:
        return None
    # (by identity: a name may be bound to an array, whose == is elementwise)
    return value if any(value is t for t in _SCALAR_TYPES) else None


_NUMBER_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv, ast.Pow: operator.pow, ast.LShift: operator.lshift,
               ast.RShift: operator.rshift, ast.BitOr: operator.or_,
               ast.BitAnd: operator.and_}  # fmt: skip


def _number(e, fl):
    """The Python int or float ``e`` computes from literals (and plain int or float
    constants), or _FOLD_FAIL."""
    t = type(e)
    if t is ast.Constant or t is ast.Name:
        v = fl.fold(e)
        return v if type(v) in (int, float) else _FOLD_FAIL
    if t is ast.Attribute and type(e.value) is ast.Name and fl.globals.get(e.value.id) is np:
        v = getattr(np, e.attr, None)  # (np.inf, np.pi)
        return v if type(v) is float else _FOLD_FAIL
    if t is ast.UnaryOp and type(e.op) in (ast.USub, ast.UAdd):
        v = _number(e.operand, fl)
        return _FOLD_FAIL if v is _FOLD_FAIL else (-v if type(e.op) is ast.USub else v)
    if t is ast.BinOp and type(e.op) in _NUMBER_OPS:
        a, b = _number(e.left, fl), _number(e.right, fl)
        if a is _FOLD_FAIL or b is _FOLD_FAIL:
            return _FOLD_FAIL
        try:
            v = _NUMBER_OPS[type(e.op)](a, b)
        except (ArithmeticError, ValueError, TypeError):
            return _FOLD_FAIL
        return v if type(v) in (int, float) else _FOLD_FAIL
    return _FOLD_FAIL


def optimize(body, params, fl):
    """Rounds of :func:`_round` until nothing changes, then :func:`_selects`."""
    for _ in range(20):
        body, changed = _round(body, params, fl)
        if not changed:
            break
    return _selects(body, fl) if USE_SELECT else body


#: Write conditional expressions with safe operands as :func:`fp8kit._kernels.bits.select`
#: calls; tests switch it off to compare.
USE_SELECT = True

# Operators that neither trap nor read memory, whatever their operands: integer division and
# remainder (a branch for a zero divisor under error_model="numpy") and powers stay out.
_SAFE_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift,
                ast.RShift)  # fmt: skip


def _safe(e, fl) -> bool:
    """May ``e`` be evaluated where the source would not evaluate it?  Names, constants,
    arithmetic without division, comparisons and the pure scalar calls: no memory read, no
    trap, no effect (a shift too wide for its type gives a poison value that a select
    discards)."""
    t = type(e)
    if t is ast.Name or t is ast.Constant:
        return True
    if t is ast.BinOp:
        return isinstance(e.op, _SAFE_BINOPS) and _safe(e.left, fl) and _safe(e.right, fl)
    if t is ast.UnaryOp:
        return _safe(e.operand, fl)
    if t is ast.Compare:
        return _safe(e.left, fl) and all(_safe(c, fl) for c in e.comparators)
    if t is ast.BoolOp:
        return all(_safe(v, fl) for v in e.values)
    if t is ast.IfExp:
        return _safe(e.test, fl) and _safe(e.body, fl) and _safe(e.orelse, fl)
    if t is ast.Call and not e.keywords:
        return _pure_call(e, fl, abs) and all(_safe(a, fl) for a in e.args)
    return False


def _selects(body, fl):
    """``body`` with each conditional expression whose operands are :func:`_safe` written
    as a call of :func:`fp8kit._kernels.bits.select` (see there why), and ``and``/``or`` of
    safe comparisons as ``&``/``|``: fewer blocks for Numba to compile."""
    from .bits import select

    name = None

    class Rewrite(ast.NodeTransformer):
        def visit_IfExp(self, e):
            nonlocal name
            self.generic_visit(e)
            if not (_safe(e.body, fl) and _safe(e.orelse, fl)):
                return e
            if name is None:
                name = fl._intern(fl.globals, "select", select)
            return ast.Call(ast.Name(name, ast.Load()), [e.test, e.body, e.orelse], [])

        def visit_BoolOp(self, e):
            # ``and``/``or`` of comparisons (bools): ``&``/``|``, no short-circuit blocks
            self.generic_visit(e)
            if not all(_is_compare(v) and _safe(v, fl) for v in e.values):
                return e
            op = ast.BitAnd() if isinstance(e.op, ast.And) else ast.BitOr()
            out = e.values[0]
            for v in e.values[1:]:
                out = ast.BinOp(out, op, v)
            return out

    rw = Rewrite()
    return [rw.visit(s) for s in body]


def _is_compare(e) -> bool:
    """Is ``e`` a bool whatever its operands' types (a comparison, or ``not`` of one)?"""
    t = type(e)
    if t is ast.UnaryOp and isinstance(e.op, ast.Not):
        return _is_compare(e.operand)
    return t is ast.Compare or (
        t is ast.BinOp
        and isinstance(e.op, (ast.BitAnd, ast.BitOr))
        and _is_compare(e.left)
        and _is_compare(e.right)
    )
