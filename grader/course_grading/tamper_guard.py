"""The tamper guard: runs *inside* a learner's kernel while it is graded.

An answer cell runs in the same interpreter as the tests after it, so it can replace what the
tests rely on: ``checks.expect_close = lambda *a, **k: None``, ``torch.allclose``,
``builtins.all``, the name ``checks`` itself, or IPython's machinery that turns an exception
into an error output. The grader (``course_grading.execution.SandboxedExecute``) calls
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
expected values the kernel never holds (``course_grading.verdict``,
``course_grading.withhold``); the isolation around the kernel
(``course_grading.sandbox``) protects the course and the other submissions.
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


def _import_watched():
    """Import what the tests use, so that it is in the snapshot: torch and every course module
    except the grader's own; returns torch."""
    import torch

    import course_utils
    for info in pkgutil.iter_modules(course_utils.__path__):
        if info.name not in _SKIP_COURSE_MODULES:
            importlib.import_module(f"course_utils.{info.name}")
    return torch


def _watched_modules() -> dict:
    """``{name: module}`` of the modules watched: the listed ones, the guard, the course's own."""
    names = set(_WATCHED_MODULES) | {__name__} | {n for n in sys.modules
                                     if n.split(".")[0] == "course_utils"
                                     and n.split(".")[-1] not in _SKIP_COURSE_MODULES}
    return {n: sys.modules[n] for n in sorted(names) if n in sys.modules}


def _module_entries(name: str, module) -> dict:
    """What is watched of a module's namespace: everything for the course's modules, ``builtins``,
    ``math`` and the guard; callables and modules for the rest (torch's other globals change)."""
    everything = name in ("builtins", "math", __name__) or name.startswith("course_utils")
    return {k: v for k, v in vars(module).items() if _watch_value(v, everything) and not k.startswith("__")}


def _function_states(namespaces) -> dict:
    """``{id: (function, code, defaults, kwdefaults)}`` of every Python function in ``namespaces``
    (methods included): replacing a function's ``__code__`` changes it under every name."""
    functions = {}
    for _, _, entries in namespaces:
        for v in entries.values():
            f = getattr(v, "__func__", v)
            if isinstance(f, types.FunctionType):
                functions[id(f)] = (f, f.__code__, f.__defaults__, f.__kwdefaults__)
    return functions


def _pop_torch_modes() -> list[str]:
    """Take off every global ``TorchFunctionMode`` and ``TorchDispatchMode`` (none is the course's)."""
    found = []
    torch = sys.modules.get("torch")
    if torch is None:
        return found
    for kind, length, pop in (("TorchFunctionMode", "_len_torch_function_stack", "_pop_torch_function_stack"),
                              ("TorchDispatchMode", "_len_torch_dispatch_stack", "_pop_torch_dispatch_stack")):
        n = getattr(torch._C, length, lambda: 0)()
        if n:
            found.append(f"a global {kind} was set")
            for _ in range(n):
                getattr(torch._C, pop)()
    return found


class _Snapshot:
    """The kernel as it was before any learner code ran, and :meth:`check`, which puts it back.

    Each ``_restore_*`` method compares one kind of thing with the snapshot, puts back what was
    changed and returns what it found; :meth:`check` runs them in a fixed order.
    """

    def __init__(self, bindings: dict[str, tuple[str, str | None]]):
        torch = _import_watched()
        self.bindings = {name: _resolve(*where) for name, where in bindings.items()}
        self.modules = _watched_modules()
        # (label, object, {name: value watched})
        self.namespaces = [(n, mod, _module_entries(n, mod)) for n, mod in self.modules.items()]
        self.types = [(n, mod, type(mod)) for n, mod in self.modules.items()]
        shell = _shell()
        self.instances = []
        classes = [torch.Tensor, torch.nn.Module, _GuardEntry] + self._watch_shell_objects(shell)
        for cls in dict.fromkeys(classes):
            self.namespaces.append((cls.__qualname__, cls, dict(vars(cls))))
        self.functions = _function_states(self.namespaces)
        self.lists = []   # (label, where, list, items): where must still hold that very list, unchanged
        if shell is not None:
            self._watch_ipython_hooks(shell)
        self.trace = (sys.gettrace(), sys.getprofile())

    def _watch_shell_objects(self, shell) -> list[type]:
        """Watch the callables set on IPython's shell, kernel, session and display publisher, and
        their classes; returns the classes of their ``__mro__`` (watched by the caller)."""
        if shell is None:
            return []
        kernel = getattr(shell, "kernel", None)
        classes = []
        for obj in (shell, kernel, getattr(kernel, "session", None), getattr(shell, "display_pub", None)):
            if obj is not None:
                classes += [c for c in type(obj).__mro__ if c is not object]
                self.instances.append((obj, {k: v for k, v in vars(obj).items() if callable(v)}))
                self.types.append((type(obj).__name__, obj, type(obj)))
        return classes

    def _watch_ipython_hooks(self, shell) -> None:
        """Watch IPython's transformer lists, its event hooks and its custom exception handlers."""
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

    def check(self, names_read: list[str]) -> list[str]:
        """Compare the kernel with the snapshot, put back what was changed, and say what was."""
        found = self._restore_namespaces() + self._restore_code() + self._restore_sys_modules()
        found += self._restore_instances() + self._restore_classes()
        found += self._restore_event_callbacks() + self._restore_lists()
        shell = _shell()
        found += self._restore_custom_exc(shell) + _pop_torch_modes() + self._restore_trace()
        found += self._restore_bindings(shell, names_read)
        return found

    def _restore_namespaces(self) -> list[str]:
        """The watched names of modules and classes: each must still be the very object it was."""
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
        return found

    def _restore_code(self) -> list[str]:
        """The code and default arguments of every watched Python function."""
        found = []
        for f, code, defaults, kwdefaults in self.functions.values():
            if f.__code__ is not code or f.__defaults__ is not defaults or f.__kwdefaults__ is not kwdefaults:
                found.append(f"the code of {f.__module__}.{f.__qualname__} was changed")
                f.__code__, f.__defaults__, f.__kwdefaults__ = code, defaults, kwdefaults
        return found

    def _restore_sys_modules(self) -> list[str]:
        """``sys.modules``' entries of the watched modules."""
        found = []
        for n, mod in self.modules.items():
            if sys.modules.get(n) is not mod:
                found.append(f"sys.modules[{n!r}] was replaced")
                sys.modules[n] = mod
        return found

    def _restore_instances(self) -> list[str]:
        """IPython's objects: no method overridden on the instance, no callable attribute replaced."""
        found = []
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
        return found

    def _restore_classes(self) -> list[str]:
        """The class of every watched module and IPython object (``__class__`` can be reassigned)."""
        found = []
        for t_label, obj, t in self.types:
            if type(obj) is not t:
                found.append(f"the class of {t_label} was changed")
                try:
                    obj.__class__ = t
                except TypeError:
                    pass
        return found

    def _restore_event_callbacks(self) -> list[str]:
        """IPython's table of event callbacks: the same table, and no hooks for events it lacked."""
        found = []
        if not hasattr(self, "callbacks"):
            return found
        events, callbacks, known = self.callbacks
        if events.callbacks is not callbacks:
            found.append("IPython's event callbacks were replaced")
            events.callbacks = callbacks
        for extra in set(callbacks) - known:
            if callbacks.get(extra):
                found.append(f"IPython {extra} hooks were added")
                callbacks[extra] = []
        return found

    def _restore_lists(self) -> list[str]:
        """IPython's transformer and hook lists: where they were, with the items they had."""
        found = []
        for label, where, lst, items in self.lists:
            if where.get() is not lst or len(lst) != len(items) or any(a is not b for a, b in zip(lst, items)):
                found.append(f"{label} were changed")
                lst[:] = items
                where.set(lst)
        return found

    def _restore_custom_exc(self, shell) -> list[str]:
        """IPython's custom exception handler (it could turn a test's error into silence)."""
        if shell is None or not hasattr(self, "custom_exc"):
            return []
        exc, tb = self.custom_exc
        if not (shell.custom_exceptions != exc or vars(shell).get("CustomTB", _MISSING) is not tb):
            return []
        shell.custom_exceptions = exc
        if tb is _MISSING:
            vars(shell).pop("CustomTB", None)
        else:
            shell.CustomTB = tb
        return ["a custom exception handler was installed in IPython"]

    def _restore_trace(self) -> list[str]:
        """``sys.settrace`` and ``sys.setprofile`` (a trace function can rewrite a test's frames)."""
        if not (sys.gettrace(), sys.getprofile()) != self.trace:
            return []
        sys.settrace(self.trace[0])
        sys.setprofile(self.trace[1])
        return ["a trace or profile function was set"]

    def _restore_bindings(self, shell, names_read: list[str]) -> list[str]:
        """The names a test cell reads that the chapter's imports bound (``checks``, ``torch``)."""
        found = []
        if shell is None:
            return found
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

