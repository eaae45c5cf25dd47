"""Ray Core's public API, name by name (tests/python/ray_surface/manifest/, a module a page), against phalanx:
every name marked "has" is there (a test fails the day one goes), every one marked "missing" is still missing (so the
manifest is kept true when one is built), "refuses" stays under 5% of the names and says why, and the goal
(no name missing; every refused name there and raising NotImplementedError) is a strict xfail until met.
Resolution: "ray.a.b.c" through the longest proper prefix in MODULE_ALIASES, then attributes; "F(kw=)" a
keyword of F (the options of @remote on functions and classes from their option tables); "cli:WORDS" a
subcommand of `phalanx`; "runtime_env:FIELD" a field runtime_env accepts; "metric:NAME" a family on the
Prometheus page of a node of a cluster started for it (scraped once)."""
import argparse
import importlib
import inspect
import re

import pytest

from ray_surface.manifest import MODULE_ALIASES, NAMES

_KW = re.compile(r"^(?P<fn>[\w.]+)\((?P<kw>\w+)=\)$")


# Names there that do not yet work as Ray's (each: why). They count as missing.
_THERE_BUT_NOT_RAYS = {}


def _instance_attribute(cls, attr):
    """Whether instances of `cls` carry `attr` (a dataclass field, an annotation, or set in its code)."""
    import dataclasses
    if dataclasses.is_dataclass(cls) and attr in {f.name for f in dataclasses.fields(cls)}:
        return True
    if attr in getattr(cls, "__annotations__", {}):
        return True
    try:
        return re.search(rf"self\.{attr}\s*=", inspect.getsource(cls)) is not None
    except (OSError, TypeError):
        return False


_ABSENT = object()


def _object(dotted):
    """The object `dotted` names, or _ABSENT."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = MODULE_ALIASES.get(".".join(parts[:cut]))
        if module is None:
            continue
        try:
            obj = importlib.import_module(module)
        except ImportError:
            return _ABSENT
        for i, attr in enumerate(parts[cut:]):
            if inspect.isclass(obj) and not hasattr(obj, attr) and i == len(parts) - cut - 1 and \
                    _instance_attribute(obj, attr):
                return obj  # (an instance's attribute: the class stands for it)
            if not hasattr(obj, attr):
                try:  # a submodule not imported by its package
                    obj = importlib.import_module(f"{obj.__name__}.{attr}") if inspect.ismodule(obj) else _ABSENT
                except ImportError:
                    obj = _ABSENT
                if obj is _ABSENT:
                    return _ABSENT
            else:
                obj = getattr(obj, attr)
        return obj
    return _ABSENT


def _cli_commands():
    from phalanx import scripts
    found = set()

    def walk(ap, prefix):
        for action in ap._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action._name_parser_map.items():
                    found.add((prefix + " " + name).strip())
                    walk(sub, prefix + " " + name)
    walk(scripts.parser(), "")
    return found


_FAMILIES = []


def _exported_families():
    """The metric families a node's Prometheus page has (a cluster of its own, with one task run)."""
    if not _FAMILIES:
        import urllib.request

        import phalanx
        was_up = phalanx.is_initialized()
        if not was_up:
            phalanx.init(num_cpus=1)
        try:
            phalanx.get(phalanx.remote(lambda: 1).remote())
            node = phalanx.nodes()[0]
            url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
            with urllib.request.urlopen(url, timeout=10) as r:
                text = r.read().decode()
        finally:
            if not was_up:
                phalanx.shutdown()
        _FAMILIES.append({line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")})
    return _FAMILIES[0]


def _there(name, cli):
    if name.startswith("cli:"):
        return name[4:] in cli
    if name.startswith("runtime_env:"):
        from phalanx._private import runtime_env
        return name.split(":", 1)[1] in runtime_env.SUPPORTED
    if name.startswith("metric:"):
        return name.split(":", 1)[1] in _exported_families()
    m = _KW.match(name)
    if m:
        fn, kw = m.group("fn"), m.group("kw")
        if fn == "ray.remote":
            from phalanx import remote_function
            return kw in remote_function._OPTIONS
        if fn == "ray.actor.ActorClass.options":
            from phalanx import actor
            return kw in actor._ACTOR_OPTIONS
        if fn == "ray.init":
            from phalanx._private import api, init_options
            return kw in inspect.signature(api.init).parameters or kw in init_options.KNOWN
        obj = _object(fn)
        if obj is _ABSENT:
            return False
        try:
            return kw in inspect.signature(obj).parameters
        except (TypeError, ValueError):
            return False
    return name not in _THERE_BUT_NOT_RAYS and _object(name) is not _ABSENT


@pytest.fixture(scope="module")
def cli():
    return _cli_commands()


def test_the_manifest_is_well_formed():
    names = [n for n, _, _, _ in NAMES]
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]
    assert {s for _, _, s, _ in NAMES} <= {"has", "refuses", "missing"}
    assert len(NAMES) >= 600


def test_every_name_marked_has_is_there(cli):
    absent = [n for n, _, s, note in NAMES if s == "has" and not _there(n, cli)]
    assert not absent, f"marked 'has' but not there: {absent}"


def test_every_name_marked_missing_is_still_missing(cli):
    built = [n for n, _, s, _ in NAMES if s == "missing" and _there(n, cli)]
    assert not built, f"there now: mark them 'has' in manifest/<page>.py: {built}"


def test_refused_names_are_few_and_each_says_why():
    refused = [(n, note) for n, _, s, note in NAMES if s == "refuses"]
    assert len(refused) < 0.05 * len(NAMES), len(refused)
    assert all(note for _, note in refused), [n for n, note in refused if not note]


def _progress():
    counts = {}
    for _, page, status, _ in NAMES:
        counts.setdefault(page, {"has": 0, "missing": 0, "refuses": 0})[status] += 1
    return counts


@pytest.mark.xfail(strict=True, reason="issue 55: names of Ray's API still missing (see manifest/); "
                                       "remove this mark once none is")
def test_no_name_of_rays_api_is_missing(cli):
    missing = [n for n, _, s, _ in NAMES if s == "missing"]
    assert not missing, f"{len(missing)} of {len(NAMES)} missing: {_progress()}"
    for n, _, s, _ in NAMES:
        if s == "refuses" and not n.startswith(("cli:", "runtime_env:", "metric:")):
            assert _object(n) is not _ABSENT, f"{n} is refused but not there to say so"
