"""Placement groups, as Ray's `ray.util.placement_group`: bundles of
resources reserved together, atomically, across the cluster's nodes, that
tasks and actors are then scheduled into.

    pg = placement_group([{"CPU": 1, "GPU": 1}] + [{"CPU": 1}] * 4, strategy="PACK", name="trainer")
    phalanx.get(pg.ready(), timeout=30)          # or pg.wait(30) -> bool
    trainer = Trainer.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
    sims = [Sim.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote() for i in range(1, 5)]
    remove_placement_group(pg)                   # gives the bundles back; the group's actors die

Strategies: PACK (as few nodes as possible), SPREAD (as many as possible),
STRICT_PACK (one node, or wait), STRICT_SPREAD (a node per bundle, or wait).
The raylet of the creating process reserves the bundles in two phases (each
node sets its bundle aside, then all commit, or all give back and the group
waits); a group whose node dies has those bundles placed again."""
import pickle
import time

from phalanx import _core
from phalanx._private import api, state
from phalanx._private.ids import PlacementGroupID  # noqa: F401  (here, as before: ray.util.placement_group's)
from phalanx.exceptions import NotFoundError

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_STATES = {0: "PENDING", 1: "CREATED", 2: "REMOVED", 3: "RESCHEDULING"}
_TIMEOUT_MS = 30000


def _check_bundles(bundles):
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise ValueError(f"placement_group() takes a non-empty list of bundles (dicts of resources), got {bundles!r}")
    out = []
    for i, b in enumerate(bundles):
        if not isinstance(b, dict):
            raise ValueError(f"bundle {i} must be a dict of resources, e.g. {{'CPU': 1}}, got {b!r}")
        clean = {}
        for k, v in b.items():
            if not isinstance(k, str) or not k:
                raise ValueError(f"bundle {i}: resource names are non-empty strings, got {k!r}")
            if "_group_" in k:
                raise ValueError(f"bundle {i}: resource names with '_group_' are placement groups' own, got {k!r}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v:
                raise ValueError(f"bundle {i}: {k} must be a number >= 0, got {v!r}")
            if v > 0:
                clean[k] = float(v)
        if not clean:
            raise ValueError(f"bundle {i} {b!r} reserves no resources: give each bundle at least one positive "
                             f"amount, e.g. {{'CPU': 1}}")
        out.append(clean)
    return out


class PlacementGroup:
    """A handle to a placement group: pass it to PlacementGroupSchedulingStrategy. Made from an id alone
    (Ray's `PlacementGroup(id)`), its bundles are read from the cluster when first asked for."""

    def __init__(self, pg_id, bundles=None, ready_ref=None, name=""):
        self.id = PlacementGroupID(pg_id)
        self._bundles = bundles
        self._ready = ready_ref
        self._name = name

    @property
    def bundle_specs(self):
        if self._bundles is None:
            try:
                self._bundles = list(_lookup(self.id, "")["bundles"].values())
            except Exception:  # noqa: BLE001 - no such group (or not connected): none known
                return []
        return self._bundles

    @property
    def is_empty(self):
        """Whether this names no placement group (Ray's PlacementGroup.empty())."""
        return not self.id

    @property
    def bundle_count(self):
        return len(self.bundle_specs)

    def ready(self):
        """An ObjectRef that is ready (its value this group, as in Ray) once
        every bundle is reserved: `get(pg.ready(), timeout=...)`, `wait([pg.ready()])`,
        `await pg.ready()`. A get that times out names the bundles and why
        they are not placed."""
        if self._ready is None:
            raise ValueError("ready() is only available in the process that created the placement group; "
                             "use wait(timeout_seconds) elsewhere")
        state.pending_groups[self._ready.binary()] = self
        return self._ready

    def wait(self, timeout_seconds=30):
        """True once the group is placed; False if it is not within the timeout."""
        if self._ready is not None:  # (the creator: its ready ref says it without polling)
            ready, _ = api.wait([self._ready], timeout=timeout_seconds)
            if ready:
                try:
                    return isinstance(api.get(self._ready), PlacementGroup)
                except Exception:  # noqa: BLE001 - removed before it was placed
                    return False
            return False
        deadline = time.monotonic() + timeout_seconds
        pause = 0.001
        while True:
            info = _lookup(self.id, "")
            if info["state"] == "CREATED":
                return True
            if info["state"] == "REMOVED":
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.05)

    def why_not_ready(self):
        """What keeps the group from being placed now ('' once it is)."""
        info = _lookup(self.id, "")
        return info["why_pending"]

    def describe(self):
        name = f"'{self._name}'" if self._name else self.id.hex()[:12]
        return f"placement group {name} with bundles {self.bundle_specs}"

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __reduce__(self):  # (a handle passed to a task: no ready ref there)
        return PlacementGroup, (self.id, self.bundle_specs, None, self._name)

    def __repr__(self):
        return f"PlacementGroup(id={self.id.hex()}, bundles={self.bundle_specs})"


def _namespace():
    api.ensure_initialized()
    return api.current_namespace()


def placement_group(bundles, strategy="PACK", name="", lifetime=None, _max_cpu_fraction_per_node=None):
    """Reserves `bundles` (a list of {"CPU": 1, "GPU": 1, ...}) together by
    `strategy`; returns at once with a PlacementGroup (see ready())."""
    api.ensure_initialized()
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if lifetime not in (None, "detached"):
        raise ValueError(f"lifetime must be None or 'detached', got {lifetime!r}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    clean = _check_bundles(bundles)
    if name:
        _refuse_taken_name(name)

    def ready_value(pg_id):  # what get(pg.ready()) returns, as Ray: the group (a plain pickle)
        return _core.pack(0, pickle.dumps(PlacementGroup(pg_id, clean, None, name), protocol=5), [])
    pg_id, ready = _core.create_placement_group(clean, STRATEGIES.index(strategy), name, _namespace(),
                                                lifetime == "detached", ready_value)
    return PlacementGroup(pg_id, clean, ready, name)


def _refuse_taken_name(name):
    """Ray's rule: a group's name is its namespace's own while the group lives (RaySystemError if taken). (Looked
    up before the group is made: two drivers making one name at the same moment may both get it.)"""
    try:
        info = _lookup(b"", name)
    except NotFoundError:
        return
    if info["state"] != "REMOVED":
        from phalanx.exceptions import RaySystemError
        raise RaySystemError(f"Failed to create placement group '{name}': the name is already taken in namespace "
                             f"{_namespace()!r} by placement group {info['placement_group_id']}")


def remove_placement_group(placement_group):
    """Gives the group's bundles back; its actors die, its running tasks end with their workers, its waiting
    tasks fail. A group the cluster does not know (or one removed already) is left alone, as in Ray."""
    if not isinstance(placement_group, PlacementGroup):
        raise TypeError(f"remove_placement_group() takes a PlacementGroup, got {type(placement_group).__name__}")
    try:
        _core.placement_group_call(1, placement_group.id, "", "", _TIMEOUT_MS)
    except NotFoundError:
        pass


def _lookup(pg_id, name):
    return _row(_core.placement_group_call(0, pg_id, name, _namespace(), _TIMEOUT_MS))


def _row(fields):
    pid, pname, strategy, state, bundles, why, (requested_us, created_us, attempts) = fields
    state = _STATES.get(state, "?")
    latency_ms = (created_us - requested_us) / 1000 if created_us and requested_us else 0
    stats = {"scheduling_attempt": max(1, attempts), "end_to_end_creation_latency_ms": latency_ms,
             "scheduling_latency_ms": latency_ms, "highest_retry_delay_ms": 0,
             "scheduling_state": {"CREATED": "FINISHED", "REMOVED": "REMOVED"}.get(
                 state, "NO_RESOURCES" if why else "QUEUED")}
    return {"placement_group_id": pid.hex(), "id": pid, "name": pname, "strategy": STRATEGIES[strategy],
            "state": state, "bundles": {i: b for i, (b, _) in enumerate(bundles)},
            "bundles_to_node_id": {i: n.hex() for i, (_, n) in enumerate(bundles) if n},
            "why_pending": why, "stats": stats}


def _mark_infeasible(rows):
    """Ray's INFEASIBLE scheduling state: a waiting group no live node could hold even empty (STRICT_PACK: all
    its bundles on one; else each bundle on some node); NO_RESOURCES only waits for room."""
    waiting = [r for r in rows if r["stats"]["scheduling_state"] == "NO_RESOURCES"]
    if not waiting:
        return
    totals = [n["resources_total"] for n in api.gcs_nodes(alive_only=True)]

    def fits(need):
        return any(all(t.get(k, 0) >= v for k, v in need.items() if v > 0) for t in totals)

    for r in waiting:
        bundles = list(r["bundles"].values())
        if r["strategy"] == "STRICT_PACK":
            together = {}
            for b in bundles:
                for k, v in b.items():
                    together[k] = together.get(k, 0) + v
            feasible = fits(together)
        else:
            feasible = all(fits(b) for b in bundles)
        if not feasible:
            r["stats"]["scheduling_state"] = "INFEASIBLE"


def get_current_placement_group():
    """The placement group the running task or actor was placed in (Ray's): None in a driver, or when it
    was placed in none."""
    if not _core.is_connected():
        return None
    pg_id = _core.current_placement_group()
    if not pg_id:
        return None
    info = _lookup(pg_id, "")
    return PlacementGroup(info["id"], list(info["bundles"].values()), None, info["name"])


def get_placement_group(placement_group_name):
    """The live placement group of that name in this namespace (ValueError if none)."""
    api.ensure_initialized()
    try:
        info = _lookup(b"", placement_group_name)
    except NotFoundError as e:
        raise NotFoundError(f"Failed to look up placement group with name: {placement_group_name} ({e})") from None
    return PlacementGroup(info["id"], list(info["bundles"].values()), None, info["name"])


def placement_group_table(placement_group=None):
    """Ray's table: {"placement_group_id", "name", "strategy", "state",
    "bundles", "bundles_to_node_id", "why_pending", "stats"} for a group (stats: Ray's scheduling_attempt,
    scheduling_state, end_to_end_creation_latency_ms, ...); without
    one, {hex id: that} for every group the cluster knows (removed ones too)."""
    api.ensure_initialized()
    if placement_group is None:
        out = {}
        for fields in _core.placement_group_call(2, b"", "", "", _TIMEOUT_MS):
            row = _row(fields)
            row.pop("id")
            out[row["placement_group_id"]] = row
        _mark_infeasible(out.values())
        return out
    info = _lookup(placement_group.id, "")
    info.pop("id")
    _mark_infeasible([info])
    return info


class PlacementGroupSchedulingStrategy:
    """Schedules a task or actor into bundle `placement_group_bundle_index`
    of `placement_group` (-1: any of its bundles), as Ray's. A placement
    group of None is no group: the default placement."""

    def __init__(self, placement_group, placement_group_bundle_index=-1,
                 placement_group_capture_child_tasks=None):
        if placement_group is None:
            self.placement_group = None
            self.placement_group_bundle_index = -1
            self.placement_group_capture_child_tasks = placement_group_capture_child_tasks
            return
        if not isinstance(placement_group, PlacementGroup):
            raise TypeError(f"PlacementGroupSchedulingStrategy takes a PlacementGroup, got "
                            f"{type(placement_group).__name__}")
        if not isinstance(placement_group_bundle_index, int) or isinstance(placement_group_bundle_index, bool):
            raise ValueError(f"placement_group_bundle_index must be an int >= -1, got "
                             f"{placement_group_bundle_index!r}")
        if placement_group_bundle_index < -1 or (placement_group.bundle_specs and
                                                 placement_group_bundle_index >= placement_group.bundle_count):
            raise ValueError(f"placement group bundle index {placement_group_bundle_index} is invalid. Valid placement "
                             f"group indexes: 0-{placement_group.bundle_count}")  # (Ray's words)
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks


def ray_resources(opts, cpus):
    """A task's or actor's resource request as Ray's errors show it: CPU (`cpus`, if not None), GPU, memory,
    then custom resources, each as given."""
    out = {} if cpus is None else {"CPU": cpus}
    if opts.get("num_gpus"):
        out["GPU"] = opts["num_gpus"]
    if opts.get("memory"):
        out["memory"] = opts["memory"]
    out.update(opts.get("resources") or {})
    return out


def bundle_misfit(strategy, resources, placement_resources, what):
    """Ray's check when a task or actor is submitted to a placement group (`_validate_resource_shape`): the
    words of the ValueError it raises when `resources` (or the `placement_resources` a default actor needs to
    be created: 1 CPU) fit no bundle of the group, else None. Groups whose bundles this process does not know
    (one passed by id) are not checked."""
    pg = getattr(strategy, "placement_group", None)
    bundles = getattr(pg, "bundle_specs", None)
    if not bundles:
        return None

    def fits(request):
        return any(all(bundle.get(r, 0) >= v for r, v in request.items() if r != "bundle") for bundle in bundles)

    if not fits(resources):
        return (f"Cannot schedule {what} with the placement group because the resource request {resources} cannot "
                f"fit into any bundles for the placement group, {bundles}.")
    if not fits(placement_resources):
        return (f"Cannot schedule {what} with the placement group because the actor requires "
                f"{placement_resources.get('CPU', 0)} CPU for creation, but it cannot fit into any bundles for the "
                f"placement group, {bundles}. Consider creating a placement group with CPU resources.")
    return None
