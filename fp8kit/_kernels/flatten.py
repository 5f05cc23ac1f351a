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


def _is_inline(obj) -> bool:
    opts = getattr(obj, "targetoptions", None)
    return isinstance(opts, dict) and opts.get("inline") == "always" and hasattr(obj, "py_func")


@functools.cache
def _source(func) -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef), func
    node.decorator_list = []
    return node


def _assigned(node: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in node.args.args}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
    return names


def _stored_params(node: ast.FunctionDef) -> set[str]:
    params = {a.arg for a in node.args.args}
    return {
        sub.id
        for sub in ast.walk(node)
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.id in params
    }


class _Unsupported(Exception):
    pass


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
        closure = dict(zip(freevars, (c.cell_contents for c in func.__closure__ or ())))
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

        body = [s for s in copy.deepcopy(node.body) if not _is_docstring(s)]
        return [Rename().visit(s) for s in body]

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
            for op, comp in zip(e.ops, e.comparators):
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
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in self.inline:
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
                if isinstance(n, (ast.Subscript, ast.For, ast.While)):
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
        bound = dict(zip(params, (a for a in args if not isinstance(a, tuple))))
        bound.update(a for a in args if isinstance(a, tuple))
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
        body = self.localize(func, node, prefix, {k: v for k, v in subst.items() if k not in stored})
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
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(
        s.value.value, str
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
    text = ast.unparse(ast.fix_missing_locations(ast.Module(body, type_ignores=[])))
    digest = hashlib.sha256(text.encode())
    for name in sorted(fl.free):
        digest.update(f"{name}={fl.free[name]!r};".encode())
    key_name = fl._intern(fl.free, "flat_key", int.from_bytes(digest.digest()[:6], "little") + 1)
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
            posonlyargs=[], args=[ast.arg(n) for n in free], kwonlyargs=[], kw_defaults=[],
            defaults=[],
        ),  # fmt: skip
        body=[fdef, ast.Return(ast.Name(kernel.__name__, ast.Load()))],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    mod = ast.fix_missing_locations(ast.Module([factory], type_ignores=[]))
    source = ast.unparse(mod)
    code = compile(source, kernel.__code__.co_filename, "exec")
    scope = dict(fl.globals)
    scope["__name__"] = kernel.__module__
    exec(code, scope)
    func = scope["_factory"](*(fl.free[n] for n in free))
    func.__code__ = func.__code__.replace(co_firstlineno=kernel.__code__.co_firstlineno)
    func.__qualname__ = kernel.__qualname__
    func.__module__ = kernel.__module__
    func.__flat_source__ = source
    return func



class _Uses:
    """Where each name of a flattened function is stored and loaded: structural
    positions (a path of (statement list, index) pairs), for a dominance test that holds
    within one loop iteration."""

    def __init__(self, body, params):
        self.stores: dict[str, list] = {}
        self.loads: dict[str, list] = {}
        self.unstable: set[str] = set()  # loop targets, augmented and subscript stores
        for p in params:
            self.stores.setdefault(p, []).append(((), None))
        self._walk(body, ())

    def _walk(self, stmts, path):
        for i, s in enumerate(stmts):
            here = path + ((id(stmts), i),)
            if isinstance(s, ast.For):
                for n in ast.walk(s.target):
                    if isinstance(n, ast.Name):
                        self.unstable.add(n.id)
                        self.stores.setdefault(n.id, []).append((here, s))
                self._exprs(s.iter, here)
                self._walk(s.body, here)
            elif isinstance(s, ast.While):
                self._exprs(s.test, here)
                self._walk(s.body, here)
            elif isinstance(s, ast.If):
                self._exprs(s.test, here)
                self._walk(s.body, here + (("body", 0),))
                self._walk(s.orelse, here + (("orelse", 0),))
            else:
                for n in ast.walk(s):
                    if isinstance(n, ast.Name):
                        if isinstance(n.ctx, ast.Load):
                            self.loads.setdefault(n.id, []).append((here, n))
                        else:
                            self.stores.setdefault(n.id, []).append((here, s))
                            if isinstance(s, ast.AugAssign):
                                self.unstable.add(n.id)

    def _exprs(self, e, here):
        for n in ast.walk(e):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                self.loads.setdefault(n.id, []).append((here, n))

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
        st = self.stores.get(name, [])
        if len(st) != 1 or name in self.unstable:
            return None
        path, stmt = st[0]
        if all(self.dominates(path, u) for u, _ in self.loads.get(name, [])):
            return st[0]
        return None

    def stable_at(self, name, path) -> bool:
        """Does ``name`` hold one value from ``path`` on (never stored, or stored once
        where that dominates ``path``)?"""
        if name not in self.stores:
            return True
        st = self.single(name)
        return st is not None and self.dominates(st[0], path)


def _replace_stmts(body, fn):
    """Rebuild every statement list: ``fn(stmt)`` returns the statements replacing it."""
    out = []
    for s in body:
        for field in ("body", "orelse"):
            if isinstance(getattr(s, field, None), list) and not isinstance(s, ast.FunctionDef):
                setattr(s, field, _replace_stmts(getattr(s, field), fn))
        out.extend(fn(s))
    return out


def _pure(e) -> bool:
    return isinstance(e, (ast.Name, ast.Constant)) or (
        isinstance(e, ast.Tuple) and all(_pure(x) for x in e.elts)
    )


def _scalarize(body, params, fl) -> tuple[list, bool]:
    """One round of copy propagation, scalar replacement of tuples and dead-store removal
    on a flattened body (Numba types and lowers every tuple, item and copy)."""
    uses = _Uses(body, params)
    parents = _parents(body)
    subst: dict[str, ast.expr] = {}  # name -> what its loads become
    drop: set[int] = set()  # id of statements to delete
    split: dict[int, list] = {}  # id of a tuple store -> its replacement statements
    items: dict[str, list] = {}  # tuple name -> element expressions
    counter = itertools.count()

    def resolve(e):
        while isinstance(e, ast.Name) and e.id in subst and not isinstance(subst[e.id], list):
            e = subst[e.id]
        return e

    for name in list(uses.stores):
        st = uses.single(name)
        if st is None or st[1] is None:
            continue
        path, s = st
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1):
            continue
        tgt = s.targets[0]
        if not (isinstance(tgt, ast.Name) and tgt.id == name):
            continue
        v = s.value
        if isinstance(v, ast.Constant) or (
            isinstance(v, ast.Name) and v.id != name and uses.stable_at(v.id, path)
        ):
            subst[name] = v
            drop.add(id(s))
        elif isinstance(v, ast.Tuple) and not any(isinstance(x, ast.Starred) for x in v.elts):
            loads = uses.loads.get(name, [])
            ok = all(_tuple_use(n, parents) for _, n in loads)
            if not ok:
                continue
            elts, new = [], []
            for x in v.elts:
                if isinstance(x, ast.Constant) or (
                    isinstance(x, ast.Name) and uses.stable_at(x.id, path)
                ):
                    elts.append(x)
                else:
                    tmp = f"{name}__{next(counter)}"
                    new.append(ast.Assign([ast.Name(tmp, ast.Store())], x))
                    elts.append(ast.Name(tmp, ast.Load()))
            items[name] = elts
            split[id(s)] = new
    if not subst and not items:
        return body, False

    class Sub(ast.NodeTransformer):
        def visit_Name(self, n):
            if isinstance(n.ctx, ast.Load) and n.id in subst:
                return copy.deepcopy(resolve(n))
            return n

        def visit_Subscript(self, n):
            if (
                isinstance(n.value, ast.Name)
                and n.value.id in items
                and isinstance(n.ctx, ast.Load)
            ):
                return self.visit(copy.deepcopy(items[n.value.id][n.slice.value]))
            self.generic_visit(n)
            return n

    sub = Sub()

    def fix(s):
        if id(s) in drop:
            return []
        if id(s) in split:
            return [sub.visit(x) for x in split[id(s)]]
        if (
            isinstance(s, ast.Assign)
            and len(s.targets) == 1
            and isinstance(s.targets[0], ast.Tuple)
            and isinstance(s.value, ast.Name)
            and s.value.id in items
        ):
            elts = items[s.value.id]
            return [
                ast.Assign([t], sub.visit(copy.deepcopy(e)))
                for t, e in zip(s.targets[0].elts, elts)
            ]
        return [sub.visit(s)]

    return _replace_stmts(body, fix), True


def _tuple_use(n, parents) -> bool:
    """Is this load of a tuple an item with a constant index or a whole unpack?"""
    parent = parents.get(id(n))
    if isinstance(parent, ast.Subscript) and parent.value is n:
        return isinstance(parent.slice, ast.Constant) and isinstance(parent.slice.value, int)
    if isinstance(parent, ast.Assign) and parent.value is n:
        t = parent.targets[0]
        return (
            len(parent.targets) == 1
            and isinstance(t, ast.Tuple)
            and all(isinstance(x, ast.Name) for x in t.elts)
        )
    return False


def _parents(body) -> dict:
    out = {}
    for s in body:
        for node in ast.walk(s):
            for child in ast.iter_child_nodes(node):
                out[id(child)] = node
    return out


def _dead_stores(body, params) -> tuple[list, bool]:
    uses = _Uses(body, params)
    changed = False

    def fix(s):
        nonlocal changed
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and _pure(s.value):
            t = s.targets[0]
            names = [t] if isinstance(t, ast.Name) else getattr(t, "elts", [None])
            if all(isinstance(x, ast.Name) and x.id not in uses.loads for x in names):
                changed = True
                return []
        return [s]

    return _replace_stmts(body, fix), changed


def optimize(body, params, fl):
    """Copy propagation, tuple scalarization, constant folding and dead-store removal,
    repeated until nothing changes."""
    for _ in range(20):
        body, a = _scalarize(body, params, fl)
        body = fl.block(body)
        body, b = _dead_stores(body, params)
        if not (a or b):
            break
    return body
