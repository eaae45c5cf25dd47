"""The nodes of a call graph, Ray's DAG API: `actor.method.bind(...)` makes
a ClassMethodNode, `with InputNode() as inp:` the graph's input,
`MultiOutputNode([...])` several outputs. A graph runs once through
ordinary calls (`dag.execute(x)`: ObjectRefs) or is compiled
(`dag.experimental_compile()`: compiled.py) to run many times on channels
opened once."""

import itertools

from phalanx.dag.compiled import CompiledDAG
from phalanx.dag.plan import input_part, topological

_ids = itertools.count()


def _nodes_in(value):
    """The DAGNodes in a bound argument: the value itself, or those nested in its lists, tuples, sets and
    dicts (Ray's graphs scan containers too)."""
    if isinstance(value, DAGNode):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [n for v in value for n in _nodes_in(v)]
    return []


def _indent(text):
    return "    " + text.replace("\n", "\n    ")


def _format(value):
    """How a bound value prints in a node's str() (Ray's layout: nested dicts and lists, keys named)."""
    if isinstance(value, DAGNode):
        return str(value)
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{" + "".join("\n" + _indent(f"{k}: {_format(v)}") for k, v in value.items()) + "\n}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        return "[" + "".join("\n" + _indent(_format(v) + ",") for v in value) + "\n]"
    return repr(value)


class DAGNode:
    """A node of a call graph: what it calls and the arguments it is bound to
    (constants, the InputNode or its parts, other nodes). `_kind` says which
    node it is to the planner (plan.py): "input", "input_part", "method",
    "task" or "outputs"."""
    _kind = None

    def __init__(self, args=(), kwargs=None):
        self._id = next(_ids)
        self._bound_args = tuple(args)
        self._bound_kwargs = dict(kwargs or {})

    def _upstream(self):
        """The nodes this one's arguments are (or hold in lists, tuples, dicts), in order."""
        return [n for a in itertools.chain(self._bound_args, self._bound_kwargs.values()) for n in _nodes_in(a)]

    def __getattr__(self, name):
        # Ray's words for the calls a node does not take.
        if name == "bind":
            raise AttributeError(f".bind() cannot be used again on {type(self)}")
        if name == "remote":
            raise AttributeError(f".remote() cannot be used on {type(self)}. To execute the task graph for this "
                                 "node, use .execute().")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __reduce__(self):
        # As Ray's: a node is not pickled (it would be captured by a closure unawares).
        raise ValueError(f"DAGNode cannot be serialized. DAGNode: {self}")

    def _body_str(self):
        return type(self).__name__

    def __str__(self):
        return (f"({type(self).__name__}, {self.get_stable_uuid()})(\n" + _indent(f"body={self._body_str()}") + "\n"
                + _indent("args=" + _format(list(self._bound_args))) + "\n"
                + _indent("kwargs=" + _format(self._bound_kwargs)) + "\n"
                + _indent("options=" + _format(self.get_options())) + "\n)")

    # Ray's accessors of a node (DAGNode.get_args, get_kwargs, get_options, get_stable_uuid).
    def get_args(self):
        return self._bound_args

    def get_kwargs(self):
        return dict(self._bound_kwargs)

    def get_options(self):
        """The options given to what this node calls (.options(...) before .bind()), or {}."""
        return {}

    def get_stable_uuid(self):
        return f"{self._id:032x}"

    def execute(self, *args, **kwargs):
        """Runs the graph once with ordinary actor calls: the output's
        ObjectRef (a list of them for a MultiOutputNode)."""
        order = topological(self)
        inputs = [n for n in order if n._kind == "input"]
        # (Ray's checks, Ray's words)
        assert len(inputs) <= 1, "Each DAG should only have one unique InputNode"
        for inp in inputs:
            assert inp._in_context_manager, ("InputNode is a singleton instance that should be only used in "
                                             "context manager (with InputNode() as inp: ...)")
        done = {}
        for node in order:
            done[node._id] = node._run_once(done, args, kwargs)
        return done[self._id]

    def experimental_compile(self, _max_inflight_executions=None, _submit_timeout=None, _buffer_size_bytes=None,
                             _default_communicator=None, _overlap_gpu_communication=None, **unknown):
        """Compiles the graph (Ray's Compiled Graphs): each actor's part runs
        in a loop pinned on its channels until `teardown()`. Returns a
        CompiledDAG whose `execute(*args)` gives a CompiledDAGRef."""
        if unknown:
            raise TypeError(f"experimental_compile() got unknown options: {', '.join(sorted(unknown))} (it takes "
                            "_max_inflight_executions, _submit_timeout, _buffer_size_bytes)")
        order = topological(self)
        used = {n._key for n in order if n._kind == "input_part"}
        for inp in (n for n in order if n._kind == "input"):
            keys = inp._attribute_keys
            unused = [k for k in keys if k not in used]
            if unused:  # (Ray's check and words)
                raise ValueError(f"Compiled Graph expects input to be accessed using all of attributes "
                                 f"{', '.join(map(str, keys))}, but {', '.join(map(str, unused))} "
                                 f"{'is' if len(unused) == 1 else 'are'} unused. Ensure all input attributes are "
                                 "used and contribute to the computation of the Compiled Graph output.")
        return CompiledDAG(self, max_inflight=_max_inflight_executions, submit_timeout=_submit_timeout)

    def _run_once(self, done, args, kwargs):
        raise NotImplementedError

    def _resolve(self, value, done, args, kwargs):
        if isinstance(value, DAGNode):
            if value._kind != "input":
                return done[value._id]
            # Ray's uncompiled InputNode: the one positional argument, else all of them (DAGInputData).
            return args[0] if len(args) == 1 and not kwargs else DAGInputData(*args, **kwargs)
        if isinstance(value, (list, tuple, set, frozenset)) and _nodes_in(value):
            return type(value)(self._resolve(v, done, args, kwargs) for v in value)
        if isinstance(value, dict) and _nodes_in(value):
            return {k: self._resolve(v, done, args, kwargs) for k, v in value.items()}
        return value

    def _resolved(self, done, args, kwargs):
        pos = [self._resolve(a, done, args, kwargs) for a in self._bound_args]
        kw = {k: self._resolve(v, done, args, kwargs) for k, v in self._bound_kwargs.items()}
        return pos, kw


class DAGInputData:
    """Ray's DAGInputData: what execute(*args, **kwargs) was given (`.args`, `.kwargs`; data[i] is a
    positional argument, data["name"] a keyword one)."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def __getitem__(self, key):
        return self.args[key] if isinstance(key, int) else self.kwargs[key]


class InputNode(DAGNode):
    """The graph's input: what `execute(*args, **kwargs)` is given. With one
    positional argument the node is that value; `inp[i]` is the i-th
    positional argument, `inp.name` (or `inp["name"]`) a keyword argument.
    Used as a context manager, as in Ray: `with InputNode() as inp: ...`."""
    _kind = "input"

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise ValueError("InputNode should not take any args or kwargs.")
        super().__init__()
        self._in_context_manager = False
        self._attribute_keys = []  # the keys of inp[key] / inp.key, in the order made (compile checks each is used)

    def __enter__(self):
        self._in_context_manager = True
        return self

    def __exit__(self, *exc):
        return False

    def __getitem__(self, key):
        assert isinstance(key, (str, int)), ("Please only use int index or str as first-level key to access fields "
                                             f"of the input, got {key!r}")
        return InputAttributeNode(self, key, "__getitem__")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return InputAttributeNode(self, name, "__getattr__")

    def _run_once(self, done, args, kwargs):
        return None  # (read where it is an argument: _resolve)


class InputAttributeNode(DAGNode):
    """`inp[key]` / `inp.key`: a positional (int key) or keyword (str key) argument of execute()."""
    _kind = "input_part"

    def __init__(self, inp, key, accessor="__getitem__"):
        super().__init__((inp,))
        self._key = key
        self._accessor = accessor
        if key not in inp._attribute_keys:
            inp._attribute_keys.append(key)

    def _body_str(self):
        return f"input[{self._key!r}]" if self._accessor == "__getitem__" else f"input.{self._key}"

    def _run_once(self, done, args, kwargs):
        if len(args) == 1 and not kwargs:
            # Ray's uncompiled graphs: execute() given one argument, the part is read from that value
            # (inp[0] on execute([1, 2]) is 1, inp.x its attribute x). A compiled graph reads execute()'s
            # arguments (plan.input_part).
            value = args[0]
            if isinstance(self._key, str) and self._accessor == "__getattr__" and not isinstance(value, dict):
                return getattr(value, self._key)
            return value[self._key]
        return input_part(self._key, args, kwargs)


class ClassMethodNode(DAGNode):
    """`actor.method.bind(*args, **kwargs)`: a call of an actor's method."""
    _kind = "method"

    def __init__(self, method, args, kwargs):
        super().__init__(args, kwargs)
        self._method = method  # the ActorMethod

    @property
    def actor(self):
        return self._method._handle

    @property
    def method_name(self):
        return self._method._name

    def describe(self):
        h = self.actor
        return f"{h._class_name}.{self.method_name} (actor {h._actor_id.hex()[:12]})"

    def _run_once(self, done, args, kwargs):
        pos, kw = self._resolved(done, args, kwargs)
        return self._method.remote(*pos, **kw)


class FunctionNode(DAGNode):
    """`task.bind(...)`: a task call. It runs in `dag.execute()`; a compiled
    graph runs actor methods only."""
    _kind = "task"

    def __init__(self, fn, args, kwargs):
        super().__init__(args, kwargs)
        self._fn = fn  # the RemoteFunction

    def describe(self):
        return f"task {self._fn._name}"

    def _body_str(self):
        return self._fn._name

    def get_options(self):
        return dict(getattr(self._fn, "_given", {}))

    def options(self, **options):
        """The same call with these options too (Ray's FunctionNode.options)."""
        return FunctionNode(self._fn.options(**options), self._bound_args, self._bound_kwargs)

    def _run_once(self, done, args, kwargs):
        pos, kw = self._resolved(done, args, kwargs)
        return self._fn.remote(*pos, **kw)


class ClassNode(DAGNode):
    """`Actor.bind(*args, **kwargs)`: an actor, made each time the graph runs (`dag.execute()`, as Ray's
    uncompiled graphs make theirs); `node.method.bind(...)` calls its methods. A compiled graph takes
    live actors only (make it with .remote() first)."""
    _kind = "class"

    def __init__(self, actor_class, args, kwargs):
        super().__init__(args, kwargs)
        self._actor_class = actor_class  # the ActorClass (with its options)
        self._last_call = None  # the last method node bound on it: the next one runs after it (Ray's order)
        if any(n._kind in ("input", "input_part") for n in topological(self) if n is not self):
            raise ValueError("InputNode handles user dynamic input the the DAG, and cannot be used as args, kwargs, "
                             "or other_args_to_resolve in ClassNode constructor because it is not available at "
                             "class construction or binding time.")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        actor_class = self.__dict__["_actor_class"]
        if name == "bind" and "bind" not in actor_class._methods:
            raise AttributeError(f".bind() cannot be used again on {type(self)}")
        if name not in actor_class._methods:
            raise AttributeError(f"'{actor_class._cls.__name__}' has no attribute '{name}' (actor class "
                                 f"{actor_class._name} has no method '{name}')")
        return _ClassNodeMethod(self, name)

    def describe(self):
        return f"actor {self._actor_class._name} (made by the graph)"

    def _body_str(self):
        return f"actor class {self._actor_class._name}"

    def get_options(self):
        """The options of the actor class (its decorator's, told from the defaults, and .options()'s)."""
        from phalanx.actor import _ACTOR_DEFAULTS
        options = getattr(self._actor_class, "_options", {})
        given = {k: v for k, v in options.items() if k not in _ACTOR_DEFAULTS or v != _ACTOR_DEFAULTS[k]}
        given.update(getattr(self._actor_class, "_given_options", {}))
        return given

    def options(self, **options):
        return ClassNode(self._actor_class.options(**options), self._bound_args, self._bound_kwargs)

    def _run_once(self, done, args, kwargs):
        pos, kw = self._resolved(done, args, kwargs)
        return self._actor_class.remote(*pos, **kw)


class _ClassNodeMethod:
    """`class_node.method`: what `.bind(...)` and `.options(...)` take for a method of a ClassNode's actor."""

    def __init__(self, class_node, name, options=None):
        self._class_node = class_node
        self._name = name
        self._options = dict(options or {})

    def options(self, **options):
        return _ClassNodeMethod(self._class_node, self._name, dict(self._options, **options))

    def __getattr__(self, name):
        if name == "remote":
            raise AttributeError(".remote() cannot be used on ClassMethodNodes. Use .bind() instead to express an "
                                 "symbolic actor call.")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")

    def bind(self, *args, **kwargs):
        info = self._class_node._actor_class._methods[self._name]
        if info.checker is not None:
            info.checker.check(args, kwargs)
        node = ClassNodeMethodNode(self._class_node, self._name, args, kwargs, self._options,
                                   self._class_node._last_call)
        self._class_node._last_call = node
        return node


class ClassNodeMethodNode(DAGNode):
    """A method call on a ClassNode's actor (Ray's ClassMethodNode on a ClassNode): runs uncompiled only."""
    _kind = "class_method"

    def __init__(self, class_node, name, args, kwargs, options, prev_call=None):
        super().__init__(args, kwargs)
        self._class_node = class_node
        self.method_name = name
        self._options = options
        self._prev_call = prev_call  # the method bound on the same ClassNode before this one: runs first

    def _upstream(self):
        prev = [self._prev_call] if self._prev_call is not None else []
        return [self._class_node] + prev + super()._upstream()

    def _body_str(self):
        return f"{self.method_name}()"

    def describe(self):
        return f"{self._class_node._actor_class._name}.{self.method_name} (of an actor the graph makes)"

    def get_options(self):
        return dict(self._options)

    def _run_once(self, done, args, kwargs):
        pos, kw = self._resolved(done, args, kwargs)
        method = getattr(done[self._class_node._id], self.method_name)
        if self._options:
            method = method.options(**self._options)
        return method.remote(*pos, **kw)


class MultiOutputNode(DAGNode):
    """Several outputs: `execute` gives one result per node, in this order."""
    _kind = "outputs"

    def __init__(self, outputs):
        if not isinstance(outputs, (list, tuple)):
            raise ValueError(f"MultiOutputNode takes a list of nodes, got {type(outputs).__name__}")
        outputs = list(outputs)
        if not outputs:
            raise ValueError("MultiOutputNode takes a non-empty list of nodes")
        for o in outputs:
            if not isinstance(o, DAGNode) or o._kind == "outputs":
                raise TypeError(f"MultiOutputNode takes nodes made by .bind(), got {type(o).__name__}")
        super().__init__(outputs)

    @property
    def outputs(self):
        return list(self._bound_args)

    def _run_once(self, done, args, kwargs):
        return [done[o._id] for o in self._bound_args]
