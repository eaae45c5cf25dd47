"""Node labels and label selectors, checked as Ray checks them (ray._private.label_utils): a node's labels
(init(labels=), `phalanx start --labels`, cluster_utils' add_node(labels=)) and what a task or actor asks of
them (`label_selector=`, `fallback_strategy=`, NodeLabelSchedulingStrategy). The raylet matches them
(scheduler/cluster_view.h); every node also has `ray.io/node-id`, its id in hex."""
import re

# A label key: an optional DNS-subdomain prefix and "/", then a name of 1-63 [a-zA-Z0-9-_.], alphanumeric at
# both ends; a value: the same, or empty (Kubernetes' rules, which Ray follows).
_NAME = re.compile(r"^([a-zA-Z0-9]([a-zA-Z0-9._-]{0,61}[a-zA-Z0-9])?)$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SYSTEM_PREFIX = "ray.io/"
NODE_ID = "ray.io/node-id"

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = 0, 1, 2, 3


def check_key(key, what="label key"):
    if not isinstance(key, str):
        raise ValueError(f"Invalid {what} {key!r}: a str")
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        raise ValueError(f"Invalid {what} prefix `{prefix}`: a DNS subdomain of at most 253 characters, "
                         "lowercase alphanumerics, '-' and '.'")
    if not _NAME.match(name):
        raise ValueError(f"Invalid {what} name `{name}`: 1 to 63 characters of alphanumerics, '-', '_' and '.', "
                         "beginning and ending with an alphanumeric")


def check_value(key, value):
    if not isinstance(value, str):
        raise ValueError(f"Invalid label value for key `{key}`: {value!r} is not a str")
    if value and not _NAME.match(value):
        raise ValueError(f"Invalid label value `{value}` for key `{key}`: at most 63 characters of alphanumerics, "
                         "'-', '_' and '.', beginning and ending with an alphanumeric")


def check_node_labels(labels):
    """A node's labels, as given by a user: a dict of str to str; ray.io/node-id is the system's. Returns a copy."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise ValueError(f"labels must be a dict of str to str, got {type(labels).__name__}")
    for key, value in labels.items():
        check_key(key)
        if key == NODE_ID:
            raise ValueError(f"The label key `{NODE_ID}` is the system's: each node has its id under it")
        check_value(key, value)
    return dict(labels)


def raylet_flag(labels):
    """The raylet's --labels value."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _split_values(inner, key, text):
    values = [v.strip() for v in inner.split(",")]
    if not values or any(not v for v in values):
        raise ValueError(f"Invalid label selector value `{text}` for key `{key}`: in()/!in() want one or more "
                         "values, separated by commas")
    for v in values:
        check_value(key, v)
    return values


def parse_selector(selector, what="label_selector"):
    """A label selector (Ray's: {"key": "v" | "!v" | "in(a,b)" | "!in(a,b)"}) as constraints:
    [(key, op, [values])]."""
    if selector is None:
        return []
    if not isinstance(selector, dict):
        raise ValueError(f"{what} must be a dict of str to str, got {type(selector).__name__}")
    out = []
    for key, text in selector.items():
        check_key(key, "label selector key")
        if not isinstance(text, str):
            raise ValueError(f"Invalid label selector value for key `{key}`: {text!r} is not a str")
        t = text.strip()
        negate = t.startswith("!")
        if negate:
            t = t[1:].strip()
        if t.startswith("in(") and t.endswith(")"):
            out.append((key, NOT_IN if negate else IN, _split_values(t[3:-1], key, text)))
        else:
            check_value(key, t)
            out.append((key, NOT_IN if negate else IN, [t]))
    return out


def parse_fallbacks(fallback_strategy):
    """Ray's fallback_strategy: a list of {"label_selector": {...}}, tried in order."""
    if fallback_strategy is None:
        return []
    if not isinstance(fallback_strategy, list):
        raise ValueError(f"fallback_strategy must be a list of dicts, got {type(fallback_strategy).__name__}")
    out = []
    for i, option in enumerate(fallback_strategy):
        if not isinstance(option, dict) or set(option) - {"label_selector"}:
            raise ValueError(f"fallback_strategy[{i}] must be a dict with the key 'label_selector' only, got {option!r}")
        out.append(parse_selector(option.get("label_selector") or {}, f"fallback_strategy[{i}]"))
    return out


def matches(node_labels, constraints):
    """Whether a node with `node_labels` satisfies every constraint (as the raylet decides)."""
    for key, op, values in constraints:
        have = node_labels.get(key)
        if op == IN and have not in values:
            return False
        if op == NOT_IN and have is not None and have in values:
            return False
        if op == EXISTS and have is None:
            return False
        if op == DOES_NOT_EXIST and have is not None:
            return False
    return True


def head_labels(gcs_address):
    """The labels of the cluster's head (its first node to start) at `gcs_address`."""
    from phalanx._private.rpc_tables import alive_nodes
    nodes = alive_nodes(gcs_address)
    if not nodes:
        return {}
    return dict(min(nodes, key=lambda n: n["start_time_ms"]).get("labels") or {})
