// phalanx._core: the Python face of the core worker library. Python code in
// phalanx/ builds on these functions; users never import this directly.
// Waits release the GIL and check for Ctrl-C every 100 ms. This file holds
// the process's CoreWorker and the Status -> exception bridge; the functions
// are bound by area, each in its own file (Bind* in py_core.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/bindings/py_core.h"

namespace phalanx::py {

namespace {

std::mutex g_core_mu;
std::shared_ptr<CoreWorker> g_core;  // guarded by g_core_mu

}  // namespace

std::shared_ptr<CoreWorker> Core() {
  std::lock_guard<std::mutex> l(g_core_mu);
  return g_core;
}

std::shared_ptr<CoreWorker> RequireCore() {
  auto c = Core();
  if (!c) throw StatusError(Status::Unavailable("phalanx is not initialized: call phalanx.init() first"));
  return c;
}

void SetCore(std::shared_ptr<CoreWorker> core) {
  std::shared_ptr<CoreWorker> old;
  {
    std::lock_guard<std::mutex> l(g_core_mu);
    old = std::move(g_core);
    g_core = std::move(core);
  }
  if (old) {
    pyb::gil_scoped_release nogil;
    old->Shutdown();
  }
}

void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

namespace {
// The error a signal handler raised during this thread's wait (KeepInterrupt).
thread_local PyObject* t_kept_type = nullptr;
thread_local PyObject* t_kept_value = nullptr;
thread_local PyObject* t_kept_tb = nullptr;
}  // namespace

void KeepInterrupt() {
  Py_XDECREF(t_kept_type);
  Py_XDECREF(t_kept_value);
  Py_XDECREF(t_kept_tb);
  PyErr_Fetch(&t_kept_type, &t_kept_value, &t_kept_tb);  // (clears the error; ours now)
}

void RestoreInterrupt() {
  if (t_kept_type == nullptr) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    return;
  }
  PyErr_Restore(t_kept_type, t_kept_value, t_kept_tb);  // (steals the references)
  t_kept_type = t_kept_value = t_kept_tb = nullptr;
}

void RegisterExceptionTranslator() {
  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      if (e.status.message() == kInterrupted) {
        RestoreInterrupt();
        return;
      }
      const char* name = "PhalanxError";
      switch (e.status.code()) {
        case StatusCode::kInvalidArgument: PyErr_SetString(PyExc_ValueError, e.what()); return;
        case StatusCode::kTimedOut: name = "GetTimeoutError"; break;
        case StatusCode::kUnavailable: name = "UnavailableError"; break;
        case StatusCode::kOutOfMemory: name = "ObjectStoreFullError"; break;
        case StatusCode::kWorkerDied: name = "WorkerCrashedError"; break;
        case StatusCode::kObjectLost: name = "ObjectLostError"; break;
        case StatusCode::kActorDied: name = "ActorDiedError"; break;
        case StatusCode::kActorUnavailable: name = "ActorUnavailableError"; break;
        case StatusCode::kCancelled: name = "TaskCancelledError"; break;
        case StatusCode::kInfeasible: name = "InfeasibleError"; break;
        case StatusCode::kCollectiveFailed: name = "CollectiveError"; break;
        case StatusCode::kNotFound: name = "NotFoundError"; break;
        default: break;
      }
      pyb::gil_scoped_acquire gil;
      pyb::object cls = pyb::module_::import("phalanx.exceptions").attr(name);
      PyErr_SetString(cls.ptr(), e.what());
    }
  });
}

}  // namespace phalanx::py

using namespace phalanx::py;

PYBIND11_MODULE(_core, m) {
  m.doc() = "phalanx core worker bindings (internal)";
  RegisterExceptionTranslator();
  BindTaskCall(m);
  BindObjects(m);
  BindObjectRef(m);
  BindSerialization(m);
  BindPrivateMapping(m);
  BindCluster(m);
  BindTasks(m);
  BindActors(m);
  BindCollectives(m);
  BindGroups(m);
  BindGcs(m);
}
