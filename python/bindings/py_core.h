// Shared pieces of the phalanx._core extension: the process's CoreWorker,
// the Status -> Python exception bridge, and the pinned store view type.
// All functions here require the GIL unless they say otherwise.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <string>

#include "worker/core_worker.h"

namespace phalanx::py {

namespace pyb = pybind11;

// The process's connection to its raylet (null before init / after shutdown).
std::shared_ptr<CoreWorker> Core();
// Core(), or a RayletDiedError-style exception when not connected.
std::shared_ptr<CoreWorker> RequireCore();
void SetCore(std::shared_ptr<CoreWorker> core);

// Thrown by binding code; translated into the phalanx.exceptions class for
// the status code.
struct StatusError : std::exception {
  explicit StatusError(Status s) : status(std::move(s)), what_(status.message()) {}
  const char* what() const noexcept override { return what_.c_str(); }
  Status status;
  std::string what_;
};
void ThrowIfError(const Status& s);

// Runs `f` with the GIL released and returns its result.
template <typename F>
auto WithoutGil(F&& f) {
  pyb::gil_scoped_release nogil;
  return f();
}
void RegisterExceptionTranslator();
// A Status with this message means a signal handler raised while a call
// waited (CheckInterrupt, cluster.cc): the translator raises what the handler
// raised (KeyboardInterrupt for Ctrl-C; pytest-timeout's failure, a user's
// own exception), kept by KeepInterrupt for this thread.
inline constexpr char kInterrupted[] = "__interrupted__";
// Keeps the Python error now set (GIL held) for this thread's next kInterrupted.
void KeepInterrupt();
// Sets the kept error (GIL held), or KeyboardInterrupt where none was kept.
void RestoreInterrupt();

// An ObjectRef for `id` whose hold the raylet counts already (objects.cc).
pyb::object AdoptRef(const std::string& id);
// (kind, payload) for a resolved object: 0 inline bytes, 1 StoreBuffer,
// 2 lost (code, message), 3 still pending (objects.cc).
pyb::tuple ValueToPython(const std::shared_ptr<CoreWorker>& core, rpc::ObjectValue& v);

// A read-only view of one object in the store, pinned while this lives.
struct StoreBuffer {
  StoreBuffer(std::shared_ptr<CoreWorker> core, std::string id, const uint8_t* data, uint64_t size)
      : core(std::move(core)), id(std::move(id)), data(data), size(size) {}
  ~StoreBuffer() {
    if (core) core->Release(id);  // takes only the core's refs mutex; safe with the GIL held
  }
  std::shared_ptr<CoreWorker> core;
  std::string id;
  const uint8_t* data;
  uint64_t size;
};

// The functions of phalanx._core, by area, each in the file named after it.
void BindCluster(pyb::module_& m);
void BindTasks(pyb::module_& m);
void BindObjects(pyb::module_& m);
void BindCollectives(pyb::module_& m);
void BindGroups(pyb::module_& m);
void BindGcs(pyb::module_& m);
void BindObjectRef(pyb::module_& m);
void BindSerialization(pyb::module_& m);
void BindActors(pyb::module_& m);
void BindPrivateMapping(pyb::module_& m);
// TaskCall (task_call.cc): next_task's named fields.
void BindTaskCall(pyb::module_& m);
pyb::object MakeTaskCall(std::initializer_list<pyb::object> fields);

}  // namespace phalanx::py
