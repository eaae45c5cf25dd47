// The objects of phalanx._core: the pinned store view, ids, get, wait, refs.
// (Puts and values are serialization.cc's, ObjectRef object_ref.cc's.)
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "core/ids.h"
#include "python/bindings/py_core.h"

namespace phalanx::py {

pyb::object AdoptRef(const std::string& id) {
  // Leaked on purpose: a static py::object would be released after the interpreter is gone.
  static pyb::object* adopt = new pyb::object(pyb::module_::import("phalanx._core").attr("ObjectRef").attr("_adopt"));
  return (*adopt)(pyb::bytes(id));
}

// (kind, payload) for a resolved object: 0 inline bytes, 1 StoreBuffer,
// 2 lost (code, message), 3 still pending.
pyb::tuple ValueToPython(const std::shared_ptr<CoreWorker>& core, rpc::ObjectValue& v) {
  switch (v.state()) {
    case rpc::OBJ_INLINE: return pyb::make_tuple(0, pyb::bytes(v.data()));
    case rpc::OBJ_IN_STORE: {
      auto buf = std::make_shared<StoreBuffer>(core, v.object_id(), core->store_base() + v.offset(), v.size());
      return pyb::make_tuple(1, pyb::cast(buf));
    }
    case rpc::OBJ_LOST: return pyb::make_tuple(2, pyb::make_tuple(v.error_code(), v.error()));
    default: return pyb::make_tuple(3, pyb::none());
  }
}

void BindObjects(pyb::module_& m) {
  pyb::class_<StoreBuffer, std::shared_ptr<StoreBuffer>>(m, "StoreBuffer", pyb::buffer_protocol())
      .def_buffer([](StoreBuffer& b) {
        return pyb::buffer_info(const_cast<uint8_t*>(b.data), 1, pyb::format_descriptor<uint8_t>::format(), 1,
                                {static_cast<pyb::ssize_t>(b.size)}, {1}, /*readonly=*/true);
      })
      .def("__len__", [](const StoreBuffer& b) { return b.size; })
      // The object whose bytes these are (a GPU object's descriptor is trusted only in its own object).
      .def_property_readonly("object_id", [](const StoreBuffer& b) { return pyb::bytes(b.id); });

  // (address, bytes) of this process's mapping of the store, or (0, 0) when
  // not connected: a GPU process registers it with CUDA (tensors.py).
  m.def("store_region", [] {
    auto core = Core();
    uint64_t base = 0, size = 0;
    if (core && core->store_base() != nullptr) {
      base = reinterpret_cast<uintptr_t>(core->store_base());
      size = core->store_capacity();
    }
    return pyb::make_tuple(base, size);
  });
  m.def("next_put_id", [] { return pyb::bytes(RequireCore()->NextPutId()); });
  m.def("object_id", [](pyb::bytes task_id, uint32_t index) { return pyb::bytes(MakeObjectId(task_id, index)); });
  m.def("adopt_ref", [](pyb::bytes id) { return AdoptRef(id); });
  m.def(
      "get",
      [](std::vector<std::string> ids, int64_t timeout_ms, bool locate_only) {
        auto core = RequireCore();
        auto r = WithoutGil([&] { return core->Get(ids, timeout_ms, locate_only); });
        ThrowIfError(r.status());
        pyb::list out;
        for (auto& v : r.value()) out.append(ValueToPython(core, v));
        return out;
      },
      pyb::arg("ids"), pyb::arg("timeout_ms"), pyb::arg("locate_only") = false,
      "Values of `ids` (kind, payload); `locate_only`: an object on another node is not copied here "
      "(it comes back pending).");

  m.def("wait", [](std::vector<std::string> ids, int num_returns, int64_t timeout_ms, bool fetch_local) {
    auto core = RequireCore();
    auto r = WithoutGil([&] { return core->Wait(ids, num_returns, timeout_ms, fetch_local); });
    ThrowIfError(r.status());
    pyb::list out;
    for (auto& id : r.value()) out.append(pyb::bytes(id));
    return out;
  });

  m.def("flush", [] {
    auto core = Core();
    if (core) ThrowIfError(core->Flush());
  });
  // GPU objects (phalanx/_private/gpu_objects.py): this process keeps
  // `ids` on its GPU until the raylet frees them (call before storing them).
  m.def("device_held", [](std::vector<std::string> ids) {
    for (const auto& id : ids) {
      if (id.size() != kObjectIdSize) throw pyb::value_error("device_held: not an object id");
    }
    ThrowIfError(RequireCore()->DeviceHeld(ids));
  });
  // Ids of those the raylet freed since the last call (bytes), once there is
  // one, or [] after `timeout_ms` or when not connected.
  m.def("freed_device_objects", [](int64_t timeout_ms) {
    auto core = Core();
    std::vector<std::string> ids;
    if (core) ids = WithoutGil([&] { return core->FreedDeviceObjects(timeout_ms); });
    pyb::list out;
    for (auto& id : ids) out.append(pyb::bytes(id));
    return out;
  });
  m.def("local_ref_count", [](pyb::bytes id) {
    auto core = Core();
    return core ? core->LocalRefCount(id) : 0;
  });
}

}  // namespace phalanx::py
