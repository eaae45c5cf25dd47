"""The nodes of a call graph, Ray's DAG API: `actor.method.bind(...)` makes
a ClassMethodNode, `with InputNode() as inp:` the graph's input,
`MultiOutputNode([...])` several outputs. A graph runs once through
ordinary calls (`dag.execute(x)`: ObjectRefs) or is compiled
(`dag.experimental_compile()`: compiled.py) to run many times on channels
opened once."""

import itertools

from phalanx.dag.compiled import CompiledDAG
from phalanx.dag.plan import input_part, input_value, topological

_ids = itertools.count()


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
        """The nodes this one's arguments are, in order."""
        return [a for a in itertools.chain(self._bound_args, self._bound_kwargs.values()) if isinstance(a, DAGNode)]

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
        done = {}
        for node in topological(self):
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
        return CompiledDAG(self, max_inflight=_max_inflight_executions, submit_timeout=_submit_timeout)

    def _run_once(self, done, args, kwargs):
        raise NotImplementedError

    def _resolve(self, value, done, args, kwargs):
        if isinstance(value, DAGNode):
            return input_value(args, kwargs) if value._kind == "input" else done[value._id]
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __getitem__(self, key):
        return InputAttributeNode(self, key)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return InputAttributeNode(self, name)

    def _run_once(self, done, args, kwargs):
        return None  # (read where it is an argument: input_value)


class InputAttributeNode(DAGNode):
    """`inp[key]` / `inp.key`: a positional (int key) or keyword (str key) argument of execute()."""
    _kind = "input_part"

    def __init__(self, inp, key):
        super().__init__((inp,))
        self._key = key

    def _run_once(self, done, args, kwargs):
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

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        methods = self.__dict__["_actor_class"]._methods
        if name not in methods:
            raise AttributeError(f"actor class {self._actor_class._name} has no method '{name}'")
        return _ClassNodeMethod(self, name)

    def describe(self):
        return f"actor {self._actor_class._name} (made by the graph)"

    def get_options(self):
        return dict(getattr(self._actor_class, "_given_options", {}))

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

    def bind(self, *args, **kwargs):
        info = self._class_node._actor_class._methods[self._name]
        if info.checker is not None:
            info.checker.check(args, kwargs)
        return ClassNodeMethodNode(self._class_node, self._name, args, kwargs, self._options)


class ClassNodeMethodNode(DAGNode):
    """A method call on a ClassNode's actor (Ray's ClassMethodNode on a ClassNode): runs uncompiled only."""
    _kind = "class_method"

    def __init__(self, class_node, name, args, kwargs, options):
        super().__init__(args, kwargs)
        self._class_node = class_node
        self.method_name = name
        self._options = options

    def _upstream(self):
        return [self._class_node] + super()._upstream()

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
