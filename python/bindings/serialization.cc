// Writes values in the object format (core/value_format.h), in C++ so large
// buffers are copied without the GIL. The buffers are pickle protocol 5
// out-of-band buffers (numpy array data); store offsets are 64-byte aligned,
// so each buffer is too, and a reader maps them as numpy arrays without
// copying. Arrays carry their element type, so raylets reduce them without
// Python (collectives/reduce_manager.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <thread>
#include <vector>

#include "core/ids.h"
#include "core/value_format.h"
#include "python/bindings/py_core.h"

namespace phalanx::py {

namespace {

constexpr uint64_t kParallelCopyBytes = 16ull << 20;

struct Piece {
  const uint8_t* data;
  uint64_t size;
  PyObject* filler = nullptr;  // a device buffer: writes itself (see Pieces)
};

// Holds Python buffer views for the duration of a pack. A buffer may also be
// a device buffer (phalanx/_private/tensors.py DevicePiece: `nbytes` and
// `copy_into(memoryview)`), whose bytes are on a GPU: it copies itself into
// the destination (one device-to-host copy, straight into the store), under
// the GIL.
class Pieces {
 public:
  Pieces(pyb::bytes meta, pyb::list buffers) {
    char* p;
    Py_ssize_t n;
    PyBytes_AsStringAndSize(meta.ptr(), &p, &n);
    meta_ = {reinterpret_cast<const uint8_t*>(p), static_cast<uint64_t>(n)};
    meta_obj_ = meta;
    for (auto b : buffers) {
      if (!PyObject_CheckBuffer(b.ptr()) && pyb::hasattr(b, "copy_into")) {
        fillers_.push_back(pyb::reinterpret_borrow<pyb::object>(b));
        bufs_.push_back({nullptr, b.attr("nbytes").cast<uint64_t>(), fillers_.back().ptr()});
        continue;
      }
      views_.emplace_back();
      if (PyObject_GetBuffer(b.ptr(), &views_.back(), PyBUF_CONTIG_RO) != 0) {
        views_.pop_back();
        throw pyb::error_already_set();
      }
      bufs_.push_back({static_cast<const uint8_t*>(views_.back().buf), static_cast<uint64_t>(views_.back().len)});
    }
  }
  ~Pieces() {
    for (auto& v : views_) PyBuffer_Release(&v);
  }
  uint64_t HeaderSize() const { return value_format::HeaderSize(bufs_.size()); }
  uint64_t TotalSize() const {
    uint64_t off = HeaderSize() + meta_.size;
    for (const auto& b : bufs_) off = value_format::AlignBuffer(off) + b.size;
    return off;
  }
  // Writes the whole value at `dst`. Safe without the GIL. `kind`'s low byte
  // is the value's kind; the bits above it (an array's element type, see
  // phalanx/_private/serialization.py kind_of) go to the header's last word.
  void WriteTo(uint8_t* dst, uint32_t kind) const {
    uint32_t head[4] = {value_format::kMagic, kind & 0xff, static_cast<uint32_t>(bufs_.size()), kind >> 8};
    std::memcpy(dst, head, 16);
    std::memcpy(dst + 16, &meta_.size, 8);
    for (size_t i = 0; i < bufs_.size(); ++i) std::memcpy(dst + 24 + 8 * i, &bufs_[i].size, 8);
    uint64_t off = HeaderSize();
    std::memcpy(dst + off, meta_.data, meta_.size);
    off += meta_.size;
    for (const auto& b : bufs_) {
      uint64_t start = value_format::AlignBuffer(off);
      std::memset(dst + off, 0, start - off);
      if (b.filler != nullptr) {
        Fill(b.filler, dst + start, b.size);
      } else {
        Copy(dst + start, b.data, b.size);
      }
      off = start + b.size;
    }
  }

 private:
  // Large copies use two threads: one core cannot saturate memory bandwidth.
  static void Copy(uint8_t* dst, const uint8_t* src, uint64_t n) {
    if (n < kParallelCopyBytes) {
      std::memcpy(dst, src, n);
      return;
    }
    uint64_t half = (n / 2) & ~4095ull;
    std::thread t([=] { std::memcpy(dst, src, half); });
    std::memcpy(dst + half, src + half, n - half);
    t.join();
  }

  // A device buffer writes its bytes (with the GIL, which WriteTo's callers may have let go).
  static void Fill(PyObject* filler, uint8_t* dst, uint64_t n) {
    pyb::gil_scoped_acquire gil;
    pyb::object view = pyb::reinterpret_steal<pyb::object>(
        PyMemoryView_FromMemory(reinterpret_cast<char*>(dst), static_cast<Py_ssize_t>(n), PyBUF_WRITE));
    if (!view) throw pyb::error_already_set();
    pyb::handle(filler).attr("copy_into")(view);
  }

  Piece meta_;
  pyb::object meta_obj_;
  std::vector<pyb::object> fillers_;
  std::vector<Py_buffer> views_;
  std::vector<Piece> bufs_;
};

pyb::bytes PackBytes(uint32_t kind, const Pieces& pieces) {
  uint64_t n = pieces.TotalSize();
  PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
  if (out == nullptr) throw pyb::error_already_set();
  pieces.WriteTo(reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(out)), kind);
  return pyb::reinterpret_steal<pyb::bytes>(out);
}

std::vector<std::string> Ids(const pyb::list& l) {
  std::vector<std::string> out;
  for (auto x : l) out.push_back(x.cast<std::string>());
  return out;
}

// Creates `id` in the store and writes the value into it. Returns false when
// the object already exists (a retried task wrote it before).
bool WriteToStore(const std::shared_ptr<CoreWorker>& core, const std::string& id, uint32_t kind,
                  const Pieces& pieces, const std::vector<std::string>& contained, bool hold) {
  uint64_t size = pieces.TotalSize();
  Result<uint64_t> off = Status::Internal("unset");
  {
    pyb::gil_scoped_release nogil;
    off = core->CreateObject(id, size, contained, hold);
  }
  if (!off.ok() && off.status().code() == StatusCode::kAlreadyExists && !hold) return false;
  ThrowIfError(off.status());
  {
    pyb::gil_scoped_release nogil;
    try {
      pieces.WriteTo(core->store_base() + off.value(), kind);
    } catch (...) {  // (a device buffer's copy failed: the object is never sealed half written)
      (void)core->AbortCreate(id);
      throw;
    }
    ThrowIfError(core->Seal(id));
  }
  return true;
}

}  // namespace

void BindSerialization(pyb::module_& m) {
  m.def("pack", [](uint32_t kind, pyb::bytes meta, pyb::list buffers) {
    Pieces p(meta, buffers);
    return PackBytes(kind, p);
  }, "Serialized value as bytes (for inline arguments).");

  m.def("packed_size", [](pyb::bytes meta, pyb::list buffers) { return Pieces(meta, buffers).TotalSize(); });

  // Puts a value: inline in the raylet when small (unless `in_store`: other
  // nodes can copy only store objects), else into the store. Returns its
  // serialized size (the store object's, when there).
  m.def("put_serialized", [](pyb::bytes id, uint32_t kind, pyb::bytes meta, pyb::list buffers, pyb::list contained,
                             bool hold, bool in_store) {
    auto core = RequireCore();
    Pieces p(meta, buffers);
    std::string sid = id;
    std::vector<std::string> ids = Ids(contained);
    uint64_t size = p.TotalSize();
    if (!in_store && size <= core->inline_threshold()) {
      pyb::bytes data = PackBytes(kind, p);
      std::string s = data;
      pyb::gil_scoped_release nogil;
      ThrowIfError(core->PutInline(sid, s, ids, hold));
      return size;
    }
    WriteToStore(core, sid, kind, p, ids, hold);
    return size;
  }, pyb::arg("id"), pyb::arg("kind"), pyb::arg("meta"), pyb::arg("buffers"), pyb::arg("contained"), pyb::arg("hold"),
     pyb::arg("in_store") = false);

  // A task's return value: bytes to send inline, or None once written to the
  // store. `hold`: a store copy is held by this worker until the raylet that
  // keeps it for the caller takes it over (a generator's items).
  m.def("prepare_return", [](pyb::bytes id, uint32_t kind, pyb::bytes meta, pyb::list buffers,
                             pyb::list contained, bool hold) -> pyb::object {
    auto core = RequireCore();
    Pieces p(meta, buffers);
    bool small = p.TotalSize() <= core->ReturnInlineLimit();
    if (small && pyb::len(contained) == 0) return PackBytes(kind, p);
    bool held = hold || core->ReturnsHeld(TaskIdOf(std::string(id)));
    // A direct actor call's result that contains refs goes to the store even
    // when small: held there by this worker, it holds the refs inside until
    // the caller's raylet takes it over (inline, the refs would be free
    // between this worker dropping them and the caller's raylet recording it).
    if (small && !held) return PackBytes(kind, p);
    // A direct actor call's store result stays held by this worker until the
    // caller's raylet takes it over (see CoreWorker::TaskDone).
    WriteToStore(core, std::string(id), kind, p, Ids(contained), held);
    return pyb::none();
  }, pyb::arg("id"), pyb::arg("kind"), pyb::arg("meta"), pyb::arg("buffers"), pyb::arg("contained"),
     pyb::arg("hold") = false);
}

}  // namespace phalanx::py
