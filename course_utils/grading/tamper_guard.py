"""The tamper guard: runs *inside* a learner's kernel while it is graded.

An answer cell runs in the same interpreter as the tests after it, so it can replace what the
tests rely on: ``checks.expect_close = lambda *a, **k: None``, ``torch.allclose``,
``builtins.all``, the name ``checks`` itself, or IPython's machinery that turns an exception
into an error output. The grader (``course_utils.grading.execution.SandboxedExecute``) calls
:func:`install` before the first cell, which imports the modules the tests use and takes a
snapshot of them, and :func:`check` before and after every test cell, which compares the
kernel with the snapshot, puts every replaced object back (so the tests run against the
originals) and returns what it found (so the grader flags the submission and gives the
exercise 0).

What it watches: every ``course_utils`` module, ``builtins``, ``math``, ``numpy``, the
``torch`` modules the tests call, ``torch.Tensor`` and ``nn.Module``, the Python functions
among them (their ``__code__`` too), ``sys.modules`` entries, the names the chapter's
imports bind in the notebook, IPython's input and AST transformers, custom exception
handlers, pre-run hooks and the methods that report errors, and ``sys.settrace``.

Limits (docs/grading.md): this is a flagging aid against the obvious ways, not a proof. Code that
runs in the kernel can reach the guard itself (a look-alike class under its name answers for it).
No grade rests on it: the verdict is the grader's, from the learner's values alone, against
expected values the kernel never holds (``course_utils.grading.verdict``,
``course_utils.grading.withhold``); the isolation around the kernel
(``course_utils.grading.sandbox``) protects the course and the other submissions.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sys
import types

_MISSING = object()
_WATCHED_MODULES = ("builtins", "math", "numpy", "torch", "torch.nn", "torch.nn.functional",
                    "torch.linalg", "torch.testing", "torch.special", "torch.overrides")
_SKIP_COURSE_MODULES = {"grading", "sandbox", "tamper_guard"}   # grader-side, never used by tests
_SHELL_METHODS = ("run_cell", "run_cell_async", "run_ast_nodes", "run_code", "transform_cell",
                  "showtraceback", "_showtraceback", "showsyntaxerror", "set_custom_exc")
_state: _Snapshot | None = None


def _resolve(module: str, attr: str | None):
    mod = importlib.import_module(module)
    if attr is None:
        return mod
    try:
        return importlib.import_module(f"{module}.{attr}")
    except ImportError:
        return getattr(mod, attr)


def _watch_value(value, everything: bool) -> bool:
    return everything or callable(value) or isinstance(value, types.ModuleType)


class _Snapshot:
    def __init__(self, bindings: dict[str, tuple[str, str | None]]):
        import torch  # noqa: F401 (the tests use it; importing it here puts it in the snapshot)

        import course_utils
        for info in pkgutil.iter_modules(course_utils.__path__):
            if info.name not in _SKIP_COURSE_MODULES:
                importlib.import_module(f"course_utils.{info.name}")
        self.bindings = {name: _resolve(*where) for name, where in bindings.items()}
        names = set(_WATCHED_MODULES) | {__name__} | {n for n in sys.modules
                                         if n.split(".")[0] == "course_utils"
                                         and n.split(".")[-1] not in _SKIP_COURSE_MODULES}
        self.modules = {n: sys.modules[n] for n in sorted(names) if n in sys.modules}
        self.namespaces = []      # (label, object, {name: value})
        for n, mod in self.modules.items():
            everything = n in ("builtins", "math", __name__) or n.startswith("course_utils")
            self.namespaces.append((n, mod, {k: v for k, v in vars(mod).items()
                                             if _watch_value(v, everything) and not k.startswith("__")}))
        self.types = [(n, mod, type(mod)) for n, mod in self.modules.items()]
        classes = [torch.Tensor, torch.nn.Module, _GuardEntry]
        shell = _shell()
        self.instances = []
        if shell is not None:
            kernel = getattr(shell, "kernel", None)
            watched = [shell, kernel, getattr(kernel, "session", None), getattr(shell, "display_pub", None)]
            for obj in watched:
                if obj is not None:
                    classes += [c for c in type(obj).__mro__ if c is not object]
                    self.instances.append((obj, {k: v for k, v in vars(obj).items() if callable(v)}))
                    self.types.append((type(obj).__name__, obj, type(obj)))
        for cls in dict.fromkeys(classes):
            self.namespaces.append((cls.__qualname__, cls, dict(vars(cls))))
        self.functions = {}
        for _, _, entries in self.namespaces:
            for v in entries.values():
                f = getattr(v, "__func__", v)
                if isinstance(f, types.FunctionType):
                    self.functions[id(f)] = (f, f.__code__, f.__defaults__, f.__kwdefaults__)
        self.lists = []   # (label, where, list, items): where must still hold that very list, unchanged
        if shell is not None:
            for name in ("input_transformers_cleanup", "input_transformers_post", "ast_transformers"):
                lst = getattr(shell, name, None)
                if isinstance(lst, list):
                    self.lists.append((f"IPython {name}", _Attr(shell, name), lst, tuple(lst)))
            callbacks = shell.events.callbacks
            for event in ("pre_execute", "pre_run_cell", "post_run_cell"):
                # a hook could re-tamper just before a test, or swallow its result (post_execute is
                # left out: matplotlib's inline backend adds its hook there)
                lst = callbacks.get(event)
                if isinstance(lst, list):
                    self.lists.append((f"IPython {event} hooks", _Item(callbacks, event), lst, tuple(lst)))
            self.callbacks = (shell.events, callbacks, frozenset(callbacks))
            self.custom_exc = (shell.custom_exceptions, vars(shell).get("CustomTB", _MISSING))
        self.trace = (sys.gettrace(), sys.getprofile())

    def check(self, names_read: list[str]) -> list[str]:
        found = []
        for label, obj, entries in self.namespaces:
            current = vars(obj)
            for k, v in entries.items():
                now = current.get(k, _MISSING)
                if now is not v and _torch_wrapper(now, v):
                    entries[k] = now          # torch wraps some functions itself when it loads dynamo
                elif now is not v:
                    found.append(f"{label}.{k} was replaced")
                    try:
                        setattr(obj, k, v)
                    except (AttributeError, TypeError):
                        pass
        for f, code, defaults, kwdefaults in self.functions.values():
            if f.__code__ is not code or f.__defaults__ is not defaults or f.__kwdefaults__ is not kwdefaults:
                found.append(f"the code of {f.__module__}.{f.__qualname__} was changed")
                f.__code__, f.__defaults__, f.__kwdefaults__ = code, defaults, kwdefaults
        for n, mod in self.modules.items():
            if sys.modules.get(n) is not mod:
                found.append(f"sys.modules[{n!r}] was replaced")
                sys.modules[n] = mod
        for obj, entries in self.instances:
            current = vars(obj)
            for k in list(current):
                if k not in entries and callable(current[k]) and callable(getattr(type(obj), k, None)):
                    found.append(f"{type(obj).__name__}.{k} was overridden on the instance")
                    del current[k]
            for k, v in entries.items():
                if current.get(k, _MISSING) is not v:
                    found.append(f"{type(obj).__name__}.{k} was replaced")
                    current[k] = v
        for t_label, obj, t in self.types:
            if type(obj) is not t:
                found.append(f"the class of {t_label} was changed")
                try:
                    obj.__class__ = t
                except TypeError:
                    pass
        if hasattr(self, "callbacks"):
            events, callbacks, known = self.callbacks
            if events.callbacks is not callbacks:
                found.append("IPython's event callbacks were replaced")
                events.callbacks = callbacks
            for extra in set(callbacks) - known:
                if callbacks.get(extra):
                    found.append(f"IPython {extra} hooks were added")
                    callbacks[extra] = []
        for label, where, lst, items in self.lists:
            if where.get() is not lst or len(lst) != len(items) or any(a is not b for a, b in zip(lst, items)):
                found.append(f"{label} were changed")
                lst[:] = items
                where.set(lst)
        shell = _shell()
        if shell is not None and hasattr(self, "custom_exc"):
            exc, tb = self.custom_exc
            if shell.custom_exceptions != exc or vars(shell).get("CustomTB", _MISSING) is not tb:
                found.append("a custom exception handler was installed in IPython")
                shell.custom_exceptions = exc
                if tb is _MISSING:
                    vars(shell).pop("CustomTB", None)
                else:
                    shell.CustomTB = tb
        torch = sys.modules.get("torch")
        if torch is not None:
            for kind, length, pop in (("TorchFunctionMode", "_len_torch_function_stack", "_pop_torch_function_stack"),
                                      ("TorchDispatchMode", "_len_torch_dispatch_stack", "_pop_torch_dispatch_stack")):
                n = getattr(torch._C, length, lambda: 0)()
                if n:
                    found.append(f"a global {kind} was set")
                    for _ in range(n):
                        getattr(torch._C, pop)()
        if (sys.gettrace(), sys.getprofile()) != self.trace:
            found.append("a trace or profile function was set")
            sys.settrace(self.trace[0])
            sys.setprofile(self.trace[1])
        if shell is not None:
            ns = shell.user_ns
            for name in names_read:
                want = self.bindings.get(name, _MISSING)
                if want is not _MISSING and ns.get(name, _MISSING) is not want:
                    found.append(f"the notebook's name {name!r} no longer refers to the course's {_label(want)}")
                    ns[name] = want
        return found


class _Attr:
    """An attribute of an object (a traitlet included), read and put back."""

    def __init__(self, obj, name):
        self.obj, self.name = obj, name

    def get(self):
        return getattr(self.obj, self.name, _MISSING)

    def set(self, value):
        setattr(self.obj, self.name, value)


class _Item(_Attr):
    """An entry of a dict, read and put back."""

    def get(self):
        return self.obj.get(self.name, _MISSING)

    def set(self, value):
        self.obj[self.name] = value


def _torch_wrapper(new, old) -> bool:
    """Whether ``new`` is torch's own wrapper of ``old`` (``torch._dynamo`` rewraps ``manual_seed``)."""
    if getattr(new, "__wrapped__", None) is not old:
        return False
    try:
        import inspect

        import torch
        return inspect.getfile(new).startswith(os.path.dirname(torch.__file__))
    except (TypeError, ImportError):
        return False


def _label(obj) -> str:
    return getattr(obj, "__name__", type(obj).__name__)


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


class _GuardEntry:
    """How the grader calls the guard: found through ``object.__subclasses__()`` (the first class
    of this name, made before any learner code ran), not through a name the notebook can rebind."""

    @staticmethod
    def install(bindings_json: str) -> str:
        return install(bindings_json)

    @staticmethod
    def check(names_read_json: str) -> str:
        return check(names_read_json)


def install(bindings_json: str) -> str:
    """Snapshot the kernel. ``bindings_json``: ``{name: [module, attr or null]}`` for the names
    the chapter's own imports bind (``{"checks": ["course_utils", "checks"]}``)."""
    global _state
    _state = _Snapshot({k: tuple(v) for k, v in json.loads(bindings_json).items()})
    for label, _, entries in _state.namespaces:   # the guard watches itself, its snapshot included
        if label == __name__:
            entries["_state"] = _state
    return json.dumps(["installed"])


def check(names_read_json: str) -> str:
    """Compare with the snapshot, restore, and return a JSON list of what had been changed."""
    if _state is None:
        return json.dumps(["the tamper guard was never installed"])
    return json.dumps(_state.check(json.loads(names_read_json)))

