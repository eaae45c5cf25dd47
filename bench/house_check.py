"""The shape of the house, measured (issue 37's "done when"): what a newcomer would trip over.

    .venv/bin/python bench/house_check.py            # the report
    .venv/bin/python bench/house_check.py --json out.json
    .venv/bin/python bench/house_check.py --check    # exit 1 while any limit below is not met

It reads the tree only (no build). What it counts:

- classes: member-function definitions of each C++ class, summed over every .cc file (a class, not a
  file, is what must stay readable); limit 800 lines;
- setters: `Set*` methods declared in scheduler/ headers that take a callback (std::function or an
  alias of one declared beside it): collaborators are to be given at construction; limit 0;
- upward includes: a file including a header of a folder above its own (core < gcs, worker <
  objectstore < collectives < scheduler < python); limit 0;
- Python import circles: modules of python/phalanx that import each other, directly or around a
  loop, counting imports inside functions too (they hide a circle, they do not break it); limit 0;
  and function-local imports, limit 20;
- structs of callbacks: a struct or class in a header with two or more `std::function` data
  members, the way parts used to be joined before interfaces given at construction; limit 0.
- sleeps in tests: `time.sleep(` calls in tests/python made by a test itself (in a `test_*`
  function, or at module level, not in a loop): each one a candidate for a wait on a condition.
  Sleeps in the code a test runs as a task or an actor (work that takes time), in helpers and in
  loops (polling a condition, pacing calls) are not counted.
  Not a limit, a count to bring down.
"""
import argparse
import ast
import collections
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMITS = {"class_lines": 800, "setters": 0, "callback_structs": 0, "upward_includes": 0, "import_cycles": 0, "local_imports": 20}
# Folders from the bottom layer up; a file may include its own layer's headers and those below.
LAYERS = {"core": 0, "gcs": 1, "worker": 1, "objectstore": 2, "collectives": 3, "scheduler": 4, "python": 5}
EXTENSIONS = {"phalanx._core"}  # compiled modules: imported, never importing back
_DEF = re.compile(r"^[A-Za-z_][\w:<>,\s\*&~]*?\b([A-Z]\w*)::(~?\w+)\s*\(")


def _sources(*patterns):
    for pattern in patterns:
        for f in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            rel = os.path.relpath(f, ROOT)
            if not rel.startswith(("build", ".venv", "third_party", "tests" + os.sep)):
                yield rel


def class_sizes():
    """{class: lines of member-function definitions over every .cc}, largest first."""
    sizes = collections.Counter()
    for rel in _sources("**/*.cc"):
        with open(os.path.join(ROOT, rel), errors="replace") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = _DEF.match(lines[i])
            if m and not lines[i].rstrip().endswith(";"):
                j = i
                while j < len(lines) and not lines[j].startswith("}"):
                    j += 1
                sizes[m.group(1)] += j - i + 1
                i = j + 1
            else:
                i += 1
    return dict(sizes.most_common())


def callback_setters():
    """['file:line: declaration'] of Set* methods in scheduler/ headers taking a callback."""
    found = []
    for rel in _sources("scheduler/*.h"):
        with open(os.path.join(ROOT, rel)) as f:
            text = f.read()
        aliases = set(re.findall(r"using\s+(\w+)\s*=\s*std::function", text))
        for n, line in enumerate(text.split("\n"), 1):
            m = re.match(r"\s+(?:virtual\s+)?void\s+(Set\w+)\s*\((.*)", line)
            if m and ("std::function" in m.group(2) or any(re.search(rf"\b{a}\b", m.group(2)) for a in aliases)):
                found.append(f"{rel}:{n}: {line.strip()}")
    return found


def callback_structs():
    """['file:line: struct Name (n callbacks)'] of structs or classes holding two or more std::function members."""
    found = []
    for rel in _sources(*(f"{top}/*.h" for top in LAYERS if top != "python")):
        with open(os.path.join(ROOT, rel), errors="replace") as f:
            lines = f.read().split("\n")
        stack = []  # [name, line, indent, callbacks]
        for n, line in enumerate(lines, 1):
            m = re.match(r"(\s*)(?:struct|class)\s+(\w+)\b[^;]*\{\s*$", line)
            if m:
                stack.append([m.group(2), n, m.group(1), 0])
                continue
            if stack and line.startswith(stack[-1][2] + "  std::function<"):  # a member, maybe over two lines
                stack[-1][3] += 1
            elif stack and re.match(rf"{stack[-1][2]}}};", line):
                name, start, _, count = stack.pop()
                if count >= 2:
                    found.append(f"{rel}:{start}: {name} ({count} callbacks)")
    return found


def upward_includes():
    """['file:line: #include ...'] of headers from a folder above the including file's."""
    found = []
    for rel in _sources("**/*.cc", "**/*.h"):
        top = rel.split(os.sep)[0]
        if top not in LAYERS:
            continue
        with open(os.path.join(ROOT, rel), errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = re.match(r'\s*#include\s+"(\w+)/', line)
                if m and m.group(1) in LAYERS and LAYERS[m.group(1)] > LAYERS[top]:
                    found.append(f"{rel}:{n}: {line.strip()}")
    return found


def _module_of(rel):
    mod = rel[len("python" + os.sep):-len(".py")].replace(os.sep, ".")
    return mod[:-len(".__init__")] if mod.endswith(".__init__") else mod


def python_imports():
    """({module: {modules it imports}}, [function-local imports as 'file:line: module'])."""
    files = {_module_of(rel): rel for rel in _sources("python/phalanx/**/*.py")}
    graph = {m: set() for m in files}
    local = []
    for mod, rel in files.items():
        with open(os.path.join(ROOT, rel)) as f:
            tree = ast.parse(f.read(), rel)
        package = mod if rel.endswith("__init__.py") else mod.rpartition(".")[0]
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                # `from pkg import mod` imports pkg.mod when that is a module.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files.keys() | EXTENSIONS else base
                           for a in node.names]
            targets = [t for t in targets if t.startswith("phalanx") and t not in EXTENSIONS]
            for t in targets:
                while t and t not in files:  # (a name inside a module: the module)
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
            if targets and id(node) not in top_level and not _guarded(tree, node):
                local.append(f"{rel}:{node.lineno}: {', '.join(sorted(set(targets)))}")
    return graph, local


def _guarded(tree, node):
    """Whether `node` sits at module level inside a try or an if (an optional import), not in a function."""
    for top in tree.body:
        if isinstance(top, (ast.Try, ast.If)) and any(n is node for n in ast.walk(top)):
            return True
    return False


def import_cycles(graph):
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(1000, 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


def test_sleeps():
    """['file:line'] of time.sleep( calls in tests/python made by a test itself (see the docstring)."""
    found = []
    for f in sorted(glob.glob(os.path.join(ROOT, "tests", "python", "**", "*.py"), recursive=True)):
        with open(f) as fh:
            try:
                tree = ast.parse(fh.read())
            except SyntaxError:
                continue
        rel = os.path.relpath(f, ROOT)

        def visit(node, fn, in_loop):
            for child in ast.iter_child_nodes(node):
                inner, loop = fn, in_loop
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    inner, loop = getattr(child, "name", "<lambda>"), False
                elif isinstance(child, ast.ClassDef):
                    inner, loop = "<class>", False
                elif isinstance(child, (ast.While, ast.For)):
                    loop = True
                if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                        and child.func.attr == "sleep" and isinstance(child.func.value, ast.Name)
                        and child.func.value.id == "time" and not in_loop
                        and (fn is None or fn.startswith("test_"))):
                    found.append(f"{rel}:{child.lineno}")
                visit(child, inner, loop)
        visit(tree, None, False)
    return sorted(found, key=lambda s: (s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])))


def measure():
    graph, local = python_imports()
    sizes = class_sizes()
    return {
        "big_classes": {c: n for c, n in sizes.items() if n > LIMITS["class_lines"]},
        "largest_classes": dict(list(sizes.items())[:8]),
        "setters": callback_setters(),
        "upward_includes": upward_includes(),
        "callback_structs": callback_structs(),
        "import_cycles": import_cycles(graph),
        "local_imports": local,
        "test_sleeps": test_sleeps(),
    }


def failures(m):
    out = []
    if m["big_classes"]:
        out.append(f"{len(m['big_classes'])} classes over {LIMITS['class_lines']} lines")
    if len(m["setters"]) > LIMITS["setters"]:
        out.append(f"{len(m['setters'])} callback setters in scheduler/")
    if len(m["callback_structs"]) > LIMITS["callback_structs"]:
        out.append(f"{len(m['callback_structs'])} structs of callbacks")
    if len(m["upward_includes"]) > LIMITS["upward_includes"]:
        out.append(f"{len(m['upward_includes'])} upward includes")
    if len(m["import_cycles"]) > LIMITS["import_cycles"]:
        out.append(f"{len(m['import_cycles'])} Python import circles")
    if len(m["local_imports"]) > LIMITS["local_imports"]:
        out.append(f"{len(m['local_imports'])} function-local imports (limit {LIMITS['local_imports']})")
    return out


def report(m):
    lines = ["classes, lines of member definitions over all files (limit %d):" % LIMITS["class_lines"]]
    lines += [f"  {c}: {n}" + ("  <- over" if n > LIMITS["class_lines"] else "") for c, n in m["largest_classes"].items()]
    lines.append(f"callback setters in scheduler/ headers: {len(m['setters'])}")
    lines += [f"  {s}" for s in m["setters"]]
    lines.append(f"structs of callbacks: {len(m['callback_structs'])}")
    lines += [f"  {s}" for s in m["callback_structs"]]
    lines.append(f"upward includes: {len(m['upward_includes'])}")
    lines += [f"  {s}" for s in m["upward_includes"]]
    lines.append(f"Python import circles: {len(m['import_cycles'])}")
    lines += [f"  {len(c)} modules: {', '.join(c)}" for c in m["import_cycles"]]
    lines.append(f"function-local imports: {len(m['local_imports'])} (limit {LIMITS['local_imports']})")
    lines.append(f"time.sleep calls in tests/python: {len(m['test_sleeps'])}")
    bad = failures(m)
    lines.append("limits: " + ("all met" if not bad else "not met: " + "; ".join(bad)))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="also write the measures here")
    p.add_argument("--check", action="store_true", help="exit 1 while a limit is not met")
    args = p.parse_args()
    m = measure()
    print(report(m))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(m, f, indent=1)
    return 1 if args.check and failures(m) else 0


if __name__ == "__main__":
    sys.exit(main())
