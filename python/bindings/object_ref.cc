// phalanx._core.ObjectRef: a reference to an object. Each live instance
// counts one local reference with the process's CoreWorker; the raylet hears
// only when the count for an id crosses zero.
#include <pybind11/pybind11.h>

#include "core/ids.h"
#include "python/bindings/py_core.h"

namespace phalanx::py {

namespace {

class ObjectRef {
 public:
  // `adopt`: the reference was already counted (a return of our own submission or put).
  ObjectRef(std::string id, bool adopt) : id_(std::move(id)), core_(Core()) {
    if (!core_) return;
    adopt ? core_->AdoptLocalRef(id_) : core_->AddLocalRef(id_);
  }
  ~ObjectRef() {
    if (core_) core_->RemoveLocalRef(id_);
  }
  ObjectRef(const ObjectRef&) = delete;
  ObjectRef& operator=(const ObjectRef&) = delete;
  const std::string& id() const { return id_; }

 private:
  std::string id_;
  std::shared_ptr<CoreWorker> core_;
};

}  // namespace

void BindObjectRef(pyb::module_& m) {
  pyb::class_<ObjectRef>(m, "ObjectRef", "A reference to an object in the phalanx cluster.")
      .def(pyb::init([](pyb::bytes id) {
             std::string s = id;
             if (s.size() != kObjectIdSize) throw pyb::value_error("an ObjectRef id is 20 bytes");
             return std::make_unique<ObjectRef>(std::move(s), false);
           }),
           pyb::arg("id"))
      .def_static("_adopt", [](pyb::bytes id) { return std::make_unique<ObjectRef>(std::string(id), true); })
      .def("binary", [](const ObjectRef& r) { return pyb::bytes(r.id()); })
      .def("hex", [](const ObjectRef& r) { return ToHex(r.id()); })
      .def("task_id", [](const ObjectRef& r) { return pyb::bytes(TaskIdOf(r.id())); })
      .def("__hash__", [](const ObjectRef& r) { return std::hash<std::string>()(r.id()); })
      .def("__eq__",
           [](const ObjectRef& a, pyb::object b) {
             if (!pyb::isinstance<ObjectRef>(b)) return false;
             return a.id() == b.cast<const ObjectRef&>().id();
           })
      .def("__repr__", [](const ObjectRef& r) { return "ObjectRef(" + ToHex(r.id()) + ")"; })
      .def("__reduce__", [](pyb::object self) {
        // Serialization records the reference as contained in the value being built.
        return pyb::module_::import("phalanx._private.serialization").attr("reduce_object_ref")(self);
      });
}

}  // namespace phalanx::py
