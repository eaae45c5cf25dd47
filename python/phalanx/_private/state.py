"""Process-wide state of phalanx: whether this process is a driver or a
worker, and what the driver started."""
mode = None          # None (not initialized), "driver" or "worker"
node = None          # NodeProcesses the driver started (embedded cluster), or None
info = {}            # what connect() returned: node id, session dir, GCS address
gpu_ids = []         # in a worker: the GPUs of the task or actor running now
env_token_before = False  # joined a cluster: {PHALANX_CLUSTER_TOKEN, PHALANX_TLS} before init() set them (None: unset)
