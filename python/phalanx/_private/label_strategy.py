"""Ray's NodeLabelSchedulingStrategy and its operators (In, NotIn, Exists, DoesNotExist), and what a task's
or actor's label options become for the raylet: (selector, fallbacks), each a list of (key, op, values)
(python/phalanx/_private/labels.py; scheduler/label_match.h). `hard` must all hold; with `soft`, the nodes
that also have those are tried first (as a first selector, `hard` alone its fallback)."""
from phalanx._private import labels as _labels


class _Operator:
    op = None

    def __init__(self, *values):
        name = type(self).__name__
        if self.op in (_labels.IN, _labels.NOT_IN) and not values:
            raise ValueError(f"The variadic parameter of the {name} operator must be a non-empty tuple: e.g. "
                             f"{name}('value1', 'value2').")
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise ValueError(f"Type of value in position {i} for the {name} operator must be str (e.g. "
                                 f"{name}('value1', 'value2')) but got {v!r} of type {type(v)}.")
        self.values = list(values)

    def _check(self, key):
        for v in self.values:
            _labels.check_value(key, v)
        return (key, self.op, list(self.values))

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(map(repr, self.values))})"


class In(_Operator):
    """The node's label is one of the values."""
    op = _labels.IN


class NotIn(_Operator):
    """The node has not the label, or it is none of the values."""
    op = _labels.NOT_IN


class Exists(_Operator):
    """The node has the label."""
    op = _labels.EXISTS

    def __init__(self):
        super().__init__()


class DoesNotExist(_Operator):
    """The node has not the label."""
    op = _labels.DOES_NOT_EXIST

    def __init__(self):
        super().__init__()


class NodeLabelSchedulingStrategy:
    """Ray's: run on a node whose labels satisfy every expression of `hard` ({key: In(...) | NotIn(...) |
    Exists() | DoesNotExist()}), preferring one that also satisfies `soft`."""

    def __init__(self, hard, *, soft=None):
        self._hard = self._constraints(hard, "hard")
        self._soft = self._constraints(soft, "soft")
        self.hard = hard or {}
        self.soft = soft or {}
        if not self.hard and not self.soft:
            raise ValueError("The `hard` and `soft` parameter of NodeLabelSchedulingStrategy cannot both be empty.")

    @staticmethod
    def _constraints(expressions, which):
        if expressions is None:
            return []
        if not isinstance(expressions, dict):
            raise ValueError(f"The {which} parameter must be a map (dict) but got type {type(expressions)}.")
        out = []
        for key, expr in expressions.items():
            if not isinstance(key, str):
                raise ValueError(f"The map key of the {which} parameter must be of type str but got {type(key)}.")
            _labels.check_key(key, "label key")
            if not isinstance(expr, _Operator):
                raise ValueError(f"The map value for key '{key}' of the {which} parameter must be one of the `In`, "
                                 f"`NotIn`, `Exists` or `DoesNotExist` operator but got {expr!r}.")
            out.append(expr._check(key))
        return out


def label_args(opts, strategy):
    """submit_task's `labels` for a task's or actor's options (label_selector=, fallback_strategy=) and its
    scheduling strategy: (selector, fallbacks), or None when it asks nothing of labels."""
    selector = _labels.parse_selector(opts.get("label_selector"))
    fallbacks = _labels.parse_fallbacks(opts.get("fallback_strategy"))
    if isinstance(strategy, NodeLabelSchedulingStrategy):
        if strategy._soft:
            fallbacks = [selector + strategy._hard] + fallbacks
            selector = selector + strategy._hard + strategy._soft
        else:
            selector = selector + strategy._hard
    return (selector, fallbacks) if selector or fallbacks else None
