"""Native kernels: LLVM IR compiled by Numba's code generator alone, called through a
CPython entry that is itself native code.

Most kernels are LLVM IR written out (vector types, masked accesses, byte permutes: no loop
for LLVM to vectorize).  Compiled as Numba functions, each went through Numba's typed
pipeline: typing, lowering of its chunk loop, a CPython wrapper (~0.055 s of the 0.11-0.16 s
a further kernel took in a warm process), and a process's first compile paid Numba's set-up,
its typing registries (0.25-0.3 s of the 0.30-0.35 s its first compile takes here).  Here
each kernel is one LLVM function, compiled by Numba's code generator (the same target
machine, CPU name and features as Numba's kernels) in 0.02-0.14 s:

- a :class:`NativeKernel` has the codec kernels' signature (:data:`FUNCTION_TYPE`) and is
  called through :func:`_entry`, a ``METH_FASTCALL`` builtin written in LLVM IR too: it reads
  numpy's array header (the layout a probe array confirms at start-up), splits the chunks
  as the Numba kernels did, releases the GIL around the kernel and returns its result;
- a :class:`GenericNativeKernel` takes any arrays and integers (:data:`GENERIC_TYPE`) through
  :func:`generic_entry` and splits its own chunks (:func:`chunk_bounds`, :func:`spec_fields`),
  its body a function of its own (:func:`body_function`).

A first call that runs only native kernels thus never starts Numba's typed pipeline.  The
native function's address is the first 8 bytes of the bound parameter array (:func:`bind`),
so a call passes nothing more than a Numba kernel's.  Where the probe shows another layout
(another interpreter ABI), :class:`NativeKernel` runs through :func:`_trampoline`, one Numba
kernel whose arrays have an element type without a numpy dtype (:data:`RAW`, so its entry
point checks no item size), and the callers of generic kernels take their Numba kernels
(:func:`available`).

The compiled object code is cached on disk beside Numba's cache of the kernels (Numba's own
cache locator), under a key of everything that decides the machine code: the function's
name and variant, :func:`fp8kit._kernels.registry.source_version` (a hash of every kernel
source, so an edit to a helper never loads stale code), the versions of Numba, llvmlite and
Python, Numba's optimisation level and the target (triple, CPU name and features).  A
compile is announced as the event ``"fp8kit:compile"`` (Numba's kernels announce
``"numba:compile"``).  LLVM's part of a compile (parse, passes, machine code) runs on a
worker thread while the calling thread goes on in Python (:func:`_address`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import os
import pickle
import sys
import tempfile
import threading
from collections.abc import Callable

import llvmlite
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils, config, event
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic

from .._parallel import BEHAVED, WRITEABLE
from .bits import chunk_range
from .registry import BUILD_LOCK, source_version

#: Element type of the trampoline's arrays: no numpy dtype, so no item-size check.
_RAW_ITEM = types.Opaque("fp8kit_raw_element")
RAW = types.Array(_RAW_ITEM, 1, "C")
RAW_RO = types.Array(_RAW_ITEM, 1, "C", readonly=True)
#: The event a native compile starts and ends (data: the function's name).
COMPILE_EVENT = "fp8kit:compile"

_I8P = ir.IntType(8).as_pointer()
_I32, _I64 = ir.IntType(32), ir.IntType(64)
#: A native kernel: ``i32 f(prm, lut, table, x, out, lo, hi, total)`` runs elements
#: ``lo .. hi - 1`` of arrays of ``total`` elements (pointers to their first element).
FUNCTION_TYPE = ir.FunctionType(_I32, [_I8P] * 5 + [_I64] * 3)


@intrinsic
def _items(typingctx, arr):
    """The element count of a :data:`RAW` array (its shape, in its real elements)."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return context.make_array(signature.args[0])(context, builder, args[0]).nitems

    return types.intp(arr), codegen


@intrinsic
def _call(typingctx, prm, lut, table, x, out, lo, hi, total):
    """Call the native kernel (:data:`FUNCTION_TYPE`) whose address is the first 8 bytes
    of ``prm``, with the rest of ``prm`` as its parameters and the other arrays' first
    elements; its result as uint32."""
    if not isinstance(prm, types.Array):
        return None

    def codegen(context, builder, signature, args):
        ptrs = []
        for ty, value in zip(signature.args[:5], args[:5], strict=True):
            data = context.make_array(ty)(context, builder, value).data
            ptrs.append(builder.bitcast(data, _I8P))
        address = builder.load(builder.bitcast(ptrs[0], _I64.as_pointer()), align=1)
        func = builder.inttoptr(address, FUNCTION_TYPE.as_pointer())
        ptrs[0] = builder.gep(ptrs[0], [ir.Constant(_I64, ADDRESS_BYTES)])
        return builder.call(func, ptrs + list(args[5:8]))

    sig = types.uint32(prm, lut, table, x, out, types.intp, types.intp, types.intp)
    return sig, codegen


def _make_trampoline(parallel):
    version = source_version()
    zero = np.uint32(0)

    def kernel(prm, x, lut, table, out, nchunks):
        if version == 0 or parallel is None:  # never true; see codec.source_version
            return zero
        n = _items(x)
        nchunks, c_first, c_stop = chunk_range(nchunks)
        step = (n + nchunks - 1) // nchunks
        lo = c_first * step
        hi = c_stop * step
        hi = hi if hi < n else n
        if hi <= lo:
            return zero
        # (the chunks of one call are contiguous: one native call runs them all)
        return _call(prm, lut, table, x, out, lo, hi, n)

    return kernel


_SIG = types.uint32(RAW_RO, RAW_RO, RAW_RO, RAW_RO, RAW, types.intp)


@functools.cache
def _trampoline():
    """The trampoline's compiled entry point (compiled, or loaded from Numba's cache, once)."""
    from numba import njit

    options = dict(nogil=True, cache=True, boundscheck=False, no_cfunc_wrapper=True, _nrt=False)
    func = _make_trampoline(False)
    try:
        disp = njit(_SIG, **options)(func)
    except RuntimeError as exc:  # no writable cache location (read-only install)
        if "cannot cache" not in str(exc):
            raise
        disp = njit(_SIG, **{**options, "cache": False})(func)
    (cres,) = disp.overloads.values()
    return cres.entry_point


#: The CPython entry of native kernels: ``PyObject *f(PyObject *self, PyObject *const *args,
#: Py_ssize_t nargs)`` (``METH_FASTCALL``).
_OBJ = ir.IntType(8).as_pointer()
ENTRY_TYPE = ir.FunctionType(_OBJ, [_OBJ, _OBJ.as_pointer(), _I64])
_METH_FASTCALL = 0x0080


@functools.cache
def _array_layout() -> tuple[int, int, int, int] | None:
    """Byte offsets of an object's type, and of a numpy array's data pointer, number of
    dimensions and shape pointer, where this interpreter and numpy put them as their
    headers declare (CPython's ``PyObject``, numpy's ``PyArrayObject_fields``); None where
    a probe array does not show them there (another ABI: the Numba trampoline serves)."""
    import ctypes

    head = object.__basicsize__
    layout = (head - 8, head, head + 8, head + 16)
    probe = np.arange(3.0)
    try:
        word = ctypes.c_void_p.from_address
        ok = (
            word(id(probe) + layout[0]).value == id(np.ndarray)
            and word(id(probe) + layout[1]).value == probe.ctypes.data
            and ctypes.c_int.from_address(id(probe) + layout[2]).value == 1
            and ctypes.c_ssize_t.from_address(word(id(probe) + layout[3]).value).value == 3
        )
    except (ValueError, OSError):  # pragma: no cover - no ctypes access
        ok = False
    if not ok:
        _warn_once(
            "layout",
            "fp8kit: this interpreter's numpy arrays are not laid out as fp8kit's native "
            "entry reads them; kernels run through Numba's dispatchers instead (first calls "
            "about 10x slower: 0.4-1.5 s each)",
        )
    return layout if ok else None


def _flags_offset(layout) -> int | None:
    """Byte offset of a numpy array's ``flags`` (after its strides, base and descr
    pointers, as ``PyArrayObject_fields`` declares), or None where probe arrays do not
    show them there."""
    import ctypes

    at = layout[3] + 32
    probes = [np.arange(3.0), np.arange(3.0)[::-1], np.zeros((2, 2))[:, 0]]
    probes[0].flags.writeable = False
    try:
        ok = all(ctypes.c_int.from_address(id(a) + at).value == a.flags.num for a in probes)
    except (ValueError, OSError):  # pragma: no cover - no ctypes access
        ok = False
    return at if ok else None


@functools.cache
def _descr_layout(flags_at: int) -> tuple[int, int] | None:
    """``(offset, bits)`` of the item size in numpy's ``PyArray_Descr`` (an int at 32 in
    numpy 1, an intp at 40 in numpy 2), where probe arrays of several dtypes show their
    descr pointer 8 bytes before their flags and their item size there; else None."""
    import ctypes

    at, bits = (40, 64) if int(np.__version__.split(".")[0]) >= 2 else (32, 32)
    read = ctypes.c_int64 if bits == 64 else ctypes.c_int32
    try:
        for dt in (np.uint8, np.uint16, np.int64, np.float32, np.complex128):
            a = np.zeros(2, dt)
            descr = ctypes.c_void_p.from_address(id(a) + flags_at - 8).value
            if descr != id(a.dtype) or read.from_address(descr + at).value != a.itemsize:
                return None
    except (ValueError, OSError):  # pragma: no cover - no ctypes access
        return None
    return at, bits


def _extern(builder, name: str, ret, params):
    """The declaration of the C function ``name`` (a CPython API function: resolved in the
    process when the code is loaded) in the current module."""
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, params), name)


def _field(builder, obj, offset: int, ty):
    """The ``ty`` at byte ``offset`` of the object at the pointer ``obj``."""
    at = builder.gep(obj, [ir.Constant(_I64, offset)])
    return builder.load(builder.bitcast(at, ty.as_pointer()))


def _length(builder, obj, nd_at: int, dims_at: int):
    """The length of the array ``obj``'s first axis: 1 for a 0-d array, which has no shape
    to read (its shape pointer is never loaded)."""
    one = cgutils.alloca_once_value(builder, ir.Constant(_I64, 1))
    dims = _field(builder, obj, dims_at, _I64.as_pointer())
    scalar = builder.icmp_signed("==", _field(builder, obj, nd_at, _I32), ir.Constant(_I32, 0))
    return builder.load(builder.select(scalar, one, dims))


def _is_array(builder, obj, ndarray, type_at: int):
    """Whether ``obj`` is an ndarray (``ndarray``: the type object), a subclass too."""
    ty = _field(builder, obj, type_at, _OBJ)
    is_array = cgutils.alloca_once_value(builder, builder.icmp_unsigned("==", ty, ndarray))
    with builder.if_then(builder.not_(builder.load(is_array))):
        subtype = _extern(builder, "PyType_IsSubtype", _I32, [_OBJ, _OBJ])
        sub = builder.call(subtype, [ty, ndarray])
        builder.store(builder.icmp_signed("!=", sub, ir.Constant(_I32, 0)), is_array)
    return builder.load(is_array)


def _entry_emitter(layout: tuple[int, int, int, int]):
    """The emitter of the CPython entry (:data:`ENTRY_TYPE`) of :class:`NativeKernel`:
    ``entry(prm, x, lut, table, out, nchunks)`` as the Numba trampoline's, ``self`` the
    ndarray type (every array argument must be one, else TypeError): the chunks' range of
    elements (see :func:`_make_trampoline`), the GIL released around the native call, its
    result as a Python int."""
    type_at, data_at, nd_at, dims_at = layout

    def emit(context, builder, args):
        ndarray, argv, nargs = args
        extern, field = functools.partial(_extern, builder), functools.partial(_field, builder)

        fail = builder.append_basic_block("fail")
        with builder.goto_block(fail):
            builder.call(extern("PyErr_BadArgument", _I32, []), [])
            builder.ret(ir.Constant(_OBJ, None))

        def require(cond):
            good = builder.append_basic_block("ok")
            builder.cbranch(cond, good, fail)
            builder.position_at_end(good)

        require(builder.icmp_signed("==", nargs, ir.Constant(_I64, 6)))
        objs = [builder.load(builder.gep(argv, [ir.Constant(_I64, k)])) for k in range(6)]
        for obj in objs[:5]:
            require(_is_array(builder, obj, ndarray, type_at))
        spec = builder.call(extern("PyLong_AsSsize_t", _I64, [_OBJ]), [objs[5]])
        require(builder.icmp_signed(">=", spec, ir.Constant(_I64, 0)))  # (-1: not an int)
        datas = [field(obj, data_at, _I8P) for obj in objs[:5]]
        n = _length(builder, objs[1], nd_at, dims_at)
        lo, hi = chunk_bounds(builder, spec, n)
        # (fp8kit._parallel.NO_STREAM: the kernels' total 0, below every size from which
        # they write with non-temporal stores, the only thing they read it for)
        no_stream = builder.and_(builder.lshr(spec, ir.Constant(_I64, 62)), ir.Constant(_I64, 1))
        total = builder.select(builder.icmp_unsigned("!=", no_stream, ir.Constant(_I64, 0)),
                               ir.Constant(_I64, 0), n)  # fmt: skip
        result = cgutils.alloca_once_value(builder, ir.Constant(_I32, 0))
        with builder.if_then(builder.icmp_signed("<", lo, hi)):
            prm = datas[0]
            address = builder.load(builder.bitcast(prm, _I64.as_pointer()), align=1)
            func = builder.inttoptr(address, FUNCTION_TYPE.as_pointer())
            params = builder.gep(prm, [ir.Constant(_I64, ADDRESS_BYTES)])
            state = builder.call(extern("PyEval_SaveThread", _OBJ, []), [])
            got = builder.call(
                func, [params, datas[2], datas[3], datas[1], datas[4], lo, hi, total]
            )
            builder.call(extern("PyEval_RestoreThread", ir.VoidType(), [_OBJ]), [state])
            builder.store(got, result)
        value = builder.zext(builder.load(result), _I64)
        return builder.call(extern("PyLong_FromUnsignedLongLong", _OBJ, [_I64]), [value])

    return emit


def _xo_entry_emitter(layout: tuple[int, int, int, int], flags_at: int):
    """The emitter of the CPython entry of a native kernel called with ``x`` and ``out``
    alone (:func:`xo_call`): ``entry(bound, x, out, spec)``, ``bound`` the kernel's
    address, the two arrays' item sizes (one byte each) and its parameters, ``spec`` the
    complement of the largest size it takes (as an :class:`fp8kit._kernels.codec.XOKernel`
    is called).  It returns 1, having written nothing, unless both arrays are exactly numpy
    arrays, 1-D, of one size below that limit, C-contiguous and aligned (``out`` writeable)
    and do not overlap; else it runs the kernel on them (the GIL held: small arrays) and
    returns 0.  These checks took ~0.2 us of a 1,000-element call in Python."""
    type_at, data_at, nd_at, dims_at = layout

    def emit(context, builder, args):
        ndarray, argv, nargs = args
        extern, field = functools.partial(_extern, builder), functools.partial(_field, builder)
        refuse = builder.append_basic_block("refuse")
        with builder.goto_block(refuse):  # (a spec that is no int left an error: cleared)
            builder.call(extern("PyErr_Clear", ir.VoidType(), []), [])
            one = ir.Constant(_I64, 1)
            builder.ret(builder.call(extern("PyLong_FromLong", _OBJ, [_I64]), [one]))

        def require(cond):
            good = builder.append_basic_block("ok")
            builder.cbranch(cond, good, refuse)
            builder.position_at_end(good)

        require(builder.icmp_signed("==", nargs, ir.Constant(_I64, 4)))
        bound, x, out, spec = (builder.load(builder.gep(argv, [ir.Constant(_I64, k)]))
                               for k in range(4))  # fmt: skip
        for obj in (x, out):
            require(builder.icmp_unsigned("==", field(obj, type_at, _OBJ), ndarray))
            require(builder.icmp_signed("==", field(obj, nd_at, _I32), ir.Constant(_I32, 1)))
        n = builder.load(field(x, dims_at, _I64.as_pointer()))
        require(builder.icmp_signed("==", builder.load(field(out, dims_at, _I64.as_pointer())), n))
        limit = builder.not_(builder.call(extern("PyLong_AsSsize_t", _I64, [_OBJ]), [spec]))
        require(builder.icmp_signed("<", n, limit))  # (a non-int spec gives ~-1 = 0)
        want_x = ir.Constant(_I32, BEHAVED)  # (numpy's flags: fp8kit._parallel)
        want_out = ir.Constant(_I32, BEHAVED | WRITEABLE)
        require(builder.icmp_signed("==", builder.and_(field(x, flags_at, _I32), want_x), want_x))
        flags_out = field(out, flags_at, _I32)
        require(builder.icmp_signed("==", builder.and_(flags_out, want_out), want_out))
        head = field(bound, data_at, _I8P)
        sizes = builder.load(builder.gep(head, [ir.Constant(_I64, ADDRESS_BYTES)]))
        x_size = builder.zext(sizes, _I64)
        out_size = builder.zext(builder.load(builder.gep(head, [ir.Constant(_I64, 9)])), _I64)
        xd, od = field(x, data_at, _I8P), field(out, data_at, _I8P)
        x0, o0 = builder.ptrtoint(xd, _I64), builder.ptrtoint(od, _I64)
        x1, o1 = builder.add(x0, builder.mul(n, x_size)), builder.add(o0, builder.mul(n, out_size))
        apart = builder.or_(
            builder.icmp_unsigned("<=", x1, o0), builder.icmp_unsigned("<=", o1, x0)
        )
        require(builder.or_(apart, builder.icmp_signed("==", n, ir.Constant(_I64, 0))))
        address = builder.load(builder.bitcast(head, _I64.as_pointer()), align=1)
        params = builder.gep(head, [ir.Constant(_I64, XO_HEADER_BYTES)])
        null = ir.Constant(_I8P, None)
        zero = ir.Constant(_I64, 0)
        # (the kernel's result, such as the or of the codes a decode read, is not asked
        # for: the fast paths run only where no range check needs it)
        flag = builder.load(builder.gep(head, [ir.Constant(_I64, XO_CHECKED_AT)]))
        checked = builder.icmp_unsigned("!=", flag, ir.Constant(ir.IntType(8), 0))
        with builder.if_else(checked) as (numba_kernel, ir_kernel):
            with numba_kernel:  # (a NumbaKernel's adapter, told by nargs -3: checked here)
                size = builder.load(field(bound, dims_at, _I64.as_pointer()))
                prm_bytes = builder.sub(size, ir.Constant(_I64, XO_HEADER_BYTES - ADDRESS_BYTES))
                ptrs = _stack_array(builder, _I8P, [params, xd, od])
                ints = _stack_array(builder, _I64, [prm_bytes, n, n])
                func = builder.inttoptr(address, CHECKED_TYPE.as_pointer())
                no_kinds = ir.Constant(_I64.as_pointer(), None)
                builder.call(func, [ptrs, ints, no_kinds, ir.Constant(_I64, -3)])
            with ir_kernel:
                func = builder.inttoptr(address, FUNCTION_TYPE.as_pointer())
                builder.call(func, [params, null, null, xd, od, zero, n, n])
        return builder.call(extern("PyLong_FromLong", _OBJ, [_I64]), [zero])

    return emit


def _stack_array(builder, ty, values):
    """A pointer to a stack array of ``values`` (of LLVM type ``ty``)."""
    at = cgutils.alloca_once(builder, ty, size=len(values))
    for k, value in enumerate(values):
        builder.store(value, builder.gep(at, [ir.Constant(_I64, k)]))
    return at


def spec_fields(builder, spec):
    """``(nchunks, first, stop)`` of a kernel's packed chunk argument (i64, see
    :func:`fp8kit._parallel.chunk_spec`) in LLVM IR, as :func:`fp8kit._kernels.bits.
    chunk_range`; ``nchunks`` at least 1."""
    field = ir.Constant(_I64, 0xFFFFF)
    one = ir.Constant(_I64, 1)
    nchunks = builder.and_(spec, field)
    nchunks = builder.select(builder.icmp_signed("<", nchunks, one), one, nchunks)
    first = builder.and_(builder.lshr(spec, ir.Constant(_I64, 20)), field)
    stop = builder.and_(builder.lshr(spec, ir.Constant(_I64, 40)), field)
    stop = builder.select(builder.icmp_signed("==", stop, ir.Constant(_I64, 0)), nchunks, stop)
    return nchunks, first, stop


def chunk_bounds(builder, spec, total):
    """``(lo, hi)``: the items of the chunks a packed chunk argument ``spec`` names (i64,
    see :func:`spec_fields`) out of ``total``, as the Numba kernels split them (``step =
    ceil(total / nchunks)``); the chunks of one call are contiguous, so their union."""
    nchunks, first, stop = spec_fields(builder, spec)
    one = ir.Constant(_I64, 1)
    step = builder.sdiv(builder.sub(builder.add(total, nchunks), one), nchunks)
    lo = builder.mul(first, step)
    hi = builder.mul(stop, step)
    return lo, builder.select(builder.icmp_signed("<", hi, total), hi, total)


def body_function(builder, suffix: str, arg_types: list, emit_body: Callable, prefer_512=False):
    """A function of the current module (internal, never inlined) of the arguments
    ``arg_types`` whose body ``emit_body(builder, args)`` writes, for a generic native
    kernel to call with the pointers and bounds it read from its arguments.  Inlined after
    those loads, a loop of stochastic rounding measured 5-9% slower (16M elements: LLVM
    allocated its registers differently); ``prefer_512``: let LLVM use 512-bit vectors
    where it picks the width (see :func:`fp8kit._kernels.bits.prefer_512`)."""
    fn = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), arg_types),
                     name=f"{builder.function.name}_{suffix}")  # fmt: skip
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    if prefer_512:
        set.add(fn.attributes, '"prefer-vector-width"="512"')
    inner = ir.IRBuilder(fn.append_basic_block("entry"))
    emit_body(inner, list(fn.args))
    inner.ret_void()
    return fn


#: A native kernel of any arguments: ``i32 f(i8 **ptrs, i64 *ints, i64 nargs)``, argument
#: ``k`` of the call an array (``ptrs[k]``: its first element, ``ints[k]``: its length, the
#: first dimension) or an int (``ints[k]``); ``ptrs[0]`` the parameters after the address.
GENERIC_TYPE = ir.FunctionType(_I32, [_I8P.as_pointer(), _I64.as_pointer(), _I64])
#: Most arguments a generic native kernel takes (the matrix products' fast kernel takes
#: 20: its bound parameters, 17 arrays, their shapes and the chunk range).
_MAX_ARGS = 24
#: A Numba-written kernel (:class:`NumbaKernel`): ``i64 f(i8 **ptrs, i64 *ints, i64 *kinds,
#: i64 nargs)`` as :data:`GENERIC_TYPE` with each argument's kind (:func:`kind_word`); its
#: result in the low 32 bits, or bit 32 set and the index of a refused argument from bit 40.
CHECKED_TYPE = ir.FunctionType(_I64, [_I8P.as_pointer(), _I64.as_pointer(), _I64.as_pointer(),
                                      _I64])  # fmt: skip
_BAD_ARGUMENT = (
    "fp8kit kernel: argument %lld is not what the compiled kernel takes (a 1-D, "
    "C-contiguous, aligned array of its dtype, writeable for an output, of the right size; "
    "or an integer)"
)


def _generic_entry_emitter(layout: tuple[int, int, int, int], flags_at: int | None = None):
    """The emitter of the CPython entry (:data:`ENTRY_TYPE`) of generic native kernels
    (:data:`GENERIC_TYPE`): ``entry(prm, *args)``, each argument an ndarray (``self`` the
    ndarray type; subclasses too) or an integer (``__index__``), at most
    :data:`_MAX_ARGS`; the native kernel's address the first 8 bytes of ``prm``; the GIL
    released around it; its result as a Python int.

    With ``flags_at`` (the offset of an array's flags, its descr pointer 8 bytes before),
    the entry of Numba-written kernels (:data:`CHECKED_TYPE`): it also passes each
    argument's kind (:func:`kind_word`; -1 for an int), the kernel checks them against its
    signature, and a result with bit 32 set (the argument's index above it) raises
    TypeError instead of returning."""
    type_at, data_at, nd_at, dims_at = layout
    checked = flags_at is not None
    elsize_at, elsize_bits = _descr_layout(flags_at) if checked else (None, None)

    def emit(context, builder, args):
        ndarray, argv, nargs = args
        extern, field = functools.partial(_extern, builder), functools.partial(_field, builder)

        def c(v):
            return ir.Constant(_I64, v)

        ptrs = cgutils.alloca_once(builder, _I8P, size=_MAX_ARGS)
        ints = cgutils.alloca_once(builder, _I64, size=_MAX_ARGS)
        kinds = cgutils.alloca_once(builder, _I64, size=_MAX_ARGS)
        fail = builder.append_basic_block("fail")
        raised = builder.append_basic_block("raised")
        with builder.goto_block(fail):
            builder.call(extern("PyErr_BadArgument", _I32, []), [])
            builder.branch(raised)
        with builder.goto_block(raised):
            builder.ret(ir.Constant(_OBJ, None))
        count_ok = builder.and_(
            builder.icmp_signed(">", nargs, c(0)), builder.icmp_signed("<=", nargs, c(_MAX_ARGS))
        )
        start = builder.append_basic_block("args")
        builder.cbranch(count_ok, start, fail)
        builder.position_at_end(start)
        as_index = extern("PyNumber_AsSsize_t", _I64, [_OBJ, _OBJ])
        occurred = extern("PyErr_Occurred", _OBJ, [])
        with cgutils.for_range(builder, nargs) as loop:
            k = loop.index
            obj = builder.load(builder.gep(argv, [k]))
            with builder.if_else(_is_array(builder, obj, ndarray, type_at)) as (array, integer):
                with array:
                    builder.store(field(obj, data_at, _I8P), builder.gep(ptrs, [k]))
                    nd = field(obj, nd_at, _I32)
                    if checked:  # (item size | nd << 32 | flags << 40, see kind_word)
                        descr = field(obj, flags_at - 8, _OBJ)
                        num = field(descr, elsize_at, ir.IntType(elsize_bits))
                        num = builder.zext(num, _I64) if elsize_bits < 64 else num
                        flags = builder.zext(field(obj, flags_at, _I32), _I64)
                        kind = builder.or_(num, builder.shl(builder.zext(nd, _I64), c(32)))
                        kind = builder.or_(kind, builder.shl(flags, c(40)))
                        builder.store(kind, builder.gep(kinds, [k]))
                    builder.store(_length(builder, obj, nd_at, dims_at), builder.gep(ints, [k]))
                with integer:
                    value = builder.call(as_index, [obj, ir.Constant(_OBJ, None)])
                    builder.store(value, builder.gep(ints, [k]))
                    builder.store(c(-1), builder.gep(kinds, [k]))
                    builder.store(ir.Constant(_I8P, None), builder.gep(ptrs, [k]))
                    maybe = builder.icmp_signed("==", value, c(-1))
                    with builder.if_then(maybe, likely=False):
                        err = builder.call(occurred, [])
                        ok = builder.append_basic_block("index_ok")
                        builder.cbranch(builder.icmp_unsigned("!=", err, ir.Constant(_OBJ, None)),
                                        raised, ok)  # fmt: skip
                        builder.position_at_end(ok)
        prm = builder.load(ptrs)
        bound = builder.append_basic_block("bound")
        builder.cbranch(builder.icmp_unsigned("==", prm, ir.Constant(_I8P, None)), fail, bound)
        builder.position_at_end(bound)
        address = builder.load(builder.bitcast(prm, _I64.as_pointer()), align=1)
        builder.store(builder.gep(prm, [c(ADDRESS_BYTES)]), ptrs)
        func = builder.inttoptr(address, (CHECKED_TYPE if checked else GENERIC_TYPE).as_pointer())
        state = builder.call(extern("PyEval_SaveThread", _OBJ, []), [])
        got = builder.call(func, [ptrs, ints, kinds, nargs] if checked else [ptrs, ints, nargs])
        builder.call(extern("PyEval_RestoreThread", ir.VoidType(), [_OBJ]), [state])
        if not checked:
            got = builder.zext(got, _I64)
        else:
            refused, done = builder.append_basic_block("refused"), builder.append_basic_block()
            builder.cbranch(builder.icmp_unsigned(">", got, c(0xFFFFFFFF)), refused, done)
            builder.position_at_end(refused)
            error = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(_OBJ, [_OBJ, _I8P], var_arg=True), "PyErr_Format"
            )
            # (Numba maps the symbol PyExc_TypeError to the type object itself)
            exc = builder.module.globals.get("PyExc_TypeError") or cgutils.add_global_variable(
                builder.module, ir.IntType(8), "PyExc_TypeError"
            )
            text = context.insert_const_string(builder.module, _BAD_ARGUMENT)
            builder.call(error, [exc, text, builder.lshr(got, c(40))])
            builder.branch(raised)
            builder.position_at_end(done)
        return builder.call(extern("PyLong_FromUnsignedLongLong", _OBJ, [_I64]), [got])

    return emit


_ENTRIES: list = []  # (the method definitions entries point to: kept alive)


@functools.cache
def _entry():
    """The CPython function every native kernel is called through: a native function
    (:func:`_entry_emitter`) made a builtin; where this interpreter's layout of arrays is
    not the one it reads, the Numba trampoline's entry point.

    A first call that runs only native kernels then compiles nothing with Numba: Numba's
    first compile in a process loads its typing registries (0.25-0.3 s of the 0.31-0.35 s
    a trivial kernel's first compile takes here, measured), none of which a native kernel
    needs."""
    entries = _entries()
    if entries is None:  # pragma: no cover - another ABI
        return _trampoline()
    return entries["entry"]


@functools.cache
def generic_entry():
    """The CPython function generic native kernels (:data:`GENERIC_TYPE`) are called
    through (:func:`_generic_entry_emitter`); None where this interpreter's layout of
    arrays is not the one it reads."""
    entries = _entries()
    return None if entries is None else entries["generic"]


@functools.cache
def checked_entry():
    """The CPython function Numba-written kernels (:data:`CHECKED_TYPE`) are called
    through; None where this interpreter's layout of arrays is not the one it reads."""
    entries = _entries()
    return None if entries is None else entries.get("checked")


@functools.cache
def xo_entry():
    """The CPython function of native kernels called with x and out alone
    (:func:`_xo_entry_emitter`); None where this interpreter's array layout is not the one
    it reads."""
    entries = _entries()
    return None if entries is None else entries.get("xo")


@functools.cache
def _entry_plan() -> tuple | None:
    """``(key, emit, names)`` of the module of the CPython entries (:func:`_entries`):
    its cache key, its emitter and the entries it holds besides ``entry``; None where
    this interpreter's layout of arrays is not the one they read."""
    layout = _array_layout()
    if layout is None:  # pragma: no cover - another ABI
        return None
    flags_at = _flags_offset(layout)
    more = {"generic": _generic_entry_emitter(layout)}
    if flags_at is not None:
        more["xo"] = _xo_entry_emitter(layout, flags_at)
        if _descr_layout(flags_at) is not None:
            more["checked"] = _generic_entry_emitter(layout, flags_at)
    main = _entry_emitter(layout)

    def emit(context, builder, args):
        for suffix, sub in more.items():  # (beside the main function, in its module)
            fn = ir.Function(builder.module, ENTRY_TYPE, name=f"{builder.function.name}_{suffix}")
            inner = ir.IRBuilder(fn.append_basic_block("entry"))
            inner.ret(sub(context, inner, list(fn.args)))
        return main(context, builder, args)

    # (the checked entry raises TypeError: the symbol the type object is known by, as
    # Numba maps it once its target is set up; mapped here too, so that code loaded from
    # the cache never depends on that having happened first)
    from llvmlite import binding as llvm

    llvm.add_symbol("PyExc_TypeError", id(TypeError))
    key = ("native_entries", layout, flags_at, np.__version__.split(".")[0])
    return key, emit, tuple(more)


@functools.cache
def _entries() -> dict | None:
    """The three CPython entries (``entry``, ``generic``, and ``xo`` where the flags' offset
    is known), compiled in one LLVM module the first time any of them is needed.  Together
    they take about what the three took apart (0.04 s here), but all at a process's first
    native call: a study of float64 data after a float32 one, which had needed only the
    generic entry, compiled the other two on its own (0.013 + 0.009 s of its 0.16-0.18).
    Straight-line code but for the argument loop: the short pipeline (:data:`LEAN_PASSES`)
    optimises them in 0.020 s where the full one took 0.030, and 1,000-element calls
    through them take as long (0.5-0.8 us, measured side by side)."""
    plan = _entry_plan()
    if plan is None:  # pragma: no cover - another ABI
        return None
    key, emit, names = plan
    address = native_address(key, emit, ENTRY_TYPE, LEAN_PASSES)
    library, name = _BUILT[key][0], _BUILT[key][2]
    entries = {"entry": _builtin(address)}
    for suffix in names:
        entries[suffix] = _builtin(library.get_pointer_to_function(f"{name}_{suffix}"))
    return entries


def xo_call(call: NativeCall, x_itemsize: int, out_itemsize: int):
    """``call``'s kernel called with x and out alone (see :func:`_xo_entry_emitter`) for
    arrays of these item sizes, or None where :func:`xo_entry` is (or the kernel reads its
    lut or table: ``call.xo`` false)."""
    entry = xo_entry() if getattr(call, "xo", False) else None
    if entry is None:
        return None
    params = call.args[0][ADDRESS_BYTES:]
    bound = np.zeros(XO_HEADER_BYTES + params.size, np.uint8)
    bound[:ADDRESS_BYTES] = call.args[0][:ADDRESS_BYTES]
    bound[ADDRESS_BYTES : ADDRESS_BYTES + 2] = (x_itemsize, out_itemsize)
    bound[XO_CHECKED_AT] = call.func is checked_entry()
    bound[XO_HEADER_BYTES:] = params
    bound.flags.writeable = False
    return functools.partial(entry, bound)


def _builtin(address: int):
    """The native ``METH_FASTCALL`` function at ``address`` as a Python builtin, its
    ``self`` the ndarray type."""
    import ctypes

    class MethodDef(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p),
                    ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]  # fmt: skip

    method = MethodDef(b"fp8kit_native_kernel", address, _METH_FASTCALL, None)
    new_function = ctypes.pythonapi.PyCFunction_NewEx
    new_function.restype = ctypes.py_object
    new_function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
    _ENTRIES.append(method)
    return new_function(ctypes.addressof(method), np.ndarray, None)


class Stats:
    """Numba's ``dispatcher.stats`` for a native kernel: ``cache_hits`` (loaded from the
    disk cache) and ``cache_misses`` (compiled), by name."""

    def __init__(self):
        self.cache_hits: dict = {}
        self.cache_misses: dict = {}


class NativeCall(functools.partial):
    """A native kernel bound to its CPython entry (``func``), called as every kernel's
    compiled function is (a :class:`NativeKernel` with ``(x, lut, table, out, nchunks)``, a
    :class:`GenericNativeKernel` with its kernel's arguments); ``args``: the bound
    parameter array, the native function's address in its first :data:`ADDRESS_BYTES`
    bytes, then the kernel's parameters."""

    @property
    def address(self) -> int:
        """The native function's address (kernels sharing it share the compiled code)."""
        return int(self.args[0][:ADDRESS_BYTES].view(np.uint64)[0])

    @property
    def stats(self) -> Stats:
        return _STATS[self.address]


_STATS: dict = {}
#: Bytes of the native function's address at the start of a bound parameter array.
ADDRESS_BYTES = 8
#: Bytes before the parameters in :func:`xo_call`'s bound array (the address, the item
#: sizes, whether the function is a :class:`NumbaKernel`'s adapter, padding that keeps the
#: parameters 8-byte aligned).
XO_HEADER_BYTES = 16
XO_CHECKED_AT = 10


def bind(address: int, params: np.ndarray) -> np.ndarray:
    """The bytes of ``params`` (1-D, C-contiguous) after the 8 bytes of ``address``: the
    entry's first argument, so that a call passes no further argument (a 1,000-element call
    measured 0.07-0.1 us slower with the address as an argument of its own)."""
    raw = np.ascontiguousarray(params).reshape(-1).view(np.uint8)
    bound = np.empty(ADDRESS_BYTES + raw.size, np.uint8)
    bound[:ADDRESS_BYTES] = np.array([address], np.uint64).view(np.uint8)
    bound[ADDRESS_BYTES:] = raw
    bound.flags.writeable = False
    return bound


class _NativeBase:
    """What a native kernel shares with :class:`fp8kit._kernels.codec.Kernel`: ``build()``
    gives the function its callers call, ``serial`` runs it on one thread, ``planes`` says
    whether a round-to kernel's table argument is the table's byte planes; ``_key`` names
    the native function and everything its emitter depends on (kernels of equal keys share
    it), ``_params`` is the parameter array bound to it."""

    planes = False

    def __init__(self, key: tuple, emit: Callable, params: np.ndarray):
        self._key, self._emit, self._params = key, emit, params
        self._built = None

    def serial(self, x, lut, table, out) -> None:
        self.build()(x, lut, table, out, 1)


def is_native(kernel) -> bool:
    """Whether ``kernel`` is a native kernel (compiled without Numba's set-up)."""
    return isinstance(kernel, _NativeBase)


class NativeKernel(_NativeBase):
    """A kernel whose compiled function is the native function (:data:`FUNCTION_TYPE`)
    ``emit`` writes (see :func:`native_address`), with the parameter array ``params``;
    ``xo``: it reads neither its lut nor its table, so it may be called with x and out
    alone (:func:`xo_call`)."""

    xo = False

    def build(self, parallel: bool = False):
        if self._built is None:
            entry = _entry()
            address = native_address(self._key, self._emit)
            built = NativeCall(entry, bind(address, self._params))
            built.xo = self.xo and isinstance(entry, type(len))  # (not the trampoline)
            self._built = built
        return self._built


def _cache_dirs() -> tuple[str | None, list[str]]:
    """``(where to write, where to read)``: Numba's cache location of this module (its
    locators in order: NUMBA_CACHE_DIR, ``__pycache__`` beside the source, the user-wide
    cache) where one is writable, and every location that exists, writable or not (a
    read-only pre-warmed cache is still read).  Warns once where none is writable: each
    process then compiles its kernels in memory."""
    from numba.core.caching import FunctionCache

    write = None
    try:
        write = FunctionCache(_make_trampoline)._cache_path
    except RuntimeError:  # no writable cache location
        _warn_once(
            "cache",
            "fp8kit: no writable cache location (set NUMBA_CACHE_DIR to one): every "
            "process compiles its kernels in memory (0.1-0.5 s each)",
        )
    candidates = []
    try:  # (Numba's locators in its order, without their check of writability)
        source = _make_trampoline.__code__.co_filename
        for cls in FunctionCache._impl_class._locator_classes:
            if cls.__name__ == "_UserProvidedCacheLocator" and not config.CACHE_DIR:
                continue
            try:
                candidates.append(cls(_make_trampoline, source).get_cache_path())
            except Exception:  # noqa: BLE001 - a locator that does not apply here
                continue
    except AttributeError:  # pragma: no cover - other Numba internals: the writable one
        pass
    # (read where Numba would write, and where it would have preferred to but cannot)
    if write in candidates:
        candidates = candidates[: candidates.index(write)]
    read = [path for path in candidates if os.path.isdir(path)]
    return write, read + ([] if write is None else [write])


_WARNED: set = set()


@contextlib.contextmanager
def _no_gc():
    """Python's cyclic garbage collector paused while a kernel compiles.

    A compile allocates Numba's IR, types and llvmlite's values by the hundred thousand,
    nearly all freed by reference counts when it ends; counted as allocations they set off
    collections in its middle, among them full ones over the whole heap (numpy, Numba and
    llvmlite loaded: 0.035 s each).  Measured: 0.045 s of collection in a stochastic
    kernel's 0.49 s first call, 0.05 s of a first sweep's 0.82 s.  The collector runs
    again as before once the compile is done."""
    import gc

    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


@contextlib.contextmanager
def _quick_typing():
    """Numba's typing of calls remembered for one kernel compile, and numpy's array-operator
    rule declining scalar operands at once.

    Why: type inference asks a function's every typing rule again at each call it types,
    and a kernel makes hundreds of the same calls (``uint32 & uint32``, ``span(...)``);
    for each operator, numpy's array-operator rule first looks up a ufunc loop for the
    operands and only then declines because none is an array.  Measured, first calls with
    an empty cache: a 2 x 3 sweep 0.77 -> 0.66 s, a stochastic round_to 0.435 -> 0.39 s.

    Within one compile (under Numba's compiler lock: nothing else is typed meanwhile) the
    same rules answer the same question the same way, so the first answer is kept: keyed
    by the function's type (Numba interns types), the typing context and the argument
    types (literal values included); a call whose typing fails is not kept, and is asked
    again.  The array-operator rule's answer for operands none of which is an array
    (or an optional array) is None in Numba's own code too (``NumpyRulesArrayOperator
    .generic``), after the lookup.  Both are Numba's private API, replaced on the classes
    for the compile and put back after it, also when it fails; where they are not there,
    the kernel is typed the usual way (one warning)."""
    try:
        from numba.core import types
        from numba.core.typing import npydecl

        function = types.Function  # (the type of plain functions, intrinsics, operators)
        full_call_type = function.get_call_type
        operator = npydecl.NumpyRulesArrayOperator
        full_generic = operator.__dict__["generic"]
    except (ImportError, AttributeError, KeyError) as exc:
        _warn_once(
            "typing",
            "fp8kit types its kernels by Numba's full route (about 0.02-0.1 s more on a "
            f"first call with an empty cache): Numba's internals differ ({exc!r})",
        )
        yield
        return
    memo: dict = {}

    def get_call_type(self, context, args, kws):
        try:
            key = (self, context, tuple(args), tuple(sorted(kws.items())))
            return memo[key]
        except KeyError:
            pass
        except TypeError:  # (an unhashable argument type: asked every time)
            return full_call_type(self, context, args, kws)
        memo[key] = sig = full_call_type(self, context, args, kws)
        return sig

    def generic(self, args, kws):
        for arg in args:
            if isinstance(arg.type if isinstance(arg, types.Optional) else arg,
                          types.ArrayCompatible):  # fmt: skip
                return full_generic(self, args, kws)
        return None

    own = vars(function).get("get_call_type")  # (None: the base class's, inherited)
    function.get_call_type = get_call_type
    operator.generic = generic
    try:
        yield
    finally:
        if own is None:
            del function.get_call_type
        else:
            function.get_call_type = own
        operator.generic = full_generic


def _no_refresh() -> None:
    """A target context's refresh while a cached kernel loads (:func:`guard_numba_cache`)."""


class _BadEntry(Exception):
    """A data file of Numba's cache that :func:`guard_numba_cache` refuses."""


def guard_numba_cache(dispatcher):
    """``dispatcher`` (a ``@njit(cache=True)`` one: a kernel that runs by its dispatcher,
    where the checked entry is not available; see :meth:`fp8kit._kernels.codec.Kernel.
    build`) with its entries in Numba's disk cache checked before use, as fp8kit's own
    cache checks its files: each data file a record of :func:`_sealed` (its name and the
    SHA-256 of its content), read only where both match and the name is one of the
    function's; an entry that does not load (damaged, truncated, another function's,
    written by another Numba) is compiled again and rewritten, with a warning once.

    Why: Numba's cache checks nothing there.  A damaged data file made every later call
    raise LLVM's bitcode parser's error until the file was deleted by hand, and a file of
    another function under the name could be called.  Where Numba's cache internals are
    not those fp8kit knows, the dispatcher is returned as it is (a warning, once)."""
    cache = getattr(dispatcher, "_cache", None)
    cache_file = getattr(cache, "_cache_file", None)
    try:
        base = cache_file._data_name_pattern.split("{")[0]  # (its data files' names)
        open_for_write, data_path = cache_file._open_for_write, cache_file._data_path
        dump, load_overload, save_overload = (
            cache_file._dump,
            cache.load_overload,
            cache.save_overload,
        )
        load_index = cache_file._load_index
        cache_file._load_data, cache_file._save_data  # noqa: B018 - (the two replaced)
    except AttributeError as exc:
        _warn_once(
            "numba-cache",
            "fp8kit cannot check its kernels' entries in Numba's disk cache: Numba's cache "
            f"internals differ ({exc!r})",
        )
        return dispatcher

    def save_data(name, data):
        with open_for_write(data_path(name)) as f:  # (atomic: Numba's own)
            pickle.dump(_sealed(name, dump(data)), f, protocol=4)

    def load_data(name):
        if not name.startswith(base):  # (an index that names another function's file)
            raise _BadEntry(f"{name} is not an entry of {base}")
        with open(data_path(name), "rb") as f:
            record = pickle.load(f)
        if not isinstance(record, dict):  # (Numba's own entry, unchecked)
            raise _BadEntry(f"{name}: not written with fp8kit's check")
        return pickle.loads(_opened(record, name))

    def guarded_index():
        # (an index that does not load, or another function's entries in it: none of
        # them, so that a save writes a fresh index and never another function's file)
        try:
            entries = load_index()
        except Exception as exc:  # noqa: BLE001 - damaged: rewritten by the next save
            _warn_once(
                "numba-cache-entry",
                f"fp8kit compiles a cached kernel again ({dispatcher.py_func.__qualname__}): "
                f"its index in Numba's disk cache did not load ({exc!r})",
            )
            return {}
        return {k: v for k, v in entries.items() if isinstance(v, str) and v.startswith(base)}

    def quick_load(sig, target_context):
        # A load lowers nothing: Numba's refresh of its lowering and typing registries
        # (all of Numba's lowering, with numba.np.arraymath and the scipy.linalg that
        # imports: 0.15-0.2 s of a first call from the cache; the lean registries still
        # 0.04-0.1 s) is skipped for it, on the instance, under the compiler lock the
        # dispatcher holds.  The runtime the kernels call is set up first; a compile
        # afterwards (a kernel not in the cache, a user's @njit) refreshes as usual.
        from numba.core.runtime import rtsys

        rtsys.initialize(target_context)
        saved = vars(target_context).get("refresh")
        target_context.refresh = _no_refresh
        try:
            return load_overload(sig, target_context)
        finally:
            if saved is None:
                del target_context.refresh
            else:
                target_context.refresh = saved

    def guarded_load(sig, target_context):
        try:
            return quick_load(sig, target_context)
        except Exception as exc:  # noqa: BLE001 - any unreadable entry: compiled again
            _warn_once(
                "numba-cache-entry",
                f"fp8kit compiles a cached kernel again ({dispatcher.py_func.__qualname__}): "
                f"its entry in Numba's disk cache did not load ({exc!r})",
            )
            return None  # (Numba then compiles and saves, over the entry)

    def guarded_save(sig, data):
        try:
            save_overload(sig, data)
        except OSError as exc:  # (a read-only cache whose entry was refused: kept in memory)
            _warn_once(
                "numba-cache-save",
                f"fp8kit could not write a kernel to Numba's disk cache ({exc!r}): it is "
                "compiled again in each process",
            )

    cache_file._save_data, cache_file._load_data = save_data, load_data
    cache_file._load_index = guarded_index
    cache.load_overload, cache.save_overload = guarded_load, guarded_save
    return dispatcher


def _warn_once(what: str, message: str) -> None:
    if what not in _WARNED:
        _WARNED.add(what)
        import warnings

        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _digest(key: tuple, codegen, passes: tuple | None = None) -> str:
    what = (
        key,
        passes,
        source_version(),
        numba.__version__,
        llvmlite.__version__,
        sys.version_info[:2],
        config.OPT,
        _magic_tuple(codegen),
    )
    return hashlib.sha256(repr(what).encode()).hexdigest()[:32]


@functools.cache
def _magic_tuple(codegen) -> tuple:
    """Numba's ``codegen.magic_tuple()`` (the target's triple, CPU name and features),
    asked once: it calls LLVM, which waits for llvmlite's lock while the worker thread
    runs a pass pipeline (see :func:`_address`)."""
    return codegen.magic_tuple()


#: ABI sizes and alignments of LLVM types, by target data and type (see :func:`_quick_sizes`).
_SIZES: dict = {}


@contextlib.contextmanager
def _quick_sizes(context):
    """Numba's target ``context`` answering the ABI size and alignment of an LLVM type from
    :data:`_SIZES` after asking LLVM once.

    Why: llvmlite answers each by parsing a module of one global of the type (a kernel's
    lowering asks 60-125 times); every such call takes llvmlite's lock, which LLVM's work
    on the worker thread holds for 0.01-0.06 s at a time (:func:`_address`): measured,
    0.10 s of a first sweep's lowering waited on it.  The answers depend on the type and
    the target data alone.  The methods are replaced on the context instance for the
    compile (under Numba's compiler lock) and removed after it."""
    cls = type(context)

    def sized(what):
        plain = getattr(cls, what)

        def get(ty):
            key = (what, id(context.target_data), str(ty))
            try:
                return _SIZES[key]
            except KeyError:
                _SIZES[key] = value = plain(context, ty)
                return value

        return get

    context.get_abi_sizeof = sized("get_abi_sizeof")
    context.get_abi_alignment = sized("get_abi_alignment")
    try:
        yield
    finally:
        del context.get_abi_sizeof, context.get_abi_alignment


def _file_name(name: str) -> str:
    """The cache file of the native function ``name`` (``fp8kit_<kernel>_<digest>``): the
    kernel sources' version in it, so that entries of other versions can be pruned."""
    return f"{name}.{source_version():012x}.native"


#: Seconds after which a cache entry of another version of the kernel sources is pruned
#: (not at once: two checkouts sharing NUMBA_CACHE_DIR would delete each other's entries).
PRUNE_AGE = 3600.0


def _sealed(name: str, payload: bytes, **extra) -> dict:
    """A cache record: ``payload`` with the name it was written for and its SHA-256 (read
    back by :func:`_opened`); fp8kit's cache files and the guarded entries of Numba's
    (:func:`guard_numba_cache`) alike."""
    return {"name": name, "payload": payload, "sha256": hashlib.sha256(payload).hexdigest(),
            **extra}  # fmt: skip


def _opened(record, name: str) -> bytes:
    """The payload of ``record`` (:func:`_sealed`), written for ``name`` and intact; else
    ValueError."""
    payload = record["payload"]
    if record["name"] != name or record["sha256"] != hashlib.sha256(payload).hexdigest():
        raise ValueError(f"{name}: damaged, or written for another entry")
    return payload


def _load(name: str, folders: list[str], codegen):
    """``(library, symbol)`` of the native function ``name`` from the first cache file in
    ``folders`` that is intact: written for this name, its checksum right, its code
    loaded and its symbol found.  A file that fails is removed where it can be (it is
    compiled again); None where none is intact."""
    for folder in folders:
        path = os.path.join(folder, _file_name(name))
        try:
            with open(path, "rb") as f:
                record = pickle.load(f)
        except FileNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - truncated or foreign: compile instead
            _discard(path)
            continue
        try:
            library = codegen.unserialize_library(pickle.loads(_opened(record, name)))
            symbol = record["symbol"]
            if not library.get_pointer_to_function(symbol):
                raise ValueError(symbol)
            return library, symbol
        except Exception:  # noqa: BLE001 - swapped, corrupt or foreign: compile instead
            _discard(path)
    return None


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # (read-only: it is checked, and refused, again next time)


def _store(folder: str | None, name: str, library, symbol: str) -> None:
    """Write the object code of ``library`` (its function ``symbol``) as the cache file of
    ``name`` in ``folder``, atomically (a temporary file renamed; removed if anything
    fails), and prune entries of this kernel written for other kernel sources."""
    if folder is None:
        return
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        payload = pickle.dumps(library.serialize_using_object_code(), protocol=4)
        record = _sealed(name, payload, symbol=symbol)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fp8kit-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(record, f, protocol=4)
        os.replace(tmp, os.path.join(folder, _file_name(name)))  # (never half a file)
        tmp = None
    except Exception:  # noqa: BLE001 - read-only, full or failing: the next process compiles
        return
    finally:
        if tmp is not None:
            _discard(tmp)
    _prune(folder, name)


def _prune(folder: str, name: str) -> None:
    """Remove cache files of the kernel of ``name`` (same kernel name, another digest or
    sources) not written in the last :data:`PRUNE_AGE` seconds, and leftover temporary
    files as old."""
    import time

    kernel = name.rsplit("_", 1)[0] + "_"
    keep = _file_name(name)
    limit = time.time() - PRUNE_AGE
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        stale = entry.name.startswith(kernel) and entry.name.endswith(".native")
        stale = stale or (entry.name.startswith(".fp8kit-") and entry.name.endswith(".tmp"))
        try:
            if stale and entry.name != keep and entry.stat().st_mtime < limit:
                os.unlink(entry.path)
        except OSError:
            pass


def _module(context, name: str, emit: Callable, fnty=FUNCTION_TYPE) -> ir.Module:
    """The LLVM module of the function ``name`` of type ``fnty`` that ``emit`` writes."""
    module = context.create_module(name)
    fn = ir.Function(module, fnty, name=name)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    builder.ret(emit(context, builder, list(fn.args)))
    return module


def instruction_count(emit: Callable, fnty=FUNCTION_TYPE) -> int:
    """How many LLVM instructions ``emit`` writes (before optimisation; a function of type
    ``fnty``): the compile budget test's measure of a native kernel's size."""
    from numba.core.registry import cpu_target

    module = _module(cpu_target.target_context, "fp8kit_count", emit, fnty)
    return sum(len(block.instructions) for fn in module.functions for block in fn.blocks)


#: A short optimisation pipeline (llvmlite's pass names) for kernels written as vector
#: code, which leave LLVM no loop to vectorize: the stochastic kernels compiled 30-40%
#: faster with it than with the full pipeline (0.104 -> 0.065 s for float64 data to
#: float8_e8m0fnu) into code as fast (16M elements, one thread, seven kernels: the same or
#: up to 10% faster).
LEAN_PASSES = ("always_inliner", "sroa", "instruction_combine", "simplify_cfg")


@functools.cache
def _library_class(base: type, passes: tuple | None = None, function_passes=False) -> type:
    """Numba's code library class ``base``, optimising once: Numba runs function passes,
    a cheap module pipeline (to gather reference counts for pruning) and the full one; a
    native kernel has no reference counts, and the full pipeline alone gives the same
    machine code speed (encode float32 -> float8_e4m3fn, 256K elements: 28.1 against
    29.4 us) in 0.040 s where the three took 0.050 (measured).  ``passes``: llvmlite's
    names of the passes to run instead (:data:`LEAN_PASSES`), where it has them all.
    ``function_passes``: Numba's three, as Numba runs them, but the function passes run
    on the library's whole module when it is optimised, not on each module as it is
    added, so that all of LLVM's work is done by :func:`_machine_code` (on a worker
    thread: see :func:`_address`).

    This is fp8kit's one use of Numba's private pass-manager API: from Numba 0.62 on
    (llvmlite's new pass manager, pyproject's floor) ``_module_pass_manager()`` and
    ``_function_pass_manager()`` return ``(manager, pass builder)``.  Anything else falls
    back to Numba's own pipeline (a RuntimeWarning, once: the same results, compiled more
    slowly, on the calling thread)."""
    from llvmlite import binding as llvm

    adders = None
    if passes is not None and hasattr(llvm, "create_new_module_pass_manager"):
        manager = llvm.create_new_module_pass_manager()
        if all(hasattr(manager, f"add_{name}_pass") for name in passes):
            adders = [f"add_{name}_pass" for name in passes]
    warned = []

    class NativeLibrary(base):
        def __init__(self, codegen, name):
            from numba.core.codegen import CodeLibrary

            # (no empty module parsed for the others to be linked into, and each module
            # added kept as IR text: parsed and linked by the first thing that reads the
            # library's module, llvm_steps on the worker thread; a kernel's compile then
            # calls into LLVM on its own thread for nothing but the sizes of its types)
            CodeLibrary.__init__(self, codegen, name)
            self._linking_libraries = []
            self._shared_module = None
            self._texts, self._internal, self._module = [], [], None

        @property
        def _final_module(self):
            if self._texts:
                texts, self._texts = self._texts, []
                for text in texts:
                    module = llvm.parse_assembly(text)
                    module.verify()
                    if self._module is None:
                        module.name = cgutils.normalize_ir_text(self.name)
                        self._module = module
                    else:
                        self._module.link_in(module)
                for name in self._internal:
                    self._module.get_function(name).linkage = "internal"
            if self._module is None:  # (nothing added: an empty module, as Numba's)
                empty = self._codegen._create_empty_module(self.name)
                self._module = llvm.parse_assembly(str(empty))
                self._module.name = cgutils.normalize_ir_text(self.name)
            return self._module

        @_final_module.setter
        def _final_module(self, module):
            self._module = module

        def add_ir_module(self, ir_module):
            self._raise_if_finalized()
            self._texts.append(cgutils.normalize_ir_text(str(ir_module)))

        def add_llvm_module(self, ll_module):
            self._final_module.link_in(ll_module)

        def make_internal(self, name: str) -> None:
            """The function ``name`` internal to the library (when its module is read)."""
            self._internal.append(name)

        def _optimize_functions(self, ll_module):
            pass  # (see llvm_steps; the module's IR has the data layout: _module)

        def _optimize_final_module(self):
            for step in self.llvm_steps():
                step()

        def llvm_steps(self) -> list:
            """The library's optimisation as steps, each one call into LLVM, the pass
            managers built here: so that the worker thread that runs them
            (:func:`_machine_code`) needs Python's lock only between them, and lets a
            compile a call waits for go first there.  With ``function_passes``, Numba's
            three as Numba runs them (its function passes on each function defined, its
            cheap module pipeline, its full one)."""
            module, codegen = self._final_module, self._codegen
            try:
                if function_passes:
                    fpm, fpb = codegen._function_pass_manager()
                    cheap, cpb = codegen._module_pass_manager(
                        loop_vectorize=codegen._loopvect, slp_vectorize=False,
                        opt=codegen._opt_level, cost="cheap")  # fmt: skip
                    full, pb = codegen._module_pass_manager()
                    steps = [functools.partial(fpm.run, f, fpb)
                             for f in module.functions if not f.is_declaration]  # fmt: skip
                    return [*steps, functools.partial(cheap.run, module, cpb),
                            functools.partial(full.run, module, pb)]  # fmt: skip
                if adders is not None:
                    pb = codegen._pass_builder()
                    mpm = llvm.create_new_module_pass_manager()
                    for adder in adders:
                        getattr(mpm, adder)()
                else:
                    mpm, pb = codegen._module_pass_manager()  # (Numba >= 0.62's shape)
                return [functools.partial(mpm.run, module, pb)]
            except (AttributeError, TypeError, ValueError) as exc:
                if not warned:
                    warned.append(exc)
                    import warnings

                    warnings.warn(
                        f"fp8kit: Numba {numba.__version__}'s pass managers are not those "
                        f"fp8kit knows ({type(exc).__name__}: {exc}); its native kernels "
                        "are optimised by Numba's own pipeline instead (slower compiles)",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                return [functools.partial(base._optimize_functions, self, module),
                        functools.partial(base._optimize_final_module, self)]  # fmt: skip

    return NativeLibrary


def _compile(context, name: str, emit: Callable, fnty=FUNCTION_TYPE, passes=None, finalize=True):
    """A code library of the function ``name`` of type ``fnty`` that ``emit`` writes,
    compiled (under Numba's compiler lock; ``passes``: see :func:`_library_class`); not
    finalized where ``finalize`` is false (:func:`_machine_code` does LLVM's part)."""
    codegen = context.codegen()
    library = _library_class(codegen._library_class, passes)(codegen, name)
    library.enable_object_caching()
    library.add_ir_module(_module(context, name, emit, fnty))
    if finalize:
        library.finalize()
    return library


def assembly(emit: Callable) -> str:
    """The assembly of the native kernel ``emit`` writes, compiled afresh (for tests: code
    loaded from the disk cache has none to show)."""
    from numba.core.registry import cpu_target

    with global_compiler_lock:
        return _compile(cpu_target.target_context, "fp8kit_assembly", emit).get_asm_str()


def native_address(
    key: tuple, emit: Callable, fnty=FUNCTION_TYPE, passes=None, ahead=False
) -> int | None:
    """The address of the native kernel ``emit`` writes, compiled once per process (or
    loaded from the disk cache).

    ``emit(context, builder, args)`` writes the body of a function of type ``fnty``
    (``args``: its arguments) and returns its result (i32 for :data:`FUNCTION_TYPE`);
    ``key`` (a tuple of a name and plain values) names everything it depends on besides
    the kernel sources; ``passes``: the optimisation pipeline (:func:`_library_class`),
    part of the disk cache's key; ``ahead``: see :func:`_address`."""
    from numba.core.registry import cpu_target

    def front(digest, name):
        return _compile(cpu_target.target_context, name, emit, fnty, passes, finalize=False), name

    return _address(key, key[0], front, passes, ahead)


class _Job:
    """A compile between its front end and its machine code: the code ``library`` (not
    finalized, unless the route that compiled it finalized it), its function ``symbol``,
    its cache file's ``name`` and folder (``write``), and ``code``, the future of its
    machine code from a worker thread (:func:`_machine_code`); ``ahead``: started ahead
    and not yet asked for; ``pid``: the process it was started in (a fork's child
    compiles again)."""

    def __init__(self, library, symbol: str, name: str, write, ahead: bool):
        self.library, self.symbol, self.name, self.write = library, symbol, name, write
        self.pid, self.ahead, self.code = os.getpid(), ahead, None
        self.running = threading.Event()


#: Compiles started ahead (:func:`_address` with ``ahead``), by key, until asked for.
_AHEAD: dict = {}


def _address(key: tuple, label: str, front: Callable, passes=None, ahead=False) -> int | None:
    """The address of the function of ``key``: from this process's compiles, from the disk
    cache (file ``fp8kit_<label>_<digest>``), or compiled: ``front(digest, name)`` gives
    ``(library, symbol)``, the library not yet finalized, under Numba's compiler lock
    with the collector paused; LLVM's part of the compile (:func:`_machine_code`: its
    passes and machine code) then runs on a worker thread, and the code is loaded as a
    disk-cache entry is (:func:`_finalize_with`).

    Why a worker: LLVM's part holds no Python lock (llvmlite's calls release the GIL),
    so meanwhile the calling thread collects the compile's garbage (0.01-0.03 s) or, with
    ``ahead``, goes on to type and lower the next kernel a call needs: ``ahead`` returns
    None after the front end, and the first call for ``key`` later waits for the machine
    code (:meth:`fp8kit._kernels.codec.Kernel.prefetch`).  llvmlite runs one LLVM call at
    a time, so the overlap is with Python's part of the work only."""
    with BUILD_LOCK:
        if key in _BUILT:
            return _BUILT[key][1]
        job = _AHEAD.pop(key, None)
        if job is not None and job.pid == os.getpid():
            if ahead:
                _AHEAD[key] = job
                return None
            _URGENT.claim(job)  # (asked for: its steps no longer wait for others')
            return _finish(key, job)
        with global_compiler_lock:
            from numba.core.registry import cpu_target

            codegen = cpu_target.target_context.codegen()
            digest = _digest(key, codegen, passes)
            name = f"fp8kit_{label}_{digest}"
            write, read = _cache_dirs()
            loaded = _load(name, read, codegen)
            if loaded is not None:
                return _publish(key, *loaded, "cache_hits")
            with event.trigger_event(COMPILE_EVENT, data={"name": label}):
                with _no_gc():
                    library, symbol = front(digest, name)
                    job = _Job(library, symbol, name, write, ahead)
                    job.code = _submit(_machine_code, job)
                    try:
                        # (the worker in LLVM's passes, which need no Python lock, before
                        # the collection that ending _no_gc sets off runs here: its parse
                        # and pass managers need the lock between their calls; waited
                        # for only 5 ms, a first sweep took 0.505-0.518 s, not 0.48-0.49)
                        job.running.wait(0.05)
                    except BaseException:  # (an interrupt: nobody asks for this one)
                        if job.code.urgent:
                            _URGENT.done()
                        raise
                if not ahead:
                    return _finish(key, job)
        _AHEAD[key] = job
        return None


def _finish(key: tuple, job: _Job) -> int:
    """The address of ``job``'s function once its machine code is there, loaded (under
    Numba's compiler lock) and written to the disk cache.  Where the worker failed, the
    library is finalized by Numba's own route instead (a warning, once)."""
    try:
        try:
            code = job.code.result()
        except Exception as exc:  # noqa: BLE001 - Numba's or llvmlite's internals differ
            _warn_once(
                "worker",
                "fp8kit finishes its kernels' compiles by Numba's own route (about "
                f"0.01-0.1 s more on a first call): {exc!r}",
            )
            code = None
        with global_compiler_lock:
            _finalize_with(job.library, code)
        _store(job.write, job.name, job.library, job.symbol)
        return _publish(key, job.library, job.symbol, "cache_misses")
    finally:
        if job.code.urgent:  # (loading and storing call LLVM too: the others wait till here)
            _URGENT.done()


def _publish(key: tuple, library, symbol: str, outcome: str) -> int:
    address = library.get_pointer_to_function(symbol)
    stats = _STATS.setdefault(address, Stats())
    getattr(stats, outcome)[key] = getattr(stats, outcome).get(key, 0) + 1
    _BUILT[key] = (library, address, symbol)  # (the library keeps the code alive)
    return address


def _machine_code(job: _Job) -> bytes | None:
    """LLVM's part of ``job``'s compile: its library's module parsed, its passes, as steps
    (each one call into LLVM: :func:`_llvm_steps`), and its machine code as object code;
    None where the library is finalized already, or links others (Numba's own route
    finalizes those).

    It touches nothing of Numba's but the library's own module and the target machine
    Numba's code generator holds (as Numba's ``get_asm_str`` does), and llvmlite runs one
    LLVM call at a time: so it runs on a worker thread, without Numba's compiler lock,
    while the calling thread types and lowers.  A compile started ahead lets those a call
    is waiting for go first, between its steps (measured: an amax kernel's machine code
    0.1 s later behind the fused study kernel's otherwise)."""
    library = job.library
    try:
        if library._finalized or library._linking_libraries:  # (see _finalize_with)
            return None
        steps = _llvm_steps(library)  # (the module parsed, the pass managers built)
    finally:
        job.running.set()
    for step in steps:
        _URGENT.wait_turn(job)
        step()
    library._final_module.verify()
    _URGENT.wait_turn(job)
    return library._codegen._tm.emit_object(library._final_module)


class _Urgent:
    """How many compiles a call is waiting for have their LLVM part to do, or their code
    to load (see :func:`_machine_code`)."""

    def __init__(self):
        self._count = 0
        self._idle = threading.Condition()

    def started(self) -> None:
        with self._idle:
            self._count += 1

    def done(self) -> None:
        with self._idle:
            self._count -= 1
            self._idle.notify_all()

    def claim(self, job: _Job) -> None:
        """``job``, started ahead, asked for now: it waits between its steps no more."""
        with self._idle:
            job.ahead = False
            self._idle.notify_all()

    def wait_turn(self, job: _Job) -> None:
        """Until none is, where ``job`` was started ahead and is not asked for yet (a
        second at most: a turn, never a deadlock)."""
        if job.ahead:
            with self._idle:
                self._idle.wait_for(lambda: self._count <= 0 or not job.ahead, timeout=1.0)


_URGENT = _Urgent()


def _llvm_steps(library) -> list:
    """:meth:`llvm_steps` of fp8kit's library classes (:func:`_library_class`); for
    another library, its whole optimisation as one step."""
    steps = getattr(library, "llvm_steps", None)
    return steps() if steps is not None else [library._optimize_final_module]


def _finalize_with(library, code: bytes | None) -> None:
    """``library`` finalized (under Numba's compiler lock) with the machine code ``code``
    from :func:`_machine_code`, as a disk-cache entry is loaded: Numba's JIT takes it from
    the library's object cache instead of generating it (``code`` None, or Numba's
    internals not those fp8kit knows: the library finalized by Numba's own route, its
    passes run again)."""
    if library._finalized:
        return
    if (
        code is None
        or library._linking_libraries
        or not all(hasattr(library, a) for a in ("_set_compiled_object", "_finalize_final_module"))
    ):
        library.finalize()
        return
    library._set_compiled_object(code)
    library._finalize_final_module()
    library._compiled_object = code  # (the JIT took it: kept for the disk cache's copy)


#: The LLVM worker threads, ``(process id, executors)``: one for compiles a call waits
#: for, one for those started ahead (so that the latter, queued, never hold up the former).
_WORKERS: list = []


def _submit(fn: Callable, job: _Job, *args):
    """A future of ``fn(job, *args)`` run on an LLVM worker thread (see :data:`_WORKERS`;
    started at the first compile, a fork's child starts its own), or run here where no
    thread starts.  ``future.urgent``: counted in :data:`_URGENT` until :func:`_finish`."""
    from concurrent.futures import Future, ThreadPoolExecutor

    urgent = not job.ahead
    pid = os.getpid()
    if not _WORKERS or _WORKERS[0][0] != pid:
        _WORKERS[:] = [(pid, [ThreadPoolExecutor(1, thread_name_prefix=f"fp8kit-llvm-{k}")
                              for k in ("now", "ahead")])]  # fmt: skip
    if urgent:
        _URGENT.started()
    try:
        future = _WORKERS[0][1][0 if urgent else 1].submit(fn, job, *args)
    except RuntimeError:  # (no thread starts: the interpreter's shutdown, a thread limit)
        future = Future()
        try:
            future.set_result(fn(job, *args))
        except Exception as exc:  # noqa: BLE001 - handed over as the worker's would be
            future.set_exception(exc)
    future.urgent = urgent
    return future


#: Bit 32 of a checked kernel's result: an argument was refused (its index from bit 40).
REFUSED = 1 << 32


def kind_word(itemsize: int, writeable: bool) -> tuple[int, int]:
    """``(want, mask)``: what a checked kernel requires of an array argument's kind word
    (the checked entry passes ``item size | nd << 32 | flags << 40``): this item size, one
    dimension, C-contiguous and aligned, and writeable where it writes."""
    flags = BEHAVED | (WRITEABLE if writeable else 0)  # (numpy's flags: fp8kit._parallel)
    return itemsize | (1 << 32) | (flags << 40), 0xFFFFFFFF | (0xFF << 32) | (flags << 40)


def _has_xo(sig, bound: bool) -> bool:
    """Whether a kernel of signature ``sig`` has the codec kernels' arguments (``[prm,] x,
    lut, table, out, nchunks``), so that the x-and-out entry (:func:`xo_call`) can call it
    with x and out alone (lut and table empty, not read by such a kernel)."""
    args = sig.args[1:] if bound else sig.args
    return len(args) == 5 and all(isinstance(t, types.Array) for t in args[:4])


def _adapter_emitter(fndesc, sig, bound: bool, sizes):
    """The emitter of the C-callable adapter (:data:`CHECKED_TYPE`) of the Numba kernel
    lowered as ``fndesc``, of signature ``sig``: it checks each argument's kind against
    the signature (:func:`kind_word`; -1 for an int) and the lengths of the argument pairs
    ``sizes``, returning ``REFUSED | index << 40`` for the first that differs (the count
    of arguments: ``REFUSED | nargs << 40``), then calls the kernel by Numba's calling
    convention with its arrays as views of the pointers (:func:`fp8kit._kernels.bits.
    array_value`) and returns its result's low 32 bits (0 where it returns nothing).
    ``bound``: the kernel's first argument is the bound parameter array (else the bound
    array holds the address alone).  With ``nargs`` -3 (:func:`_has_xo` kernels), the
    x-and-out entry's call, which checked x and out itself.

    Written as IR, not as a Numba function: Numba's front end took 0.045-0.06 s a kernel
    on it (161 statements), the IR 0.002 s.  Kernels raise nothing (no runtime, no bounds
    checks), so the status of the call is not read."""
    from .bits import array_value

    first = 0 if bound else 1
    returns = sig.return_type not in (types.void, types.none)

    def emit(context, builder, args):
        ptrs, ints, kinds, nargs = args
        call_conv = context.call_conv
        fnty = call_conv.get_function_type(sig.return_type, sig.args)
        fn = cgutils.get_or_insert_function(builder.module, fnty, fndesc.llvm_func_name)

        def c(v):
            return ir.Constant(_I64, v)

        def at(array, k):
            return builder.load(builder.gep(array, [c(k)]))

        def refuse_if(cond, code):
            with builder.if_then(cond, likely=False):
                builder.ret(code)

        def call(arrays, scalars):  # ((pointer, length) of each array, each int's value)
            values, arrays, scalars = [], iter(arrays), iter(scalars)
            for ty in sig.args:
                if isinstance(ty, types.Array):
                    values.append(array_value(context, builder, ty, *next(arrays)))
                else:
                    values.append(context.cast(builder, next(scalars), types.int64, ty))
            got = call_conv.call_function(builder, fn, sig.return_type, sig.args, values)[1]
            for inst in builder.block.instructions:  # (called, not inlined: see below)
                if isinstance(inst, ir.CallInstr) and inst.callee is fn:
                    inst.attributes.add("noinline")
            if not returns:
                return c(0)
            return builder.and_(context.cast(builder, got, sig.return_type, types.int64),
                                c(0xFFFFFFFF))  # fmt: skip

        bound_array = []
        if bound:  # (its bytes: the address, then the parameters)
            itemsize = np.dtype(str(sig.args[0].dtype)).itemsize
            size = builder.sdiv(builder.sub(at(ints, 0), c(ADDRESS_BYTES)), c(itemsize))
            bound_array = [(at(ptrs, 0), size)]
        if _has_xo(sig, bound):  # ptrs and ints: [parameters, x, out]
            with builder.if_then(builder.icmp_signed("==", nargs, c(-3))):
                empty = (at(ptrs, 0), c(0))
                xo = [(at(ptrs, 1), at(ints, 1)), empty, empty, (at(ptrs, 2), at(ints, 2))]
                builder.ret(call(bound_array + xo, [c(1)]))  # (nchunks 1)
        count = len(sig.args) + first
        refuse_if(builder.icmp_signed("!=", nargs, c(count)),
                  builder.or_(c(REFUSED), builder.shl(nargs, c(40))))  # fmt: skip
        arrays, scalars = bound_array, []
        for k, ty in enumerate(sig.args, start=first):
            if isinstance(ty, types.Array) and k == 0:
                continue
            if isinstance(ty, types.Array):
                want, mask = kind_word(np.dtype(str(ty.dtype)).itemsize, ty.mutable)
                arrays = arrays + [(at(ptrs, k), at(ints, k))]
            else:
                want, mask = -1, -1
                scalars.append(at(ints, k))
            kind = builder.and_(at(kinds, k), c(mask))
            refuse_if(builder.icmp_signed("!=", kind, c(want)), c(REFUSED | k << 40))
        for a, b in sizes:
            refuse_if(builder.icmp_signed("!=", at(ints, a + first), at(ints, b + first)),
                      c(REFUSED | (b + first) << 40))  # fmt: skip
        return call(arrays, scalars)

    return emit


def numba_address(
    key: tuple, compile_kernel: Callable, sig, bound: bool, sizes=(), function_passes=True,
    ahead=False,
) -> int | None:  # fmt: skip
    """The address of the C-callable function (:data:`CHECKED_TYPE`) around a Numba
    kernel of signature ``sig``, compiled once per process (or loaded from the disk cache).

    ``compile_kernel(name)`` returns the kernel's Numba dispatcher compiled for ``sig``, its
    function's qualified name ending in ``name`` (see :func:`_compile_numba`); it is
    called only where the cache misses, so that a cached kernel loads without Numba's
    typing or lowering (0.01 s where Numba's own cache takes 0.4-0.75).  ``key`` names
    everything the kernel depends on besides the kernel sources; ``bound`` and ``sizes``:
    see :func:`_adapter_emitter`; ``function_passes``: see :func:`_compile_in_one_library`;
    ``ahead``: see :func:`_address`."""
    key = ("numba",) + tuple(key) + (str(sig), bound, tuple(sizes), bool(function_passes))

    def front(digest, name):
        from numba.core.registry import cpu_target

        with _quick_typing(), _quick_sizes(cpu_target.target_context):
            kernel = compile_kernel(f"fp8kit_{digest}")
            return _compile_numba(kernel, sig, bound, sizes, digest, function_passes)

    return _address(key, key[1], front, None, ahead)


def _compile_numba(kernel, sig, bound: bool, sizes, digest: str, function_passes=True) -> tuple:
    """``(library, symbol)``: the C-callable adapter (:func:`_adapter_emitter`) of the
    Numba kernel ``kernel`` (``(function, dispatcher)``: the Python function to compile and
    the uncompiled dispatcher whose options it compiles with), kernel and adapter compiled
    into one code library and finalized once (:func:`_compile_together`).  Where Numba's
    internals are not the ones that route reads, the dispatcher is compiled and the
    adapter, in a library of its own, calls it (:func:`_compile_apart`: the kernel
    optimised and turned into machine code twice), with a warning.

    The adapter's name, like the kernel's (``compile_kernel``'s argument in
    :func:`numba_address`), holds the cache key's ``digest``: Numba's symbol names hold a
    per-process counter, which two processes (or two adapters of one) can share, and code
    loaded later in a process calls a symbol of that name defined earlier (found: the
    bfloat16 kernel ran the float16 one's code)."""
    if _TOGETHER[0]:
        try:
            return _compile_together(kernel, sig, bound, sizes, digest, function_passes)
        except (AttributeError, ImportError, TypeError) as exc:  # other Numba internals
            _TOGETHER[0] = False
            _warn_once(
                "adapter",
                "fp8kit compiles each kernel's adapter apart (about 0.13 s more per "
                f"kernel on a first call with an empty cache): Numba's internals differ ({exc!r})",
            )
    return _compile_apart(kernel, sig, bound, sizes, digest)


_TOGETHER = [True]  # (False once the one-library route failed: see _compile_numba)


def _adapter_module(digest: str, fndesc, sig, bound: bool, sizes) -> tuple:
    """``(module, name)``: the LLVM module of the adapter (:func:`_adapter_emitter`) of
    the kernel lowered as ``fndesc``, and its symbol, named by the cache key's
    ``digest``."""
    from numba.core.registry import cpu_target

    name = f"fp8kit_adapter_{digest}"
    emit = _adapter_emitter(fndesc, sig, bound, sizes)
    return _module(cpu_target.target_context, name, emit, CHECKED_TYPE), name


def _compile_apart(kernel, sig, bound: bool, sizes, digest: str) -> tuple:
    """The kernel compiled by its dispatcher (Numba's public route) and its adapter in a
    library of its own that links the kernel's: both optimised and turned into machine
    code apart (and the dispatcher's CPython wrapper too), where Numba's compiler does
    not take a library to lower into."""
    func, disp = kernel
    disp.compile(sig)
    done = disp.overloads[sig.args]
    module, name = _adapter_module(digest, done.fndesc, sig, bound, sizes)
    library = done.library.codegen.create_library(name)
    library.enable_object_caching()
    library.add_ir_module(module)
    library.add_linking_library(done.library)
    library.finalize()
    return library, name


def _compile_together(kernel, sig, bound: bool, sizes, digest: str, function_passes=True) -> tuple:
    """The kernel lowered by Numba's compiler into a library (no CPython wrapper, no cfunc
    wrapper) and its adapter (:func:`_adapter_emitter`) added to it, calling the kernel's
    native function by Numba's calling convention.

    Numba's CPU target loads only the lowering the kernels use while they compile
    (:func:`_lean_registries`); a kernel that needs more compiles again with all of it
    (counted in :data:`LEAN_RETRIES`)."""
    from numba.core import errors

    if _LEAN[0]:
        try:
            with _lean_registries():
                return _compile_in_one_library(kernel, sig, bound, sizes, digest, lean=True,
                                               function_passes=function_passes)  # fmt: skip
        except (ImportError, AttributeError) as exc:  # other Numba internals
            _LEAN[0] = False
            _warn_once(
                "lean",
                "fp8kit loads all of Numba's lowering and runs all of its passes for its "
                "kernels (0.15-0.35 s more on a first call with an empty cache): Numba's "
                f"internals differ ({exc!r})",
            )
        except (errors.NumbaError, NotImplementedError) as exc:  # (no lowering: the latter)
            LEAN_RETRIES.append((kernel[0].__qualname__, type(exc).__name__))
    return _compile_in_one_library(kernel, sig, bound, sizes, digest,
                                   function_passes=function_passes)  # fmt: skip


_LEAN = [True]  # (False once the lean registries failed: see _compile_together)

#: Kernels typed again in SSA form, their typing without it not the same
#: (:func:`_lean_pipeline`): ``(qualified name, variable)``.  Empty for every kernel of
#: fp8kit's (a test checks).
SSA_RETRIES: list = []


#: Kernels whose compile with Numba's lean registries failed (then compiled with all of
#: them): ``(qualified name, error)``.  Empty for every kernel of fp8kit's (a test checks).
LEAN_RETRIES: list = []

#: Numba's modules of lowering that fp8kit's kernels use (their import registers it).
_LEAN_MODULES = (
    "numba.cpython.builtins", "numba.cpython.numbers", "numba.cpython.tupleobj",
    "numba.cpython.rangeobj", "numba.cpython.iterators", "numba.cpython.slicing",
    "numba.cpython.enumimpl", "numba.core.optional", "numba.np.arrayobj", "numba.np.npyimpl",
    "numba.cpython.mathimpl",
)  # fmt: skip


@contextlib.contextmanager
def _lean_registries():
    """Numba's CPU target context loading only the lowering of :data:`_LEAN_MODULES` (and
    what is imported already) while fp8kit's kernels compile.

    Why: a process's first compile loads all of Numba's lowering
    (``CPUContext.load_additional_registries``), and with it ``numba.np.arraymath``, which
    imports ``scipy.linalg`` where SciPy is installed to see whether BLAS is there: 0.09 s
    of a first call without SciPy, 0.15-0.25 s with it, for code no kernel runs.  The
    context's method is replaced on the instance for the compile (under Numba's compiler
    lock, so no other compile sees it) and removed after it: the next compile elsewhere in
    the process (a user's ``@njit``) loads the rest as usual."""
    from numba.core.registry import cpu_target

    target = cpu_target.target_context
    # Numba's post-lowering step links its runtime (NRT) into every library, initialized
    # first (0.016 s of a process's first compile; then linked into each kernel's module,
    # 0.02 s less on a first sweep without it), and otherwise only rewrites for fastmath
    # (no fp8kit kernel asks for it) and for 32-bit machines' 64-bit division: fp8kit's
    # kernels compile without the runtime (codec.Kernel._options) and call none of it, so
    # on 64-bit machines that step is skipped for their compiles
    lean_post = getattr(target, "is32bit", True) is False and not getattr(target, "fastmath", True)

    def load():
        from numba.core.runtime import rtsys

        if not lean_post:
            rtsys.initialize(target)  # (post_lowering links Numba's runtime)
        for name in _LEAN_MODULES:
            importlib.import_module(name)
        from numba.cpython import mathimpl
        from numba.np import npyimpl

        target.install_registry(mathimpl.registry)
        target.install_registry(npyimpl.registry)
        # (and whatever else it holds: once a full load has run, a user's @njit compiled
        # first, Numba registers an intrinsic's lowering into the context's first
        # registry, not the builtin one; without this every kernel compiled twice)
        for registry in list(target._registries):
            target.install_registry(registry)

    saved = vars(target).get("load_additional_registries")
    target.load_additional_registries = load
    if lean_post:
        target.post_lowering = _no_post_lowering
    try:
        yield
    finally:
        if lean_post:
            del target.post_lowering
        if saved is None:
            del target.load_additional_registries
        else:
            target.load_additional_registries = saved


def _no_post_lowering(module, library) -> None:
    """Numba's CPU post-lowering step for a kernel compiled without its runtime on a
    64-bit machine, no fastmath: nothing (see :func:`_lean_registries`)."""


@functools.cache
def _lean_passes() -> tuple:
    """fp8kit's two passes of :func:`_lean_pipeline` (registered once per process)."""
    from numba.core import ir_utils
    from numba.core.compiler_machinery import AnalysisPass, register_pass

    @register_pass(mutates_CFG=False, analysis_only=True)
    class CheckIR(AnalysisPass):
        """IRLegalization's checks without its ir.Del."""

        _name = "fp8kit_check_ir"

        def __init__(self):
            AnalysisPass.__init__(self)

        def run_pass(self, state):
            ir_utils.enforce_no_phis(state.func_ir)
            ir_utils.enforce_no_dels(state.func_ir)
            return False

    @register_pass(mutates_CFG=False, analysis_only=True)
    class OneTypeEach(AnalysisPass):
        """Raises :class:`_Retyped` where typing without SSA differs (:func:`_retyped`)."""

        _name = "fp8kit_one_type_each"

        def __init__(self):
            AnalysisPass.__init__(self)

        def run_pass(self, state):
            name = _retyped(state)
            if name is not None:
                raise _Retyped(name)
            return False

    return CheckIR, OneTypeEach


class _Retyped(Exception):
    """A kernel's typing without SSA differs from Numba's in SSA form (:func:`_retyped`)."""

    def __init__(self, name: str):
        super().__init__(f"variable {name!r} takes more than one type")
        self.name = name


@functools.cache
def _lean_pipeline(ssa: bool = False):
    """Numba's nopython pipeline less what an fp8kit kernel does not need (see
    :func:`_pipeline_for`): a :class:`numba.core.compiler.CompilerBase`, built from
    Numba's own list of passes (Numba's documented way to customise its compiler), so a
    pass Numba adds still runs.

    - ``ReconstructSSA`` (``ssa`` False; the compile's flags say so, see
      :func:`_compile_in_one_library`) gives each definition of a variable a name of its
      own, so that one variable may take several types: 0.02-0.025 s of the fused study
      kernel's compile, and its phis' removal 0.007 s.  Without it Numba types each
      variable once, as the unification of its definitions' types (as Numba did before
      0.50), which is the same typing wherever every use sees the type every definition
      reaching it gives (:func:`_retyped` checks, after type inference: else
      :class:`_Retyped`, and the kernel compiles again with this pass).  The same
      machine code for 113 kernels of every family (compared, docs/measurements.md).
    - ``InlineClosureLikes`` inlines closures (a ``make_function``); a flattened kernel
      has none: it only analysed (0.015 s of the stochastic kernel's 0.27 s compile).
    - ``NopythonRewrites`` fuses array expressions, which allocate: none in a kernel
      compiled without Numba's runtime (0.013 s).
    - ``IRLegalization`` also writes an ``ir.Del`` after each variable's last use, for
      the runtime's reference counts: without the runtime every Del lowers to a load and
      a store of zero and nothing else (491 of the stochastic kernel's 1,007 statements,
      0.03-0.04 s of its lowering).  Its checks stay.
    """
    from numba.core import compiler, typed_passes, untyped_passes
    from numba.core.compiler_machinery import PassManager

    check_ir, one_type_each = _lean_passes()
    skip = (untyped_passes.InlineClosureLikes, typed_passes.NopythonRewrites)

    class LeanCompiler(compiler.CompilerBase):
        def define_pipelines(self):
            full = compiler.DefaultPassBuilder.define_nopython_pipeline(self.state)
            pm = PassManager("fp8kit_nopython")
            for cls, what in full.passes:
                if cls is typed_passes.IRLegalization:
                    cls = check_ir
                if cls not in skip:
                    pm.add_pass(cls, what)
                if cls is typed_passes.NopythonTypeInference and not ssa:
                    pm.add_pass(one_type_each, "fp8kit: the typing SSA gives")
            pm.finalize()
            return [pm]

    return LeanCompiler


def _own_type(value, state):
    """The type Numba gives the value ``value`` on its own (None where it is not known
    here: treated as differing)."""
    from numba.core import ir, types
    from numba.core.typing.typeof import typeof

    if isinstance(value, ir.Var):
        got = state.typemap[value.name]
    elif isinstance(value, ir.Arg):
        got = state.args[value.index]
    elif isinstance(value, (ir.Const, ir.Global, ir.FreeVar)):
        got = typeof(value.value)
    elif isinstance(value, ir.Expr) and value in state.calltypes:
        got = state.calltypes[value].return_type
    elif isinstance(value, ir.Expr) and value.op == "build_tuple":  # (a helper's result)
        items = [types.unliteral(state.typemap[v.name]) for v in value.items]
        got = types.BaseTuple.from_types(items)
    else:
        return None
    return types.unliteral(got)


def _used(inst, ir):
    """The variables statement ``inst`` reads."""
    if not isinstance(inst, ir.Assign):
        return inst.list_vars()
    value = inst.value
    if isinstance(value, ir.Var):
        return [value]
    return value.list_vars() if isinstance(value, ir.Expr) else []


def _retyped(state):
    """The first variable of a function typed without SSA (:func:`_lean_pipeline`) that
    some use would see with another type in SSA form, or None.

    Without SSA a variable has one type, the unification of all its definitions'; in SSA
    form a use sees the unification of the definitions that reach it (a phi's, or the one
    definition's own).  The typings are the same where, at every use, the definitions
    reaching it unify to the variable's type: so a float32 value defined in one branch
    and a float64 one in another are fine where they only meet, and are not where the
    float32 one is used on its own (it would be computed in float64: found in the
    OpenVINO FakeConvert kernel, whose bits then differed).  Only variables with
    definitions of other types are looked at, by reaching definitions over the blocks
    (Numba itself renames a redefinition within a block)."""
    from numba.core import ir, types
    from numba.core.analysis import compute_cfg_from_blocks

    blocks = state.func_ir.blocks
    defs = {}
    for block in blocks.values():
        for inst in block.body:
            if isinstance(inst, ir.Assign):
                defs.setdefault(inst.target.name, []).append(inst)
    own = {}
    suspects = []
    for name, insts in defs.items():
        if len(insts) < 2:
            continue
        want = types.unliteral(state.typemap[name])
        for inst in insts:
            own[id(inst)] = _own_type(inst.value, state)
        if any(own[id(inst)] != want for inst in insts):
            suspects.append(name)
    if not suspects:
        return None
    cfg = compute_cfg_from_blocks(blocks)
    order = sorted(blocks)
    unify = state.typingctx.unify_types
    for name in suspects:
        want = types.unliteral(state.typemap[name])
        out = {label: frozenset() for label in order}
        changed = True
        while changed:  # (reaching definitions of ``name``)
            changed = False
            for label in order:
                cur = frozenset().union(*(out[p] for p, _ in cfg.predecessors(label)))
                for inst in blocks[label].body:
                    if isinstance(inst, ir.Assign) and inst.target.name == name:
                        cur = frozenset((id(inst),))
                if cur != out[label]:
                    out[label], changed = cur, True
        for label in order:
            cur = frozenset().union(*(out[p] for p, _ in cfg.predecessors(label)))
            for inst in blocks[label].body:
                used = _used(inst, ir)
                if cur and any(v.name == name for v in used):
                    tys = [own[i] for i in cur]
                    seen = None if None in tys else unify(*tys)
                    if seen is None or types.unliteral(seen) != want:
                        return name
                if isinstance(inst, ir.Assign) and inst.target.name == name:
                    cur = frozenset((id(inst),))
    return None


def _pipeline_for(func, flags, lean: bool):
    """The compiler class for ``func`` under ``flags``: :func:`_lean_pipeline` where
    ``lean`` and what it leaves out cannot matter (no Numba runtime, so nothing is
    reference counted or allocated; no nested function, so no closure to inline), else
    Numba's own."""
    from numba.core import compiler

    nested = any(isinstance(c, type(func.__code__)) for c in func.__code__.co_consts)
    if not lean or flags.nrt or nested:
        return compiler.Compiler
    return _lean_pipeline()


def _compile_in_one_library(
    kernel, sig, bound: bool, sizes, digest: str, lean=False, function_passes=True
):  # fmt: skip
    """See :func:`_compile_together`.  ``function_passes`` False: the library optimises
    as fp8kit's IR kernels' does (:func:`_library_class`: the full module pipeline alone,
    no function passes first, no cheap pipeline for reference counts), for kernels
    measured as fast that way (the stochastic kernel, the amax kernels: 0.01-0.03 s less
    each on a first call); the fused study kernel, for one, ran 8% slower."""
    from numba.core import compiler
    from numba.core.registry import cpu_target

    func, disp = kernel
    typing, target = cpu_target.typing_context, cpu_target.target_context
    typing.refresh()
    target.refresh()
    codegen = target.codegen()
    library = _library_class(codegen._library_class, None, bool(function_passes))(
        codegen, f"fp8kit_{digest}")  # fmt: skip
    library.enable_object_caching()
    flags = compiler.Flags()
    disp.targetdescr.options.parse_as_flags(flags, disp.targetoptions)
    flags = disp._compiler._customize_flags(flags)
    flags.no_cpython_wrapper = flags.no_cfunc_wrapper = flags.no_compile = True
    pipeline = _pipeline_for(func, flags, lean)
    flags.enable_ssa = pipeline is compiler.Compiler  # (see _lean_pipeline)
    try:
        kernel_done = compiler.compile_extra(typing, target, func, sig.args, sig.return_type,
                                             flags, {}, library=library,
                                             pipeline_class=pipeline)  # fmt: skip
    except _Retyped as exc:  # (raised after typing: nothing is in the library yet)
        SSA_RETRIES.append((func.__qualname__, exc.name))
        flags.enable_ssa = True
        kernel_done = compiler.compile_extra(typing, target, func, sig.args, sig.return_type,
                                             flags, {}, library=library,
                                             pipeline_class=_lean_pipeline(ssa=True))  # fmt: skip
    fndesc = kernel_done.fndesc
    # (the adapter in the kernel's library: one library to optimise, and LLVM may inline
    # the kernel into the adapter's call sites)
    module, name = _adapter_module(digest, fndesc, sig, bound, sizes)
    library.add_ir_module(module)
    # Only the adapter is called from outside: with the kernel internal, LLVM keeps no
    # exported copy of it.  The adapter's two calls of it (the full entry's and
    # x-and-out's) are marked noinline (_adapter_emitter): LLVM had inlined it into both,
    # so its machine code was generated twice; called instead, the stochastic kernel's
    # LLVM time 0.099-0.10 -> 0.085-0.088 s, the fused study kernel's 0.123 -> 0.101-0.109
    # s, as fast (a call per kernel call; 1,000-element calls, 256K and 4M elements, the
    # sweep, side by side).  (On the call sites, not the function: llvmlite 0.45's
    # add_function_attribute put it on the return value, which LLVM rejects.)
    library.make_internal(fndesc.llvm_func_name)
    return library, name  # (finalized by _address: LLVM's part on the worker thread)


def function_key(func) -> str:
    """A digest of what a Numba kernel function compiles to besides the kernel sources:
    its code object and the values it closes over (as Numba's own cache keys it; a
    function or dispatcher by its qualified name)."""
    digest = hashlib.sha256()
    _code_digest(func.__code__, digest)
    for cell in func.__closure__ or ():
        value = cell.cell_contents
        if isinstance(value, np.ndarray):
            digest.update(value.dtype.str.encode() + repr(value.shape).encode())
            digest.update(value.tobytes())
        elif callable(value) and hasattr(value, "__qualname__"):
            digest.update(f"{value.__module__}.{value.__qualname__}".encode())
        elif hasattr(value, "py_func"):  # a dispatcher
            digest.update(f"{value.py_func.__module__}.{value.py_func.__qualname__}".encode())
        else:
            digest.update(repr(value).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def _code_digest(code, digest) -> None:
    """Add what ``code`` compiles to (its bytecode, names and constants, nested code
    objects alike) to ``digest``.  Not ``marshal.dumps``: its output depends on reference
    counts (an object referenced once is written without a back-reference), which compiling
    the function changes; with Python 3.10 a kernel's key changed after its first compile
    and the next format compiled the same kernel again."""
    parts = (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
    for part in parts + (code.co_argcount, code.co_kwonlyargcount, code.co_flags):
        digest.update(repr(part).encode() + b"\0")
    for const in code.co_consts:
        if isinstance(const, type(code)):
            _code_digest(const, digest)
        elif isinstance(const, frozenset):  # (its order varies with the hash seed)
            digest.update(repr(sorted(map(repr, const))).encode() + b"\0")
        else:
            digest.update(f"{type(const).__name__}:{const!r}".encode() + b"\0")


class NumbaKernel(_NativeBase):
    """A kernel written in Numba, called through the checked entry (:func:`checked_entry`)
    as native code from the disk cache (:func:`numba_address`): ``build()`` returns a
    :class:`NativeCall` taking the kernel's arguments after its bound parameters."""

    def __init__(
        self, key: tuple, compile_kernel: Callable, sig, params, sizes=(), function_passes=True
    ):  # fmt: skip
        bound = params is not None
        super().__init__(key, compile_kernel, params if bound else np.zeros(0, np.uint8))
        self._sig, self._bound, self._sizes = sig, bound, tuple(sizes)
        self._function_passes = function_passes

    def prefetch(self) -> None:
        """Its compile started (:func:`_address` with ``ahead``); :meth:`build` finishes it."""
        if self._built is None:
            numba_address(self._key, self._emit, self._sig, self._bound, self._sizes,
                          self._function_passes, ahead=True)  # fmt: skip

    def build(self, parallel: bool = False):
        if self._built is None:
            address = numba_address(self._key, self._emit, self._sig, self._bound, self._sizes,
                                    self._function_passes)  # fmt: skip
            built = NativeCall(checked_entry(), bind(address, self._params))
            built.xo = self.xo and _has_xo(self._sig, self._bound)
            self._built = built
        return self._built


def numba_route() -> bool:
    """Whether Numba kernels can run through the checked entry here (else through their
    Numba dispatchers, as :func:`available`).  Asked before a Numba kernel compiles: the
    entries' compile is started then (:func:`_address` with ``ahead``), their machine code
    generated while the kernel is typed, not before (0.02-0.03 s of a first call)."""
    plan = _entry_plan()
    if plan is None or "checked" not in plan[2]:
        return False
    if _entries.cache_info().currsize == 0:
        native_address(plan[0], plan[1], ENTRY_TYPE, LEAN_PASSES, ahead=True)
    return True


_BUILT: dict = {}  # native functions by key: (code library, address, function name)


def native_count() -> int:
    """How many native functions this process has compiled or loaded from the disk cache."""
    return len(_BUILT)


def typed_pointer(builder, ptr, bits: int, offset=None):
    """``ptr`` (i8*) as a pointer to ``bits``-bit integers, advanced by ``offset`` of them."""
    typed = builder.bitcast(ptr, ir.IntType(bits).as_pointer())
    return typed if offset is None else builder.gep(typed, [offset])


def element_range(builder, args, in_bits: int, out_bits: int, stream_min: int | None = None):
    """``(x_at, out_at, n, stream)`` of a native kernel's arguments (:data:`FUNCTION_TYPE`):
    pointers to ``x[first]`` and ``out[first]`` as ``in_bits``- and ``out_bits``-bit
    integers, the count ``stop - first``, and whether to stream (an ``i1``: the arrays
    have ``stream_min`` elements or more; None where ``stream_min`` is: never).  A caller's
    ``out`` has a total of 0 (:data:`fp8kit._parallel.NO_STREAM`): never streamed."""
    x, out, first, stop, total = args[3:8]
    x_at = typed_pointer(builder, x, in_bits, first)
    out_at = typed_pointer(builder, out, out_bits, first)
    stream = None
    if stream_min is not None:
        stream = builder.icmp_signed(">=", total, ir.Constant(total.type, stream_min))
    return x_at, out_at, builder.sub(stop, first), stream


class GenericNativeKernel(_NativeBase):
    """A kernel whose compiled function is the generic native function ``emit`` writes
    (:data:`GENERIC_TYPE`), with the parameter array ``params``, called with the arguments
    of the kernel it replaces, in their order; only where :func:`available`.  ``passes``:
    its optimisation pipeline (None: Numba's full one; see :func:`_library_class`)."""

    passes = None

    def build(self, parallel: bool = False):
        if self._built is None:
            entry = generic_entry()
            address = native_address(self._key, self._emit, GENERIC_TYPE, self.passes)
            self._built = NativeCall(entry, bind(address, self._params))
        return self._built


def available() -> bool:
    """Whether generic native kernels can be called here (the entry reads this
    interpreter's array layout)."""
    return _array_layout() is not None
