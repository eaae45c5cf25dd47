"""Reduces of GPU objects on the GPU (collective.reduce, docs/gpu.md).

A reduce whose inputs are GPU objects runs in the calling process, on its
GPU, on a thread of its own (the call returns its ref at once, as every
reduce does): inputs are taken in the order they become ready, each read
the fastest way its place allows (mapped from a producer on the same GPU:
no copy; copied from another GPU of the node or from the store), and
combined into the accumulator as it arrives; the result is put as a GPU
object under the ref the call returned (kept on this GPU, staged for
readers elsewhere). As the raylet's reduce: `num_objects=k` takes the
first k ready, an input whose task failed is skipped while enough others
remain, mismatched inputs or a timeout fail the result with a
CollectiveError or GetTimeoutError naming the inputs. The element-wise
ops are torch's on the GPU: for sum, prod, min and max one step of them
rounds as collectives/cuda's kernels do, so the bytes are those of the
raylet's reduce.

torch is never imported here: this module is used only for values that are
torch tensors, so torch is already loaded."""
import queue
import sys
import threading
import time

from phalanx import _core
from phalanx._private import gpu_objects, state
from phalanx._private import serialization as ser
from phalanx.exceptions import CollectiveError, GetTimeoutError, PhalanxError


def is_gpu_object(payload):
    """Whether a stored value (a _core.get payload: kind 1, a StoreBuffer) is a GPU object."""
    try:
        _, _, bufs = ser.unpack(payload)
    except Exception:  # noqa: BLE001 - not a value of ours: not one
        return False
    return len(bufs) >= 2 and gpu_objects.place_of(bufs[-1]) is not None


def any_ready_gpu_object(refs):
    """Whether an input already here is a GPU object (a reduce then runs on
    this process's GPU). Only this node's store is looked at: nothing is
    copied from another node to find out."""
    ids = [r.binary() for r in refs]
    ready = _core.wait(ids, len(ids), 0, False)
    if not ready:
        return False
    found = False
    for kind, payload in _core.get(ready[:8], 0, locate_only=True):
        found = found or (kind == 1 and is_gpu_object(payload))
    return found


def combine(op, acc, x):
    """acc = op(acc, x), element-wise, in place on the GPU."""
    torch = sys.modules["torch"]
    if op == "sum":
        acc.add_(x)
    elif op == "prod":
        acc.mul_(x)
    elif op == "min":
        torch.minimum(acc, x, out=acc)
    else:
        torch.maximum(acc, x, out=acc)


class GpuReduce:
    """One reduce of `refs` into object `out_id` on GPU `index` of this process."""

    def __init__(self, out_id, refs, op, want, timeout_s, index):
        self.out_id, self.refs, self.op, self.want = out_id, list(refs), op, want
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.index = index
        self._position = {r.binary(): i for i, r in enumerate(self.refs)}
        self.used = []  # the input refs combined, in order
        self.done = threading.Event()

    def _name(self, ref):
        return f"input {self._position[ref.binary()]} ({ref!r})"

    def run(self):
        try:
            result = self._reduce()
            meta, bufs, contained = ser.serialize(result, self.out_id)
            _core.put_serialized(self.out_id, ser.kind_of(result), meta, bufs, contained, False)
        except BaseException as e:  # noqa: BLE001 - every failure becomes the result's error
            err = e if isinstance(e, PhalanxError) else CollectiveError(
                f"the GPU reduce failed: {type(e).__name__}: {e}")
            meta, bufs, contained = ser.serialize_error(err)
            _core.put_serialized(self.out_id, ser.KIND_ERROR, meta, bufs, contained, False)
        finally:
            self.done.set()

    def _reduce(self):
        api = gpu_objects.device()
        pending, failed, acc, first = list(self.refs), [], None, None
        while len(self.used) < self.want:
            if len(pending) + len(self.used) < self.want:
                raise CollectiveError(f"too many reduce inputs failed: {len(failed)} of {len(self.refs)}, and "
                                      f"{self.want} were wanted; " + "; ".join(failed[:5]))
            left_ms = -1 if self.deadline is None else max(0, int((self.deadline - time.monotonic()) * 1000))
            ready = _core.wait([r.binary() for r in pending], 1, left_ms, True)
            if not ready:
                missing = ", ".join(self._name(r) for r in pending[:5])
                raise GetTimeoutError(f"the reduce timed out with {self.want - len(self.used)} inputs missing "
                                      f"(the first: {missing})")
            ref = next(r for r in pending if r.binary() == ready[0])
            pending.remove(ref)
            kind, payload = _core.get([ref.binary()], 0)[0]
            try:
                with gpu_objects.reading(None, False):
                    x = ser.resolve(kind, payload)
            except Exception as e:  # noqa: BLE001 - its task failed: skipped while enough others remain
                last = (str(e).strip().splitlines() or [type(e).__name__])[-1]  # (a task's error: its last line)
                failed.append(f"{self._name(ref)}: {last}")
                continue
            x = self._as_tensor(x, ref)
            if acc is None:
                acc, first = api.copy_to(x, self.index), ref
            elif x.dtype != acc.dtype or x.shape != acc.shape:
                # Named in input order, whichever arrived first, so one mistake reads the same every run.
                pair = sorted([(first, acc), (ref, x)], key=lambda p: self._position[p[0].binary()])
                raise CollectiveError("reduce inputs do not match: " + ", ".join(
                    f"{self._name(r)} is {t.dtype} {tuple(t.shape)}" for r, t in pair))
            else:
                combine(self.op, acc, x if x.device == acc.device else x.to(acc.device))
            self.used.append(ref)
        return acc

    def _as_tensor(self, x, ref):
        torch = sys.modules["torch"]
        if isinstance(x, torch.Tensor):
            return x
        np = sys.modules.get("numpy")
        if np is not None and isinstance(x, np.ndarray):
            return torch.from_numpy(x)
        raise CollectiveError(f"{self._name(ref)} is a {type(x).__name__}, not an array or tensor")


_queue = None
_runs = {}  # out id -> GpuReduce (for reduced_inputs)
_runs_lock = threading.Lock()


def start(out_id, refs, op, want, timeout_s, index):
    """Starts a reduce of `refs` into `out_id` on GPU `index` of this process; its ref is the caller's to make."""
    global _queue
    r = GpuReduce(out_id, refs, op, want, timeout_s, index)
    with _runs_lock:
        _runs[out_id] = r
        while len(_runs) > 1024:  # (the oldest finished ones' records go)
            oldest = next(iter(_runs))
            if not _runs[oldest].done.is_set():
                break
            del _runs[oldest]
        if _queue is None:
            _queue = queue.SimpleQueue()
            threading.Thread(target=_loop, args=(_queue,), name="phalanx-gpu-reduce", daemon=True).start()
    _queue.put(r)


def _loop(q):
    while True:
        r = q.get()
        try:
            if state.mode is not None:  # (else shut down meanwhile: its ref went with the session)
                r.run()
        except BaseException:  # noqa: BLE001 - not even its error could be stored (disconnected): the next runs
            pass
        finally:
            r.done.set()


def inputs_of(out_id, timeout_s):
    """The refs a GPU reduce combined, in order, once it is done; None if `out_id` is not one of this process's."""
    with _runs_lock:
        r = _runs.get(out_id)
    if r is None:
        return None
    if not r.done.wait(timeout_s):
        raise GetTimeoutError(f"reduced_inputs: the reduce did not finish within {timeout_s} s")
    return list(r.used)
