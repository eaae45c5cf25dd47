// The actor calls of phalanx._core: look-up by name, kill, checkpoints, and the calls a process has in
// flight to an actor (max_pending_calls; an actor's end when its creator's last handle goes,
// python/phalanx/_private/actor_lifetime.py).
#include <pybind11/pybind11.h>

#include <string>

#include "python/bindings/py_core.h"

namespace phalanx::py {

void BindActors(pyb::module_& m) {
  m.def("get_actor", [](const std::string& name, int64_t timeout_ms) {
    auto core = RequireCore();
    auto r = WithoutGil([&] { return core->GetActor(name, timeout_ms); });
    ThrowIfError(r.status());
    return pyb::make_tuple(pyb::bytes(r.value().actor_id()), pyb::bytes(r.value().function_id()),
                           r.value().class_name(), r.value().state());
  });
  m.def("kill_actor", [](pyb::bytes actor_id, bool no_restart, int64_t timeout_ms) {
    auto core = RequireCore();
    std::string id = actor_id;
    ThrowIfError(WithoutGil([&] { return core->KillActor(id, no_restart, timeout_ms); }));
  });

  m.def("actor_checkpoint", [](pyb::bytes actor_id, pyb::object state, int64_t timeout_ms) -> pyb::object {
    auto core = RequireCore();
    std::string id = actor_id;
    bool save = !state.is_none();
    std::string bytes = save ? std::string(state.cast<pyb::bytes>()) : std::string();
    auto r = WithoutGil([&] { return core->ActorCheckpoint(id, save, std::move(bytes), timeout_ms); });
    ThrowIfError(r.status());
    if (save || !r.value().found()) return pyb::none();
    return pyb::bytes(r.value().state());
  }, "An actor's worker keeps its state (bytes) in the GCS, or (state=None) reads the last kept (None: none).");
  m.def("actor_calls_pending", [](pyb::bytes actor_id) {
    std::string id = actor_id;
    pyb::gil_scoped_release nogil;  // (it may ask the raylet)
    return RequireCore()->ActorCallsPending(id);
  });
  m.def("actor_calls_in_flight", [](pyb::bytes actor_id, size_t limit) {
    std::string id = actor_id;
    pyb::gil_scoped_release nogil;  // (at the limit, it asks the raylet)
    return RequireCore()->ActorCallsInFlight(id, limit);
  });
}

}  // namespace phalanx::py
