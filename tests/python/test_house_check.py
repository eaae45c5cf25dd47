"""bench/house_check.py finds what it claims to, on a small tree made here: a class over the limit
summed over two files, a callback setter, a struct of callbacks, an include that runs up, an import
circle hidden behind a function-local import, and sleeps in tests."""
import importlib.util
import os


def _load():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "house_check.py")
    spec = importlib.util.spec_from_file_location("house_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_it_finds_each_kind_of_defect(tmp_path, monkeypatch):
    hc = _load()
    body = "\n".join(["  x();"] * 450)
    _write(tmp_path, "scheduler/big_a.cc", f"void Big::A() {{\n{body}\n}}\n")
    _write(tmp_path, "scheduler/big_b.cc", f"void Big::B() {{\n{body}\n}}\n")  # 904 lines over two files
    _write(tmp_path, "scheduler/small.cc", "int Small::F() {\n  return 1;\n}\n")
    _write(tmp_path, "scheduler/setters.h",
           "class T {\n public:\n  using Handler = std::function<void()>;\n"
           "  void SetHandler(Handler h) { h_ = h; }\n  void SetCount(int n) { n_ = n; }\n};\n")
    _write(tmp_path, "objectstore/hooks.h",
           "struct Hooks {\n  std::function<void()> a;\n  std::function<void(int)>\n      b;\n  int n = 0;\n};\n"
           "struct One {\n  std::function<void()> only;\n};\n"
           "class Iface {\n public:\n  virtual void F(std::function<void()> done) = 0;\n"
           "  void G(int x,\n         std::function<void()> done);\n};\n")
    _write(tmp_path, "core/low.cc", '#include "scheduler/setters.h"\n#include "core/low.h"\n')
    _write(tmp_path, "python/phalanx/__init__.py", "")
    _write(tmp_path, "python/phalanx/a.py", "from phalanx import b\n")
    _write(tmp_path, "python/phalanx/b.py", "def f():\n    from phalanx.a import g\n")
    _write(tmp_path, "python/phalanx/c.py", "try:\n    import phalanx.a\nexcept ImportError:\n    pass\n")
    _write(tmp_path, "tests/python/test_x.py",
           "import time\ntime.sleep(1)\n# time.sleep(2)\n"
           "def work():\n    time.sleep(3)\n"  # (the work a task does: not counted)
           "def test_y():\n    work()\n    time.sleep(4)\n"
           "    while not done():\n        time.sleep(5)\n")  # (polling a condition: not counted)
    monkeypatch.setattr(hc, "ROOT", str(tmp_path))
    m = hc.measure()
    assert m["big_classes"] == {"Big": 904}
    assert [s.split(": ", 1)[1] for s in m["setters"]] == ["void SetHandler(Handler h) { h_ = h; }"]
    assert m["callback_structs"] == ["objectstore/hooks.h:1: Hooks (2 callbacks)"]  # (not One, not Iface's parameters)
    assert m["upward_includes"] == ['core/low.cc:1: #include "scheduler/setters.h"']
    assert m["import_cycles"] == [["phalanx.a", "phalanx.b"]]
    assert m["local_imports"] == ["python/phalanx/b.py:2: phalanx.a"]  # (c.py's guarded import is not one)
    assert m["test_sleeps"] == ["tests/python/test_x.py:2", "tests/python/test_x.py:8"]
    assert len(hc.failures(m)) == 5  # a class, a setter, a struct, an include, a circle (1 local import is under 20)


def test_the_tree_of_this_repository_is_measured():
    hc = _load()
    m = hc.measure()
    assert "TaskManager" in m["largest_classes"]  # (the parser reads this tree's classes)
    assert isinstance(m["import_cycles"], list) and m["test_sleeps"]
