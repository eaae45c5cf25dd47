"""Process-wide state of phalanx: whether this process is a driver or a
worker, and what the driver started."""
import contextvars
import weakref

mode = None          # None (not initialized), "driver" or "worker"
node = None          # NodeProcesses the driver started (embedded cluster), or None
info = {}            # what connect() returned: node id, session dir, GCS address
gpu_ids = []         # in a worker: the GPUs of the task or actor running now
env_token_before = False  # joined a cluster: {PHALANX_CLUSTER_TOKEN, PHALANX_TLS} before init() set them (None: unset)
job_id = b""          # the job (driver) this process works for: the driver's own, or the running task's
namespace = ""        # its namespace (named actors are found within it)
log_follower = None   # a driver's log_stream.LogFollower (log_to_driver), or None
default_actor_lifetime = "non_detached"  # a driver's JobConfig's: actors made without a lifetime get it
job_metadata = {}     # a driver's JobConfig metadata
# In a worker: the task (next_task's tuple) this thread, or this asyncio task, runs.
current_task = contextvars.ContextVar("phalanx_current_task", default=None)
# Placement groups whose ready ref was handed out here, by that ref (binary): a get of it that times
# out says what keeps the group from being placed (util/placement_group.py registers, api.py asks).
pending_groups = weakref.WeakValueDictionary()
