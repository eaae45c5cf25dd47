"""Ray's state API (ray.util.state) for phalanx clusters: list, get and summarize what the cluster
runs and holds, with Ray's names, arguments and results (docs/observability.md, "The state API").

    from phalanx.util.state import list_actors, list_tasks, get_objects, summarize_tasks
    list_actors(filters=[("state", "=", "ALIVE")])
    summarize_tasks()["cluster"]["summary"]

The same from the command line: `phalanx list|get|summary|logs` (cli.py)."""
from phalanx.util.state.api import (StateApiClient, get_actor, get_job, get_node, get_objects, get_placement_group,
                                    get_task, get_worker, list_actors, list_jobs, list_nodes, list_objects,
                                    list_placement_groups, list_runtime_envs, list_tasks, list_workers,
                                    summarize_actors, summarize_objects, summarize_tasks)
from phalanx.util.state.logs import get_log, list_logs

__all__ = ["StateApiClient", "get_actor", "get_job", "get_log", "get_node", "get_objects", "get_placement_group",
           "get_task", "get_worker", "list_actors", "list_jobs", "list_logs", "list_nodes", "list_objects",
           "list_placement_groups", "list_runtime_envs", "list_tasks", "list_workers", "summarize_actors",
           "summarize_objects", "summarize_tasks"]
