// Writable views of store objects that never change the stored object: the
// object's pages are mapped again, privately (MAP_PRIVATE), so reads share
// the store's memory and the first write to a page gives this process its
// own copy of that page. torch tensors from `get` use them: torch has no
// read-only tensors, so a shared view would let one in-place op change the
// object under every other reader on the node.
#include <pybind11/pybind11.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "python/bindings/py_core.h"

namespace phalanx::py {

namespace {

// One private mapping; unmapped when the last Python reference goes. Keeps
// `source` (a view of the pinned store object) alive: pages not yet written
// are the store's, so the object must not be freed and reused under them.
class PrivateMapping {
 public:
  PrivateMapping(uint8_t* map, size_t map_len, uint8_t* data, size_t size, pyb::object source)
      : map_(map), map_len_(map_len), data_(data), size_(size), source_(std::move(source)) {}
  ~PrivateMapping() { ::munmap(map_, map_len_); }
  PrivateMapping(const PrivateMapping&) = delete;
  PrivateMapping& operator=(const PrivateMapping&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* map_;
  size_t map_len_;
  uint8_t* data_;
  size_t size_;
  pyb::object source_;
};

}  // namespace

void BindPrivateMapping(pyb::module_& m) {
  pyb::class_<PrivateMapping, std::unique_ptr<PrivateMapping>>(m, "PrivateMapping", pyb::buffer_protocol())
      .def_buffer([](PrivateMapping& p) {
        return pyb::buffer_info(p.data(), 1, pyb::format_descriptor<uint8_t>::format(), 1,
                                {static_cast<pyb::ssize_t>(p.size())}, {1}, /*readonly=*/false);
      })
      .def("__len__", [](const PrivateMapping& p) { return p.size(); });

  // A writable copy-on-write view of `view`'s bytes when they lie in this
  // process's store mapping (None otherwise: the caller copies them). Raises
  // OSError when the kernel refuses the mapping.
  m.def("private_mapping", [](pyb::buffer view) -> pyb::object {
    auto core = Core();
    pyb::buffer_info info = view.request();
    if (!core || info.size == 0 || info.itemsize != 1) return pyb::none();
    auto* p = static_cast<uint8_t*>(info.ptr);
    uint8_t* base = core->store_base();
    uint64_t size = static_cast<uint64_t>(info.size);
    if (p < base || p + size > base + core->store_capacity()) return pyb::none();
    uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    uint64_t off = static_cast<uint64_t>(p - base);
    uint64_t first = off & ~(page - 1);
    size_t len = static_cast<size_t>(((off + size + page - 1) & ~(page - 1)) - first);
    void* map = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, core->store_fd(),
                       static_cast<off_t>(first));
    if (map == MAP_FAILED) {
      int err = errno;
      PyErr_Format(PyExc_OSError, "cannot map %llu bytes of the object store privately: %s",
                   static_cast<unsigned long long>(size), std::strerror(err));
      throw pyb::error_already_set();
    }
    auto* data = static_cast<uint8_t*>(map) + (off - first);
    return pyb::cast(std::make_unique<PrivateMapping>(static_cast<uint8_t*>(map), len, data, size,
                                                      pyb::reinterpret_borrow<pyb::object>(view)));
  }, pyb::arg("view"));
}

}  // namespace phalanx::py
