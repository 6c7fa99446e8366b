"""A builtin function replaced in place: every reference to it calls the replacement.

``from time import sleep`` (and ``threading``'s ``_time = monotonic``, ``queue``'s ``time``)
holds the function object itself, taken before any patch of the module's attribute could
reach it. So the object is changed, not the attribute. A builtin function
(``builtin_function_or_method``) calls, through its method table entry (``m_ml``), a C
function with the object it is bound to (``m_self``, for ``time.sleep`` the ``time`` module)
as first argument. :func:`swap` points the entry at a copy whose C function is CPython's own
``PyObject_CallOneArg`` (for a function of one argument, ``METH_O``) or
``PyObject_CallObject`` (for one of none, ``METH_NOARGS``), and ``m_self`` at a callable
module: calling the builtin then calls the module, which calls the replacement, and what the
replacement raises is raised to the caller as from any function. Only this one object
changes; the shared method table, and every other object made from it, stay as they were.
time-machine patches wall time at the same level (it swaps the C functions in the shared
table).

:func:`swap` returns the original as a new builtin function object (the original entry,
bound to the original ``m_self``), to call what the builtin did before. Nothing is ever
swapped back: only worker processes (and the fork server they are forked from) swap, and
they end with it. Anything else (another interpreter, a build that lays objects out
differently, a builtin of another kind) is refused with ``None``.
"""

from __future__ import annotations

import ctypes
import sys
import types
from collections.abc import Callable
from typing import Any

__all__ = ["swap"]

_METH_NOARGS = 0x0004
_METH_O = 0x0008


class _MethodDef(ctypes.Structure):
    _fields_ = [
        ("ml_name", ctypes.c_char_p),
        ("ml_meth", ctypes.c_void_p),
        ("ml_flags", ctypes.c_int),
        ("ml_doc", ctypes.c_char_p),
    ]


class _CFunction(ctypes.Structure):
    """The head of CPython's ``PyCFunctionObject`` (stable from 3.8 to 3.13)."""

    _fields_ = [
        ("ob_refcnt", ctypes.c_ssize_t),
        ("ob_type", ctypes.c_void_p),
        ("m_ml", ctypes.POINTER(_MethodDef)),
        ("m_self", ctypes.c_void_p),
    ]


#: The method table entries made here, kept alive as long as the process.
_entries: list[_MethodDef] = []
#: The modules the swapped builtins are bound to now, kept alive the same way.
_bound: list[types.ModuleType] = []


def supported() -> bool:
    """Whether this interpreter lays out builtin functions as :func:`swap` expects."""
    gil = getattr(sys, "_is_gil_enabled", None)
    return (
        sys.implementation.name == "cpython"
        and not hasattr(sys, "getobjects")  # a Py_TRACE_REFS build: two more header fields
        and (gil is None or bool(gil()))  # a free-threaded build lays out its heads apart
    )


def swap(function: Any, replacement: Callable[..., Any]) -> Callable[..., Any] | None:
    """Make every call of the builtin ``function`` a call of ``replacement`` (same
    arguments); return the original behaviour as a new builtin, or ``None`` (nothing
    changed) when ``function`` is not a builtin of no argument or of one."""
    if not supported() or type(function) is not types.BuiltinFunctionType:
        return None
    head = _CFunction.from_address(id(function))
    entry = head.m_ml.contents
    name = (entry.ml_name or b"").decode()
    if name != function.__name__ or entry.ml_flags not in (_METH_NOARGS, _METH_O):
        return None
    api = ctypes.pythonapi
    new = api.PyCFunction_NewEx
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]
    original = new(ctypes.addressof(entry), function.__self__, None)
    call = "PyObject_CallOneArg" if entry.ml_flags == _METH_O else "PyObject_CallObject"
    copy = _MethodDef(entry.ml_name, ctypes.cast(getattr(api, call), ctypes.c_void_p).value,
                      entry.ml_flags, entry.ml_doc)
    bound = _callable_module(function, replacement)
    _entries.append(copy)
    _bound.append(bound)
    old_self = head.m_self
    api.Py_IncRef(ctypes.py_object(bound))
    head.m_self = id(bound)
    head.m_ml = ctypes.pointer(copy)
    if old_self:
        api.Py_DecRef(ctypes.c_void_p(old_self))  # the original copy holds its own reference
    return original  # type: ignore[no-any-return]


def _callable_module(function: Any, replacement: Callable[..., Any]) -> types.ModuleType:
    """A module that calls ``replacement`` when called. A module, so that the builtin still
    prints and pickles as the module's function (``<built-in function sleep>``)."""
    owner = getattr(function.__self__, "__name__", None) or "builtins"
    kind = type(f"_{function.__name__}_replaced", (types.ModuleType,),
                {"__call__": staticmethod(replacement)})
    module: types.ModuleType = kind(owner)
    return module
