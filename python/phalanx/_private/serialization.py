"""Values <-> bytes. Pickle protocol 5 with out-of-band buffers, so numpy
arrays are copied once into the store (by C++, without the GIL) and read
back as read-only views on shared memory. The layout is written by
python/bindings/serialization.cc; `unpack` reads it.

ObjectRefs inside a value are recorded while pickling, so the raylet keeps
them alive as long as the value that contains them. torch tensors go out of
band too, once torch is loaded (phalanx/_private/tensors.py)."""
import collections
import io
import pickle
import os
import struct
import sys
import threading
import types

import cloudpickle

from phalanx import _core
from phalanx._private import gpu_objects, tensors
from phalanx.exceptions import SerializationError, TaskError, error_for_code

KIND_VALUE = 0
KIND_ERROR = 1
_MAGIC = 0x31584850
_local = threading.local()
# Array element types a raylet can reduce without Python, as the numbering of
# collectives::DType (collectives/reduce_ops.h), from 1.
DTYPE_CODES = tensors.DTYPE_CODES
_dtype_codes = {}  # numpy dtype -> its code in DTYPE_CODES (0: none)


def _code_reduce_keeping_filename(code):
    """cloudpickle's reducer of code objects, which writes "<dynamic-code>" for the file (cloudpickle 3),
    with the real file kept: a remote function's traceback then shows its source lines, as Ray's do."""
    fn, args = _CLOUDPICKLE_CODE_REDUCE(code)
    return fn, tuple(code.co_filename if isinstance(a, str) and a == "<dynamic-code>" else a for a in args)


_CLOUDPICKLE_CODE_REDUCE = getattr(cloudpickle.Pickler, "_dispatch_table", {}).get(types.CodeType)


class _FunctionPickler(cloudpickle.Pickler):
    if _CLOUDPICKLE_CODE_REDUCE is not None:  # (else: cloudpickle's own)
        dispatch_table = collections.ChainMap({types.CodeType: _code_reduce_keeping_filename},
                                              cloudpickle.Pickler.dispatch_table)


def dumps_function(obj):
    """A remote function or actor class, pickled by value (cloudpickle), its code keeping its file name."""
    f = io.BytesIO()
    _FunctionPickler(f, protocol=5).dump(obj)
    return f.getvalue()


def kind_of(value):
    """The kind word for a value: KIND_VALUE, with the element type of a
    C-contiguous numpy array or a CPU torch tensor of a numeric dtype in bits
    8 and up (stored in the header's spare word), so raylets can reduce such
    arrays in place."""
    t = type(value)
    np = sys.modules.get("numpy")
    if np is not None and t is np.ndarray and value.flags.c_contiguous and value.dtype.isnative:
        dtype = value.dtype
        code = _dtype_codes.get(dtype)
        if code is None:  # (dtype.name is computed in Python, slowly: once per dtype)
            code = _dtype_codes[dtype] = DTYPE_CODES.get(dtype.name, 0)
        return KIND_VALUE | (code << 8)
    if "torch" in sys.modules and t is sys.modules["torch"].Tensor:
        return KIND_VALUE | (tensors.dtype_code(value) << 8)
    return KIND_VALUE


def reduce_object_ref(ref):
    ids = getattr(_local, "contained", None)
    if ids is not None:
        ids.append(ref.binary())
    elif os.environ.get("RAY_allow_out_of_band_object_ref_serialization", "1") == "0":
        # Pickled outside a value phalanx stores (a remote function's closure, cloudpickle.dumps by hand):
        # Ray's switch refuses it, naming Ray's variable.
        from phalanx.exceptions import OufOfBandObjectRefSerializationException
        raise OufOfBandObjectRefSerializationException(
            f"It is not allowed to serialize ray.ObjectRef {ref.hex()} out of band (outside a value passed to or "
            "returned from a task, or put): it is neither counted nor kept alive for the process that reads it. "
            "Pass it as an argument or inside one instead; RAY_allow_out_of_band_object_ref_serialization=1 "
            "(the default) allows it.")
    return (_core.ObjectRef, (ref.binary(),))


# Serializers registered in this process (phalanx.util.register_serializer): class -> reducer. Both picklers
# below look here first; a value of such a class is stored as (its deserializer, what its serializer made),
# so the deserializer travels with it and the reader needs no registration (Ray's rule).
custom_reducers = {}


class _ValuePickler(cloudpickle.Pickler):
    """cloudpickle's pickler with the registered serializers (used only while one is registered)."""
    dispatch_table = collections.ChainMap(custom_reducers, cloudpickle.Pickler.dispatch_table)


class _TensorPickler(cloudpickle.Pickler):
    """cloudpickle's pickler, with torch tensors out of band (used once torch
    is loaded); CUDA tensors collected for a GPU object when `collector` is given."""
    dispatch_table = collections.ChainMap(custom_reducers, cloudpickle.Pickler.dispatch_table)

    def __init__(self, file, tensor_type, collector, **kwargs):
        super().__init__(file, **kwargs)
        self._tensor_type = tensor_type
        self._collector = collector

    def reducer_override(self, obj):
        if type(obj) is self._tensor_type:
            return tensors.reduce_tensor(obj, self._collector)
        return _cloudpickle_override(self, obj)


_cloudpickle_override = cloudpickle.Pickler.reducer_override


def _dumps_with_tensors(value, buffer_callback, collector=None):
    with io.BytesIO() as f:
        _TensorPickler(f, sys.modules["torch"].Tensor, collector, protocol=5,
                       buffer_callback=buffer_callback).dump(value)
        return f.getvalue()


# Values whose plain-pickle form is the same everywhere: no pickler object to make.
_PLAIN = (int, float, str, bytes, bool, type(None))


_warned_non_contiguous = False


def _warn_non_contiguous():
    """Ray's warning, once per process: a numpy array that is not contiguous is copied when stored."""
    global _warned_non_contiguous
    if not _warned_non_contiguous:
        _warned_non_contiguous = True
        import warnings
        warnings.warn("A numpy array that is not contiguous in memory was stored: it cannot be zero-copy read back "
                      "(its bytes are copied into one buffer first; np.ascontiguousarray(...) before put() makes "
                      "that copy yours). This is warned of once.", UserWarning, stacklevel=3)


def serialize(value, object_id=None):
    """(meta bytes, [buffers], [contained ids]) of `value`. Given the id of
    the object it is for, a value with CUDA tensors becomes a GPU object in
    a process with a GPU (kept on it too: gpu_objects.py)."""
    if type(value) in _PLAIN:
        return pickle.dumps(value, protocol=5), [], []
    np = sys.modules.get("numpy")
    if np is not None and type(value) is np.ndarray and not value.dtype.hasobject:
        # (numpy's own reduce, out of band, without cloudpickle's per-object lookups: 4x faster)
        if not value.flags.c_contiguous and not value.flags.f_contiguous:
            _warn_non_contiguous()
        buffers = []
        return pickle.dumps(value, protocol=5, buffer_callback=buffers.append), buffers, []
    buffers = []
    contained = []
    prev = getattr(_local, "contained", None)
    _local.contained = contained
    try:
        if "torch" in sys.modules:  # (a CUDA tensor's bytes go as a DevicePiece: tensors.buffer_for)
            gpu = gpu_objects.collector_for(object_id, tensors.placeholder_for) if object_id is not None else None
            meta = _dumps_with_tensors(value, lambda b: buffers.append(tensors.buffer_for(b)), gpu)
            if gpu is not None:
                gpu.finish()
        elif custom_reducers:
            with io.BytesIO() as f:
                _ValuePickler(f, protocol=5, buffer_callback=buffers.append).dump(value)
                meta = f.getvalue()
        else:
            meta = cloudpickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    finally:
        _local.contained = prev
    return meta, buffers, contained


def serialize_error(err):
    try:
        meta = cloudpickle.dumps(err, protocol=5)
    except Exception:  # the cause is not picklable: keep the text only
        err = TaskError(getattr(err, "function_name", "?"), getattr(err, "traceback_str", str(err)))
        meta = cloudpickle.dumps(err, protocol=5)
    return meta, [], []


def unpack(buf):
    """(kind, meta, [buffers]) as memoryviews over `buf` (no copies)."""
    mv = memoryview(buf)
    magic, kind, nbuf, _, meta_len = struct.unpack_from("<IIIIQ", mv, 0)
    if magic != _MAGIC:
        raise SerializationError("object data is corrupt (bad magic number)")
    lens = struct.unpack_from(f"<{nbuf}Q", mv, 24) if nbuf else ()
    off = 24 + 8 * nbuf
    meta = mv[off:off + meta_len]
    off += meta_len
    bufs = []
    for n in lens:
        off = (off + 63) & ~63
        bufs.append(mv[off:off + n])
        off += n
    return kind, meta, bufs


def deserialize(buf):
    """The value stored in `buf`; raises the stored error for error values."""
    kind, meta, bufs = unpack(buf)
    try:
        value = pickle.loads(meta, buffers=bufs)
    except Exception as e:
        raise SerializationError(f"cannot unpickle an object: {type(e).__name__}: {e}") from e
    if kind == KIND_ERROR:
        raise value
    return value


_ERROR_HEAD = struct.pack("<II", _MAGIC, KIND_ERROR)


def failed(kind, payload):
    """Whether a (kind, payload) pair from _core.get is a failure: lost, or its task's error."""
    return kind == 2 or (kind in (0, 1) and bytes(memoryview(payload)[:8]) == _ERROR_HEAD)


def resolve(kind, payload):
    """The value of a (kind, payload) pair from _core.get / next_task."""
    if kind == 0 or kind == 1:
        return deserialize(payload)
    if kind == 2:
        code, message = payload
        raise error_for_code(code, message)
    raise error_for_code(3, "object is not ready")
