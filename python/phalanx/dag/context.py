"""Ray's `ray.dag.context.DAGContext`: the defaults of compiled graphs, read when a graph is compiled
without its own (`DAGContext.get_current().submit_timeout = 60`)."""
import threading
from dataclasses import dataclass

_lock = threading.Lock()
_current = None


@dataclass
class DAGContext:
    """Ray's fields (timeouts in seconds). phalanx reads submit_timeout, get_timeout and
    max_inflight_executions; the others are kept for programs that set them."""
    submit_timeout: float = 10.0
    get_timeout: float = 10.0
    teardown_timeout: float = 30.0
    read_iteration_timeout: float = 0.1
    buffer_size_bytes: int = 1_000_000
    max_inflight_executions: int = 10
    overlap_gpu_communication: bool = False
    asyncio_max_queue_size: int = -1
    max_buffered_results: int = 1000

    @staticmethod
    def get_current():
        """The process's context (made once, with Ray's defaults)."""
        global _current
        with _lock:
            if _current is None:
                _current = DAGContext()
            return _current
