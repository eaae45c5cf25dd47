// The cluster of phalanx._core: connecting to the node's raylet, placement
// groups, and what the raylets tell of themselves (timeline, memory, counters).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <vector>

#include "core/ids.h"
#include "python/bindings/py_core.h"

namespace phalanx::py {

namespace {

Status CheckInterrupt() {
  pyb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) {
    KeepInterrupt();
    return Status::Internal(kInterrupted);
  }
  return Status::OK();
}

// A counters message's numbers as a dict, by field name (rpc::StatsReply).
pyb::dict CountersDict(const google::protobuf::Message& m) {
  pyb::dict d;
  const auto* desc = m.GetDescriptor();
  const auto* refl = m.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const auto* f = desc->field(i);
    pyb::str key(std::string(f->name()));
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        d[key] = refl->GetUInt64(m, f);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
        d[key] = refl->GetInt64(m, f);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
        d[key] = refl->GetDouble(m, f);
        break;
      default:
        break;
    }
  }
  return d;
}

}  // namespace

void BindCluster(pyb::module_& m) {
  m.def("connect", [](const std::string& socket, bool is_worker, const std::string& token, int64_t timeout_ms) {
    CoreWorkerOptions o;
    o.socket_path = socket;
    o.is_worker = is_worker;
    o.worker_token = token;
    o.connect_timeout_ms = timeout_ms;
    auto r = WithoutGil([&] { return CoreWorker::Connect(o); });
    ThrowIfError(r.status());
    std::shared_ptr<CoreWorker> core = std::move(r).value();
    core->SetInterruptCheck(&CheckInterrupt);
    SetCore(core);
    return pyb::dict(pyb::arg("node_id") = pyb::bytes(core->node_id()),
                     pyb::arg("client_id") = pyb::bytes(core->client_id()),
                     pyb::arg("session_dir") = core->session_dir(), pyb::arg("gcs_address") = core->gcs_address(),
                     pyb::arg("store_capacity") = core->store_capacity(),
                     pyb::arg("inline_threshold") = core->inline_threshold());
  });
  m.def("disconnect", [] { SetCore(nullptr); });
  m.def("is_connected", [] { return static_cast<bool>(Core()); });

  // Placement groups: (group id, ready ref).
  m.def("create_placement_group", [](const std::vector<std::map<std::string, double>>& bundles, int strategy,
                                     const std::string& name, const std::string& ns, bool detached,
                                     pyb::object ready_value) {
    auto core = RequireCore();
    rpc::PlacementGroupInfo info;
    info.set_pg_id(core->NextTaskId());
    // What get(pg.ready()) returns: the caller's handle, given the id.
    if (!ready_value.is_none()) info.set_ready_value(ready_value(pyb::bytes(info.pg_id())).cast<std::string>());
    info.set_name(name);
    info.set_namespace_name(ns);
    info.set_strategy(static_cast<rpc::PlacementStrategy>(strategy));
    info.set_detached(detached);
    for (const auto& b : bundles) {
      auto* out = info.add_bundles();
      for (const auto& [k, v] : b) (*out->mutable_resources())[k] = v;
    }
    ThrowIfError(core->CreatePlacementGroup(info));
    return pyb::make_tuple(pyb::bytes(info.pg_id()), AdoptRef(MakeObjectId(info.pg_id(), 1)));
  });
  m.def("placement_group_call", [](int type, pyb::bytes pg_id, const std::string& name, const std::string& ns,
                                   int64_t timeout_ms) -> pyb::object {
    auto core = RequireCore();
    rpc::PlacementGroupRequest req;
    req.set_pg_id(pg_id);
    req.set_name(name);
    req.set_namespace_name(ns);
    req.set_all(type == 2);
    uint16_t t = type == 1 ? rpc::PG_REMOVE : rpc::PG_GET;
    auto r = WithoutGil([&] { return core->PlacementGroupCall(t, req, timeout_ms); });
    ThrowIfError(r.status());
    auto row = [](const rpc::PlacementGroupInfo& g) {
      pyb::list bundles;
      for (const auto& b : g.bundles()) {
        pyb::dict res;
        for (const auto& [k, v] : b.resources()) res[pyb::str(k)] = v;
        bundles.append(pyb::make_tuple(res, pyb::bytes(b.node_id())));
      }
      return pyb::make_tuple(pyb::bytes(g.pg_id()), g.name(), static_cast<int>(g.strategy()),
                             static_cast<int>(g.state()), bundles, g.why_pending(),
                             pyb::make_tuple(g.requested_us(), g.created_us(), g.scheduling_attempts()));
    };
    if (type != 2) return row(r.value().info());
    pyb::list out;  // (type 2: every group)
    for (const auto& g : r.value().groups()) out.append(row(g));
    return out;
  });

  // The timeline: [{node_id, address, offset_ns, rtt_ns, error, rings: [{pid, label, start_ns, written,
  // capacity, records (bytes: 128 each, core/trace.h's Record)}]}], this node first.
  m.def("collect_trace", [](uint64_t since_ns, bool all_nodes, int64_t timeout_ms) {
    auto core = RequireCore();
    auto r = WithoutGil([&] { return core->CollectTrace(since_ns, all_nodes, timeout_ms); });
    ThrowIfError(r.status());
    pyb::list nodes;
    for (const auto& n : r.value().nodes()) {
      pyb::list rings;
      for (const auto& g : n.rings()) {
        rings.append(pyb::dict(pyb::arg("pid") = g.pid(), pyb::arg("label") = g.label(),
                               pyb::arg("start_ns") = g.start_ns(), pyb::arg("written") = g.written(),
                               pyb::arg("capacity") = g.capacity(), pyb::arg("records") = pyb::bytes(g.records())));
      }
      nodes.append(pyb::dict(pyb::arg("node_id") = ToHex(n.node_id()), pyb::arg("address") = n.address(),
                             pyb::arg("offset_ns") = n.offset_ns(), pyb::arg("rtt_ns") = n.rtt_ns(),
                             pyb::arg("error") = n.error(), pyb::arg("rings") = rings,
                             pyb::arg("counters") = CountersDict(n.counters())));
    }
    return nodes;
  });
  // `phalanx memory`: [{node_id, address, store_capacity, store_used, spilled_bytes, objects, error,
  // list: [{object_id, size, where, refs, remote_node, holders: [(kind, who, count)]}]}], this node first.
  m.def("memory_summary", [](uint32_t max_objects, bool all_nodes, int64_t timeout_ms) {
    auto core = RequireCore();
    auto r = WithoutGil([&] { return core->MemorySummary(max_objects, all_nodes, timeout_ms); });
    ThrowIfError(r.status());
    pyb::list nodes;
    for (const auto& n : r.value().nodes()) {
      pyb::list objects;
      for (const auto& o : n.list()) {
        pyb::list holders;
        for (const auto& h : o.holders()) holders.append(pyb::make_tuple(h.kind(), h.who(), h.count()));
        objects.append(pyb::dict(pyb::arg("object_id") = ToHex(o.object_id()), pyb::arg("size") = o.size(),
                                 pyb::arg("where") = o.where(), pyb::arg("refs") = o.refs(),
                                 pyb::arg("remote_node") = ToHex(o.remote_node()), pyb::arg("holders") = holders));
      }
      nodes.append(pyb::dict(pyb::arg("node_id") = ToHex(n.node_id()), pyb::arg("address") = n.address(),
                             pyb::arg("store_capacity") = n.store_capacity(), pyb::arg("store_used") = n.store_used(),
                             pyb::arg("spilled_bytes") = n.spilled_bytes(), pyb::arg("objects") = n.objects(),
                             pyb::arg("error") = n.error(), pyb::arg("list") = objects));
    }
    return nodes;
  });
  m.def("stats", [](int64_t timeout_ms) {
    auto core = RequireCore();
    auto r = WithoutGil([&] { return core->Stats(timeout_ms); });
    ThrowIfError(r.status());
    return CountersDict(r.value());
  });
}

}  // namespace phalanx::py
