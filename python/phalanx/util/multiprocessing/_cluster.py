"""Which cluster a Pool runs on, and how many processes it gets (Ray's Pool._init_ray).

If phalanx is not initialized: ray_address="local" or no address at all starts a local cluster with
`processes` CPUs (all of this machine's when None); another ray_address, or else RAY_ADDRESS or
PHALANX_ADDRESS from the environment, joins that cluster. If it is initialized (the driver did it, or
this runs inside a task or an actor), the pool uses that cluster whatever ray_address says."""
import logging
import os

import phalanx
from phalanx._private import state
from phalanx.exceptions import UnavailableError

logger = logging.getLogger(__name__)

ADDRESS_ENV = ("RAY_ADDRESS", "PHALANX_ADDRESS")


def connect(processes, ray_address):
    """Initializes phalanx if needed (above); the number of processes the pool starts. Raises
    ValueError if `processes` is not positive or the cluster has fewer CPUs."""
    if processes is not None and (not isinstance(processes, int) or isinstance(processes, bool)):
        raise TypeError(f"processes must be an int or None, got {processes!r}")
    if not phalanx.is_initialized():
        address = ray_address if ray_address is not None else _address_from_env()
        if address is None:  # (as Ray's Pool: the cluster started last on this machine, if any)
            from phalanx._private import api
            address = api._address_to_join()
        if address is None or address == "local":
            logger.info("Pool: starting a local cluster with %s CPUs", processes or "all the machine's")
            phalanx.init(address="local", num_cpus=processes)
        else:
            logger.info("Pool: joining the cluster at %s", address)
            phalanx.init(address=address)
    cpus = _cluster_cpus()
    if processes is None:
        processes = cpus if cpus is not None else os.cpu_count()
    if processes <= 0:
        raise ValueError(f"Processes in the pool must be >0, got {processes}.")
    if cpus is not None and cpus < processes:
        raise ValueError(f"Tried to start a pool with {processes} processes on an existing cluster, but there are "
                         f"only {cpus} CPUs in the cluster.")
    return processes


def _address_from_env():
    for name in ADDRESS_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


def _cluster_cpus():
    """The cluster's CPUs, or None where this process cannot read them: inside a task or an actor,
    phalanx's cluster_resources() needs the cluster token, which workers do not hold (then the pool
    takes the machine's CPUs by default and does not check `processes` against the cluster)."""
    try:
        return int(phalanx.cluster_resources().get("CPU", 0))
    except UnavailableError:
        if state.mode != "worker":
            raise  # (a driver holds the token: a real failure)
        return None
