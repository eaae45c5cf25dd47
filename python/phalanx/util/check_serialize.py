"""What keeps a value from being pickled (Ray's `ray.util.inspect_serializability`): tries the value, and
when it fails, walks what it holds (a function's globals and closure, an object's members) up to `depth`
levels, printing each step, and returns (serializable, {FailureTuple, ...}) naming the culprits."""
import inspect
from contextlib import contextmanager

import cloudpickle


class FailureTuple:
    """An object that fails to pickle: `obj`, the names leading to it (`path`; `name` is the last), and the
    object that holds it (`parent`)."""

    def __init__(self, obj, path, parent):
        self.obj = obj
        self.path = tuple(path)
        self.parent = parent

    @property
    def name(self):
        return self.path[-1] if self.path else None

    def __repr__(self):
        names = [str(p) if p is not None else "unknown" for p in self.path]
        return f"FailTuple({names[-1] if names else 'unknown'} [path={' -> '.join(names)}, obj={self.obj}, " \
               f"parent={self.parent}])"


class _Printer:
    def __init__(self, file):
        self.level = 0
        self.file = file

    @contextmanager
    def indent(self):
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def print(self, msg):
        print("    " * self.level + msg, file=self.file)


def inspect_serializability(base_obj, name=None, depth=3, print_file=None):
    """(True, set()) when `base_obj` pickles; else (False, the FailureTuples found), printing the search to
    `print_file` (default stdout)."""
    printer = _Printer(print_file)
    title = f"Checking Serializability of {base_obj}"
    printer.print("=" * min(len(title), 80))
    printer.print(title)
    printer.print("=" * min(len(title), 80))
    failures = set()
    ok = _inspect(base_obj, name, depth, None, failures, printer, (name,) if name is not None else ())
    if not ok:
        printer.print("=" * min(len(title), 80))
        culprits = "\n".join(str(f) for f in failures)
        printer.print(f"Variable:\n\n\t{culprits}\n\nwas found to be non-serializable. There may be multiple other "
                      "undetected variables that were non-serializable. Consider either removing the "
                      "instantiation/imports of these variables or moving the instantiation into the scope of "
                      "the function/class.")
    printer.print("=" * min(len(title), 80))
    return ok, failures


def _pickles(obj):
    try:
        cloudpickle.dumps(obj)
        return True, None
    except Exception as e:  # noqa: BLE001 - anything pickling raises is the answer
        return False, e


def _inspect(obj, name, depth, parent, failures, printer, path):
    """Whether `obj` pickles; if not, adds the culprits found below it (or itself) to `failures`."""
    if parent is not None:
        printer.print(f"Serializing '{name}' {obj}...")
    ok, error = _pickles(obj)
    if ok:
        return True
    printer.print(f"!!! FAIL serialization: {error}")
    before = len(failures)
    if depth > 0:
        with printer.indent():
            for child_name, child in _held(obj, printer):
                if not _inspect(child, child_name, depth - 1, obj, failures, printer, path + (child_name,)):
                    break  # (the first culprit found, as Ray's)
    if len(failures) == before:  # nothing below it fails alone: it is the culprit
        failures.add(FailureTuple(obj, path, parent))
    return False


def _held(obj, printer):
    """(name, value) of what `obj` refers to: a function's globals and closure, an object's members."""
    if inspect.isfunction(obj):
        closure = inspect.getclosurevars(obj)
        held = list(closure.globals.items()) + list(closure.nonlocals.items())
        if held:
            printer.print(f"Detected {len(closure.globals)} global variables and {len(closure.nonlocals)} "
                          "nonlocal variables. Checking serializability...")
        return held
    try:
        members = inspect.getmembers(obj)
    except Exception:  # noqa: BLE001 - an object whose attributes raise: nothing to walk
        return []
    return [(n, v) for n, v in members if not (n.startswith("__") and n.endswith("__")) and not inspect.isbuiltin(v)]


__all__ = ["FailureTuple", "inspect_serializability"]
