"""What a compiled graph runs where: the driver is rank 0 of the graph's
channel group, each actor in it a rank of its own (in the order the graph
first uses them). Every value crossing processes travels on an edge: the
execution's input from the driver to each actor that reads it, a node's
result from its actor to each other actor (and the driver) using it, once
per execution however many arguments there use it. Edges are numbered
(slots); a message's call number is (execution << SLOT_BITS) | slot."""

from dataclasses import dataclass, field

SLOT_BITS = 20
CLOSE_CALL = (1 << SLOT_BITS) - 1  # (execution 0) the driver's word that an actor may close its channel


def call_of(execution, slot):
    return (execution << SLOT_BITS) | slot


# How a step gets one argument: ("const", value), ("input",), ("part", key),
# ("local", node id) (an earlier step of the same actor), ("recv", slot, rank).


@dataclass
class Step:
    node: int
    method: str
    describe: str
    args: list
    kwargs: dict
    sends: list = field(default_factory=list)  # [(slot, rank)] its result goes to


@dataclass
class ActorProgram:
    rank: int
    name: str               # how errors name the actor
    input_slot: object      # the slot of the execution's input, or None if no step reads it
    steps: list             # [Step], each after the steps it uses


@dataclass
class GraphPlan:
    world: int
    actors: list            # [ActorHandle] by rank - 1
    programs: list          # [ActorProgram] by rank - 1
    inputs: list            # [(slot, rank)]: where the driver sends each execution's input
    outputs: list           # [(slot, rank)] per output, in the order execute() gives them
    multi: bool             # a MultiOutputNode: execute() gives a list
    names: list = field(default_factory=list)  # [name] by rank, 0: the driver


SUPPORTED = ("compiled graphs run actor methods bound with actor.method.bind(...) on the graph's InputNode (or its "
             "parts inp[i] / inp.name), on other such nodes and on constants, with one output or a MultiOutputNode")


def topological(root):
    """The nodes `root` depends on (itself included), each after its arguments."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node._id in seen:
            continue
        seen.add(node._id)
        stack.append((node, True))
        for up in reversed(node._upstream()):
            if up._id not in seen:
                stack.append((up, False))
    return order


def input_value(args, kwargs):
    """The InputNode's own value for execute(*args, **kwargs)."""
    if len(args) == 1 and not kwargs:
        return args[0]
    raise ValueError(f"the graph's InputNode is used whole, so execute() takes exactly one positional argument, got "
                     f"{len(args)} and {len(kwargs)} keyword arguments (use inp[i] or inp.name for several)")


def input_part(key, args, kwargs):
    """What `inp[key]` / `inp.key` is for execute(*args, **kwargs)."""
    if isinstance(key, int):
        if not -len(args) <= key < len(args):
            raise IndexError(f"the graph reads inp[{key}], but execute() was given {len(args)} positional arguments")
        return args[key]
    if key in kwargs:
        return kwargs[key]
    if len(args) == 1 and not kwargs:  # (Ray's inp.x on one argument: its attribute or item)
        value = args[0]
        return value[key] if isinstance(value, dict) else getattr(value, key)
    raise KeyError(f"the graph reads inp.{key}, but execute() was given no keyword argument {key!r}")


def build(root):
    """The plan of the graph ending at `root`; TypeError or ValueError saying
    what is not supported."""
    multi = root._kind == "outputs"
    outputs = root.outputs if multi else [root]
    order = topological(root)
    inputs = [n for n in order if n._kind == "input"]
    for n in order:
        if n._kind == "task":
            raise TypeError(f"{n.describe()} is a task: {SUPPORTED}. Run a graph with tasks without compiling it "
                            "(dag.execute(...)), or make the task an actor's method")
        if n._kind in ("class", "class_method"):
            raise TypeError(f"{n.describe()}: a compiled graph calls live actors; make the actor with "
                            f".remote() first and bind its methods (a = Actor.remote(); a.method.bind(...)): "
                            f"{SUPPORTED}")
        if n._kind not in ("input", "input_part", "method", "outputs"):
            raise TypeError(f"a {type(n).__name__} cannot be compiled: {SUPPORTED}")
    for o in outputs:
        if o._kind != "method":
            raise TypeError(f"the graph's output is a {type(o).__name__}, not an actor method's node: {SUPPORTED}")
    if len(inputs) > 1:
        raise ValueError(f"the graph has {len(inputs)} InputNodes; it takes one (with InputNode() as inp:), whose "
                         "parts inp[i] / inp.name give several arguments")
    reads_input = set()  # nodes that depend on the InputNode
    for n in order:
        if n._kind in ("input", "input_part") or any(u._id in reads_input for u in n._upstream()):
            reads_input.add(n._id)
    for n in order:
        if n._kind == "method":
            if n._id not in reads_input:
                raise ValueError(f"{n.describe()} does not depend on the graph's InputNode: every call of a compiled "
                                 "graph runs once per execute(), so each must take the input or a node that does")
            mode, num_returns, _ = n._method._plan
            if mode or num_returns != 1:
                raise TypeError(f"{n.describe()} returns {'a stream' if mode else f'{num_returns} values'}: a compiled "
                                "graph's methods return one value each")
    return _Planner(order, outputs, multi).plan


class _Planner:
    def __init__(self, order, outputs, multi):
        self._slots = 0
        self._rank_of = {}   # actor id -> rank
        actors = []
        for n in order:
            if n._kind == "method" and n.actor._actor_id not in self._rank_of:
                self._rank_of[n.actor._actor_id] = len(actors) + 1
                actors.append(n.actor)
        self._programs = [ActorProgram(r + 1, f"actor {a._class_name} {a._actor_id.hex()[:12]}", None, [])
                          for r, a in enumerate(actors)]
        self._edges = {}     # (node id, consumer rank) -> slot
        self._nodes = {n._id: n for n in order}
        self._steps = {}     # node id -> Step
        driver_inputs = []
        for n in order:
            if n._kind != "method":
                continue
            rank = self._rank(n)
            prog = self._programs[rank - 1]
            step = Step(n._id, n.method_name, n.describe(), [self._arg(a, rank) for a in n._bound_args],
                        {k: self._arg(v, rank) for k, v in n._bound_kwargs.items()})
            self._steps[n._id] = step
            prog.steps.append(step)
        for p in self._programs:
            if p.input_slot is not None:
                driver_inputs.append((p.input_slot, p.rank))
        outs = [(self._edge(o, 0), self._rank(o)) for o in outputs]
        names = ["driver"] + [p.name for p in self._programs]
        self.plan = GraphPlan(len(actors) + 1, actors, self._programs, driver_inputs, outs, multi, names)

    def _rank(self, node):
        return self._rank_of[node.actor._actor_id]

    def _new_slot(self):
        slot = self._slots
        self._slots += 1
        if slot >= CLOSE_CALL:
            raise ValueError(f"the graph has more than {CLOSE_CALL} edges")
        return slot

    def _edge(self, node, consumer):
        """The slot on which `node`'s result goes to rank `consumer` (made once)."""
        key = (node._id, consumer)
        if key not in self._edges:
            self._edges[key] = slot = self._new_slot()
            self._steps[node._id].sends.append((slot, consumer))
        return self._edges[key]

    def _arg(self, value, rank):
        prog = self._programs[rank - 1]
        kind = getattr(value, "_kind", None)
        if kind in ("input", "input_part"):
            if prog.input_slot is None:
                prog.input_slot = self._new_slot()
            return ("input",) if kind == "input" else ("part", value._key)
        if kind == "method":
            producer = self._rank(value)
            if producer == rank:
                return ("local", value._id)
            return ("recv", self._edge(value, rank), producer)
        return ("const", value)
