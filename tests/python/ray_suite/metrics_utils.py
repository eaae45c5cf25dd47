"""The per-node Prometheus endpoint read through public API only, for the suite's metrics tests (Ray's own
use `ray._private.test_utils`' fetch_prometheus* and prometheus_client's parser; these are written here for
both targets, with a small parser of the Prometheus text format instead of the prometheus_client package).

    addresses = prometheus_addresses()            # ["host:port", ...] from ray.nodes()
    samples = fetch_prometheus(addresses)         # [Sample(name, labels, value), ...]
    result = scrape(addresses)                    # .samples, .descriptors (by sample name), .components
    wait_for_metric("ray_x_total", lambda s: s.labels.get("a") == "1")   # the matching samples, once any"""
import http.client
import re
import time
import urllib.request
from collections import namedtuple

import ray

Sample = namedtuple("Sample", "name labels value")
# A sample's metric family, from its `# TYPE` and `# HELP` lines (type "untyped" where there are none): the
# family of `x_bucket`, `x_sum` and `x_count` is the histogram `x`; a counter's family is named as its samples.
Descriptor = namedtuple("Descriptor", "name type documentation")

_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(.*)\})?\s*(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_FAMILY_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created", "_info")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the endpoints are the cluster's own


def _unescape(text):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def build_address(host, port):
    """Ray's helper of this name: "host:port" ("[host]:port" for an IPv6 host)."""
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def prometheus_addresses():
    """Each alive node's metrics endpoint, "host:port", as Ray's tests find it: ray.nodes()' NodeManagerAddress
    and MetricsExportPort (a node without a port is left out)."""
    return [build_address(n["NodeManagerAddress"], n["MetricsExportPort"]) for n in ray.nodes()
            if n.get("Alive", True) and n.get("MetricsExportPort")]


def parse_prometheus(text):
    """The Prometheus text format `text` as ([Sample], {sample name: Descriptor}); ValueError on a line that
    is not a sample, a comment or blank."""
    samples, descriptors = [], {}
    families = {}  # family name -> {"type": ..., "help": ...}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                current = parts[2]
                family = families.setdefault(current, {"type": "untyped", "help": ""})
                rest = parts[3] if len(parts) > 3 else ""
                if parts[1] == "TYPE":
                    family["type"] = rest.strip()
                else:
                    family["help"] = _unescape(rest)
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise ValueError(f"not a Prometheus sample: {line!r}")
        name, label_text, value = match.groups()
        labels, pos = {}, 0
        label_text = label_text or ""
        while label_text[pos:].strip():
            label = _LABEL.match(label_text, pos)
            if not label:
                raise ValueError(f"bad labels in Prometheus sample: {line!r}")
            labels[label.group(1)] = _unescape(label.group(2))
            pos = label.end()
        samples.append(Sample(name, labels, float(value)))
        if current is not None and any(name == current + s for s in _FAMILY_SUFFIXES):
            family = families[current]
            descriptors[name] = Descriptor(current, family["type"], family["help"])
        else:
            descriptors.setdefault(name, Descriptor(name, "untyped", ""))
    return samples, descriptors


def fetch_raw_prometheus(addresses, timeout=5):
    """(address, text of http://ADDRESS/metrics) for each address that answers; the others are left out (as
    Ray's helper of this name leaves out those that refuse the connection)."""
    for address in addresses:
        try:
            with _NO_PROXY.open(f"http://{address}/metrics", timeout=timeout) as response:
                yield address, response.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            continue


Scrape = namedtuple("Scrape", "samples descriptors components")
Scrape.__doc__ = """One read of some endpoints: samples ([Sample]), descriptors ({sample name: Descriptor}) and
components ({address: the set of the `Component` labels of its samples}: an empty set for an address that did
not answer), as Ray's test_utils.fetch_prometheus gives them."""


def scrape(addresses=None, timeout=5):
    """Reads each address (default: prometheus_addresses()) once: a Scrape."""
    addresses = prometheus_addresses() if addresses is None else list(addresses)
    samples, descriptors, components = [], {}, {address: set() for address in addresses}
    for address, text in fetch_raw_prometheus(addresses, timeout):
        got, described = parse_prometheus(text)
        samples += got
        descriptors.update(described)
        components[address].update(s.labels["Component"] for s in got if "Component" in s.labels)
    return Scrape(samples, descriptors, components)


def fetch_prometheus(addresses=None, timeout=5):
    """The samples of each address that answers (default: prometheus_addresses()): [Sample(name, labels,
    value)], labels a dict."""
    return scrape(addresses, timeout).samples


def wait_for_metric(name, predicate=None, timeout=30, addresses=None, retry_interval_s=0.5):
    """Reads the endpoints (default: prometheus_addresses(), asked again each time) until a sample named
    `name` (and for which predicate(sample) is true) is there; returns the matching samples, else raises
    RuntimeError after `timeout` s naming what was there."""
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        samples = fetch_prometheus(addresses)
        seen = [s for s in samples if s.name == name]
        found = [s for s in seen if predicate is None or predicate(s)]
        if found:
            return found
        if time.monotonic() >= deadline:
            names = sorted({s.name for s in samples})
            raise RuntimeError(f"no sample {name!r} matching in {timeout} s; samples of that name: {seen}; "
                               f"names there: {names}")
        time.sleep(retry_interval_s)


def wait_for_assertion(assertion_predicate, timeout=30, retry_interval_ms=1000, **kwargs):
    """Ray's helper of this name (ray._private.test_utils), written here: calls assertion_predicate(**kwargs)
    until it raises no AssertionError; after `timeout` s, raises its last AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            assertion_predicate(**kwargs)
            return
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(retry_interval_ms / 1000)
