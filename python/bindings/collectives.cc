// The collectives of phalanx._core: reduce and allreduce through the
// raylet, the static groups' rendezvous, and objects located on other ranks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "python/bindings/py_core.h"

namespace phalanx::py {

void BindCollectives(pyb::module_& m) {
  m.def("reduce", [](pyb::bytes out_id, std::vector<std::string> inputs, std::string op, int num_objects,
                     int64_t timeout_ms) {
    auto core = RequireCore();
    rpc::ReduceObjects r;
    r.set_out_id(out_id);
    for (auto& id : inputs) r.add_input_ids(std::move(id));
    r.set_op(std::move(op));
    r.set_num_objects(num_objects);
    r.set_timeout_ms(timeout_ms);
    ThrowIfError(WithoutGil([&] { return core->Reduce(r); }));
  }, "Asks the raylet to combine `inputs` into `out_id` (held by this process: adopt a ref to it).");
  m.def("allreduce", [](std::vector<std::string> out_ids, std::vector<std::string> inputs, std::string op,
                        int64_t timeout_ms) {
    auto core = RequireCore();
    rpc::ReduceObjects r;
    for (auto& id : out_ids) r.add_out_ids(std::move(id));
    for (auto& id : inputs) r.add_input_ids(std::move(id));
    r.set_op(std::move(op));
    r.set_timeout_ms(timeout_ms);
    ThrowIfError(WithoutGil([&] { return core->Reduce(r); }));
  }, pyb::arg("out_ids"), pyb::arg("inputs"), pyb::arg("op"), pyb::arg("timeout_ms"),
     "Asks the raylet to combine `inputs` into each of `out_ids` (one per input, made on its node; held here).");
  m.def("rendezvous", [](const std::string& key, int rank, int world, pyb::bytes payload, int64_t timeout_ms,
                         std::vector<std::string> rank_nodes, std::vector<std::string> rank_clients) {
    auto core = RequireCore();
    rpc::Rendezvous r;
    for (auto& n : rank_nodes) r.add_rank_nodes(std::move(n));
    for (auto& c : rank_clients) r.add_rank_clients(std::move(c));
    r.set_key(key);
    r.set_rank(rank);
    r.set_world(world);
    r.set_payload(payload);
    r.set_timeout_ms(timeout_ms);
    auto got = WithoutGil([&] { return core->Rendezvous(r); });
    ThrowIfError(got.status());
    pyb::list out;
    for (auto& p : got.value()) out.append(pyb::bytes(p));
    return out;
  }, pyb::arg("key"), pyb::arg("rank"), pyb::arg("world"), pyb::arg("payload"), pyb::arg("timeout_ms"),
     pyb::arg("rank_nodes") = std::vector<std::string>(), pyb::arg("rank_clients") = std::vector<std::string>(),
     "Meets the other ranks of a static group at `key`; every rank's payload, by rank (GetTimeoutError after "
     "`timeout_ms`, naming the ranks missing; CollectiveError once a node in `rank_nodes` dies or a process in "
     "`rank_clients` exits).");
  m.def("reduced_inputs", [](pyb::bytes out_id, int64_t timeout_ms) {
    auto core = RequireCore();
    auto r = WithoutGil([&] { return core->ReducedInputs(out_id, timeout_ms); });
    ThrowIfError(r.status());
    pyb::list out;
    for (auto& id : r.value()) out.append(pyb::bytes(id));
    return out;
  });
}

}  // namespace phalanx::py
