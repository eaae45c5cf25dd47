// phalanx._core: the Python face of the core worker library. Python code in
// phalanx/ builds on these functions; users never import this directly.
// Waits release the GIL and check for Ctrl-C every 100 ms.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include "core/ids.h"
#include "core/redis_client.h"
#include "core/tls.h"
#include "core/trace.h"
#include "python/bindings/py_core.h"

namespace phalanx::py {

namespace {

std::mutex g_core_mu;
std::shared_ptr<CoreWorker> g_core;  // guarded by g_core_mu
const char kInterrupted[] = "__interrupted__";
// submit_task's strategy with this bit: PlacementGroupSchedulingStrategy(...,
// placement_group_capture_child_tasks=True) (remote_function.strategy_args).
constexpr int kCaptureFlag = 256;

// The job and namespace that tasks submitted from here belong to: the
// driver's for the process, or, in a worker, those of the task this thread
// runs (next_task sets them; set_job_context for another thread), which is
// then their parent (phalanx.cancel's recursive=True reaches them).
struct JobContext {
  std::string job_id;
  std::string ns;
  std::string parent_task;
  std::string capture_pg;  // a placement group that captures what this task submits
  std::string pg;          // the placement group the running task was placed in (Ray's get_placement_group_id)
};
std::string g_actor_pg;  // the placement group this process's actor was created in; guarded by g_job_mu
// The placement group an actor of this process was created in with
// placement_group_capture_child_tasks: what its calls submit goes there too.
std::string g_actor_capture_pg;  // guarded by g_job_mu
std::atomic<bool> g_actor_captures{false};  // g_actor_capture_pg is set (no lock per submit otherwise)
std::mutex g_job_mu;
JobContext g_job;  // guarded by g_job_mu
std::atomic<uint64_t> g_job_generation{1};
thread_local JobContext tl_job;
thread_local bool tl_job_set = false;        // set for this thread (a task's)
// This thread runs an async actor's event loop: its calls interleave, so the
// parent of what it submits is the asyncio task's own (state.current_task).
thread_local bool tl_job_async = false;
thread_local uint64_t tl_job_generation = 0;  // else: the copy of g_job it holds

const JobContext& CurrentJob() {
  if (tl_job_set) return tl_job;
  uint64_t gen = g_job_generation.load(std::memory_order_acquire);
  if (tl_job_generation != gen) {  // copied once per thread and init()
    std::lock_guard<std::mutex> l(g_job_mu);
    tl_job = g_job;
    tl_job_generation = gen;
  }
  return tl_job;
}

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

Status CheckInterrupt() {
  pyb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) {
    PyErr_Clear();
    return Status::Internal(kInterrupted);
  }
  return Status::OK();
}

pyb::object RedisToPython(const RedisReply& r) {
  switch (r.type) {
    case RedisReply::kString:
    case RedisReply::kStatus: return pyb::bytes(r.str);
    case RedisReply::kInteger: return pyb::int_(r.integer);
    case RedisReply::kArray: {
      pyb::list l;
      for (const auto& e : r.elements) l.append(RedisToPython(e));
      return std::move(l);
    }
    case RedisReply::kError: {
      if (r.str.rfind("NOAUTH", 0) == 0) {
        throw StatusError(Status::Unavailable("this cluster's redis-server (GCS) requires the cluster token: "
                                              "set PHALANX_CLUSTER_TOKEN to the token its head printed"));
      }
      throw StatusError(Status::Internal("redis error: " + r.str));
    }
    default: return pyb::none();
  }
}

// One command on a fresh connection; for the CLI, init(address=...) and
// tests. The token (PHALANX_CLUSTER_TOKEN) and TLS (PHALANX_TLS=1) come from
// the environment, as for every process of the cluster.
pyb::object RedisCommand(const std::string& host, int port, const std::vector<std::string>& args, double timeout_s) {
  const char* env = std::getenv("PHALANX_CLUSTER_TOKEN");
  std::string token = env ? env : "";
  auto run = [&]() -> Result<RedisReply> {
    pyb::gil_scoped_release unlocked;
    PHALANX_ASSIGN_OR_RETURN(auto c, RedisConnection::Open(host, port, token, TlsFromEnvironment(token),
                                                           static_cast<int64_t>(std::max(timeout_s, 0.001) * 1000)));
    return c->Command(args);
  };
  Result<RedisReply> r = run();
  if (!r.ok()) throw StatusError(r.status());
  return RedisToPython(r.value());
}

// A return value as the worker hands it in: (object_id, bytes or None (in store), contained ids).
void AddReturn(rpc::TaskDone* d, const pyb::tuple& t) {
  rpc::ReturnValue* rv = d->add_returns();
  rv->set_object_id(t[0].cast<std::string>());
  if (t[1].is_none()) {
    rv->set_in_store(true);
  } else {
    char* p;
    Py_ssize_t n;
    PyBytes_AsStringAndSize(t[1].ptr(), &p, &n);
    rv->set_data(p, n);
  }
  for (auto c : t[2].cast<pyb::list>()) rv->add_contained_ids(c.cast<std::string>());
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

void RegisterExceptionTranslator() {
  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      if (e.status.message() == kInterrupted) {
        PyErr_SetNone(PyExc_KeyboardInterrupt);
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

using namespace phalanx;
using namespace phalanx::py;

PYBIND11_MODULE(_core, m) {
  m.doc() = "phalanx core worker bindings (internal)";
  RegisterExceptionTranslator();
  BindTaskCall(m);

  pyb::class_<StoreBuffer, std::shared_ptr<StoreBuffer>>(m, "StoreBuffer", pyb::buffer_protocol())
      .def_buffer([](StoreBuffer& b) {
        return pyb::buffer_info(const_cast<uint8_t*>(b.data), 1, pyb::format_descriptor<uint8_t>::format(), 1,
                                {static_cast<pyb::ssize_t>(b.size)}, {1}, /*readonly=*/true);
      })
      .def("__len__", [](const StoreBuffer& b) { return b.size; });

  BindObjectRef(m);
  BindSerialization(m);
  BindPrivateMapping(m);

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

  m.def("next_task_id", [] { return pyb::bytes(RequireCore()->NextTaskId()); });
  m.def("next_put_id", [] { return pyb::bytes(RequireCore()->NextPutId()); });
  m.def("object_id", [](pyb::bytes task_id, uint32_t index) { return pyb::bytes(MakeObjectId(task_id, index)); });

  m.def("register_function", [](pyb::bytes id, const std::string& name, pyb::bytes pickled) {
    ThrowIfError(RequireCore()->RegisterFunction(id, name, pickled));
  });
  m.def("get_function", [](pyb::bytes id, int64_t timeout_ms) {
    auto core = RequireCore();
    std::string sid = id;
    auto r = WithoutGil([&] { return core->GetFunction(sid, timeout_ms); });
    ThrowIfError(r.status());
    return pyb::make_tuple(r.value().name(), pyb::bytes(r.value().pickled()));
  });

  // args: list of (keyword, object_id or None, inline bytes or None).
  m.def(
      "submit_task",
      [](pyb::bytes function_id, const std::string& name, pyb::list args, int num_returns, double num_cpus,
         int max_retries, pyb::list contained, int kind, pyb::bytes actor_id, const std::string& method_name,
         int max_restarts, int max_task_retries, const std::string& actor_name, bool detached,
         const std::map<std::string, double>& resources, int strategy, pyb::bytes affinity_node,
         bool affinity_soft, int generator, int64_t backpressure, int bundle_index, bool calls_unordered) {
        auto core = RequireCore();
        rpc::TaskSpec spec;
        spec.set_task_id(core->NextTaskId(kind == rpc::TASK_ACTOR_METHOD));
        spec.set_function_id(function_id);
        spec.set_function_name(name);
        spec.set_num_returns(num_returns);
        spec.set_num_cpus(num_cpus);
        spec.set_max_retries(max_retries);
        spec.set_caller_id(core->client_id());
        const JobContext& job = CurrentJob();
        if (!job.job_id.empty()) spec.set_job_id(job.job_id);
        if (!job.ns.empty()) spec.set_namespace_name(job.ns);
        if (!job.parent_task.empty()) {
          spec.set_parent_task_id(job.parent_task);
        } else if (tl_job_async) {  // the asyncio task's own (phalanx._private.state.current_task)
          static auto* current = new pyb::object(pyb::module_::import("phalanx._private.state").attr("current_task"));
          pyb::object t = current->attr("get")();
          if (!t.is_none()) spec.set_parent_task_id(t.cast<pyb::tuple>()[0].cast<std::string>());
        }
        spec.set_kind(static_cast<rpc::TaskKind>(kind));
        spec.set_calls_unordered(calls_unordered);
        for (const auto& [k, v] : resources) (*spec.mutable_resources())[k] = v;
        // (strategy | kCaptureFlag: a placement group that captures its children)
        bool capture = (strategy & kCaptureFlag) != 0;
        strategy &= ~kCaptureFlag;
        std::string capture_pg = job.capture_pg;
        if (capture_pg.empty() && kind != rpc::TASK_ACTOR_METHOD && g_actor_captures.load(std::memory_order_acquire)) {
          std::lock_guard<std::mutex> l(g_job_mu);
          capture_pg = g_actor_capture_pg;
        }
        if (strategy == rpc::STRATEGY_DEFAULT && !capture_pg.empty() && kind != rpc::TASK_ACTOR_METHOD) {
          // Submitted from a task or actor that captures its children: into its group, any bundle.
          strategy = rpc::STRATEGY_PLACEMENT_GROUP;
          affinity_node = pyb::bytes(capture_pg);
          bundle_index = -1;
          capture = true;
        }
        spec.set_strategy(static_cast<rpc::SchedulingStrategy>(strategy));
        if (strategy == rpc::STRATEGY_PLACEMENT_GROUP) {  // (affinity_node carries the group's id)
          spec.set_placement_group_id(affinity_node);
          spec.set_bundle_index(bundle_index);
          spec.set_capture_child_tasks(capture);
        } else {
          spec.set_affinity_node(affinity_node);
          spec.set_affinity_soft(affinity_soft);
        }
        if (generator != 0) {
          spec.set_generator(static_cast<rpc::GeneratorMode>(generator));
          spec.set_generator_backpressure(backpressure);
        }
        if (kind == rpc::TASK_ACTOR_CREATION) {
          spec.set_actor_id(spec.task_id());
          spec.set_max_restarts(max_restarts);
          spec.set_max_task_retries(max_task_retries);
          spec.set_actor_name(actor_name);
          spec.set_detached(detached);
        } else if (kind == rpc::TASK_ACTOR_METHOD) {
          spec.set_actor_id(actor_id);
          spec.set_method_name(method_name);
        }
        for (auto a : args) {
          auto t = a.cast<pyb::tuple>();
          rpc::TaskArg* arg = spec.add_args();
          arg->set_keyword(t[0].cast<std::string>());
          if (!t[1].is_none()) {
            arg->set_object_id(t[1].cast<std::string>());
          } else {
            char* p;
            Py_ssize_t n;
            PyBytes_AsStringAndSize(t[2].ptr(), &p, &n);
            arg->set_data(p, n);
          }
        }
        for (auto c : contained) spec.add_contained_ids(c.cast<std::string>());
        ThrowIfError(core->SubmitTask(spec));
        pyb::list refs;
        for (int i = 1; i <= num_returns; ++i) refs.append(AdoptRef(MakeObjectId(spec.task_id(), i)));
        return refs;
      },
      pyb::arg("function_id"), pyb::arg("name"), pyb::arg("args"), pyb::arg("num_returns"), pyb::arg("num_cpus"),
      pyb::arg("max_retries"), pyb::arg("contained"), pyb::arg("kind") = 0, pyb::arg("actor_id") = pyb::bytes(),
      pyb::arg("method_name") = "", pyb::arg("max_restarts") = 0, pyb::arg("max_task_retries") = 0,
      pyb::arg("actor_name") = "", pyb::arg("detached") = false,
      pyb::arg("resources") = std::map<std::string, double>(), pyb::arg("strategy") = 0,
      pyb::arg("affinity_node") = pyb::bytes(), pyb::arg("affinity_soft") = false, pyb::arg("generator") = 0,
      pyb::arg("backpressure") = 0, pyb::arg("bundle_index") = -1,
      pyb::arg("calls_unordered") = false);

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
                             static_cast<int>(g.state()), bundles, g.why_pending());
    };
    if (type != 2) return row(r.value().info());
    pyb::list out;  // (type 2: every group)
    for (const auto& g : r.value().groups()) out.append(row(g));
    return out;
  });

  m.def("adopt_ref", [](pyb::bytes id) { return AdoptRef(id); });
  BindActors(m);

  // The placement group of the running task or of this process's actor; empty bytes if none.
  m.def("current_placement_group", [] {
    std::string pg = CurrentJob().pg;
    if (pg.empty()) {
      std::lock_guard<std::mutex> l(g_job_mu);
      pg = g_actor_pg;
    }
    return pyb::bytes(pg);
  });

  // this_thread: only for the calling thread (a worker thread running a
  // task); else the process's default (a driver at init).
  m.def("set_job_context", [](pyb::bytes job_id, const std::string& ns, bool this_thread, pyb::bytes parent_task) {
    JobContext j{std::string(job_id), ns, std::string(parent_task)};
    if (this_thread) {
      tl_job_async = j.parent_task.empty();  // (an event loop's thread: see tl_job_async)
      tl_job = std::move(j);
      tl_job_set = true;
      return;
    }
    std::lock_guard<std::mutex> l(g_job_mu);
    g_job = std::move(j);
    g_job_generation.fetch_add(1, std::memory_order_release);
  });

  m.def("get", [](std::vector<std::string> ids, int64_t timeout_ms) {
    auto core = RequireCore();
    auto r = WithoutGil([&] { return core->Get(ids, timeout_ms); });
    ThrowIfError(r.status());
    pyb::list out;
    for (auto& v : r.value()) out.append(ValueToPython(core, v));
    return out;
  });

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
                        int64_t timeout_ms, bool on_input_nodes) {
    auto core = RequireCore();
    rpc::ReduceObjects r;
    for (auto& id : out_ids) r.add_out_ids(std::move(id));
    for (auto& id : inputs) r.add_input_ids(std::move(id));
    r.set_op(std::move(op));
    r.set_timeout_ms(timeout_ms);
    r.set_on_input_nodes(on_input_nodes);
    ThrowIfError(WithoutGil([&] { return core->Reduce(r); }));
  }, pyb::arg("out_ids"), pyb::arg("inputs"), pyb::arg("op"), pyb::arg("timeout_ms"),
     pyb::arg("on_input_nodes") = false,
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
  m.def("locate", [](std::vector<std::string> ids, std::vector<std::string> nodes, std::vector<uint64_t> sizes) {
    auto core = RequireCore();
    if (nodes.size() != ids.size() || sizes.size() != ids.size()) {
      throw pyb::value_error("locate() takes as many nodes and sizes as ids");
    }
    rpc::LocateObjects m;
    for (size_t i = 0; i < ids.size(); ++i) {
      m.add_object_ids(ids[i]);
      m.add_node_ids(nodes[i]);
      m.add_sizes(sizes[i]);
    }
    ThrowIfError(core->Locate(m));
  }, "Tells the raylet that these store objects are on those nodes (held by this process: hold refs to them).");
  m.def("reduced_inputs", [](pyb::bytes out_id, int64_t timeout_ms) {
    auto core = RequireCore();
    auto r = WithoutGil([&] { return core->ReducedInputs(out_id, timeout_ms); });
    ThrowIfError(r.status());
    pyb::list out;
    for (auto& id : r.value()) out.append(pyb::bytes(id));
    return out;
  });

  m.def("direct_calls_sent", [] {
    auto core = Core();
    return core ? core->direct_calls_sent() : 0;
  }, "How many actor method calls this process sent straight to an actor's worker.");
  m.def("local_ref_count", [](pyb::bytes id) {
    auto core = Core();
    return core ? core->LocalRefCount(id) : 0;
  });

  // Worker side. Returns a TaskCall (task_call.cc), its args as (keyword, kind,
  // payload) where kind/payload are as in get(); or a notice: ("cancel", task id),
  // ("cancelled", TaskCall) for one cancelled before it started.
  m.def("next_task", [](int64_t timeout_ms) -> pyb::object {
    auto core = RequireCore();
    auto r = WithoutGil([&] { return core->NextTask(timeout_ms); });
    ThrowIfError(r.status());
    rpc::PushTask& t = r.value();
    if (t.cancel()) return pyb::make_tuple("cancel", pyb::bytes(t.spec().task_id()));  // a notice, not a task
    const rpc::TaskSpec& s = t.spec();
    pyb::list args;
    int ref_index = 0;
    for (const auto& a : s.args()) {
      if (a.object_id().empty()) {
        args.append(pyb::make_tuple(a.keyword(), 0, pyb::bytes(a.data())));
      } else {
        pyb::tuple v = ValueToPython(core, *t.mutable_ref_args(ref_index++));
        args.append(pyb::make_tuple(a.keyword(), v[0], v[1]));
      }
    }
    // Tasks this one submits from this thread belong to its job (a thread
    // that runs it elsewhere sets the same with set_job_context).
    tl_job.job_id = s.job_id();
    tl_job.ns = s.namespace_name();
    tl_job.parent_task = s.task_id();
    tl_job.capture_pg = s.capture_child_tasks() ? s.placement_group_id() : std::string();
    tl_job.pg = s.placement_group_id();
    tl_job_async = false;
    if (s.kind() == rpc::TASK_ACTOR_CREATION) {  // (its calls' threads submit into its group too)
      std::lock_guard<std::mutex> l(g_job_mu);
      g_actor_capture_pg = tl_job.capture_pg;
      g_actor_pg = tl_job.pg;
      g_actor_captures.store(!g_actor_capture_pg.empty(), std::memory_order_release);
    }
    tl_job_set = true;  // (a worker's thread: never the driver's context)
    pyb::object resources = pyb::none();
    if (s.resources_size() > 0) {
      pyb::dict d;
      for (const auto& [k, v] : s.resources()) d[pyb::str(k)] = v;
      resources = d;
    }
    pyb::object task = MakeTaskCall(
        {pyb::bytes(s.task_id()), pyb::bytes(s.function_id()), pyb::str(s.function_name()), std::move(args),
         pyb::int_(s.num_returns()), pyb::int_(s.attempt()), pyb::int_(static_cast<int>(s.kind())),
         pyb::bytes(s.actor_id()), pyb::str(s.method_name()),
         pyb::cast(std::vector<int>(t.gpu_ids().begin(), t.gpu_ids().end())), pyb::bytes(s.job_id()),
         pyb::str(s.namespace_name()), pyb::float_(s.num_cpus()), std::move(resources),
         pyb::int_(static_cast<int>(s.generator())), pyb::int_(s.generator_backpressure())});
    // Cancelled before it started: the worker reports it so instead of running it.
    if (t.cancelled()) return pyb::make_tuple("cancelled", task);
    return task;
  });

  // returns: list of (object_id, bytes or None (in store), contained ids)
  m.def("task_done", [](pyb::bytes task_id, pyb::list returns, double exec_seconds, const std::string& error,
                        bool exiting, const std::string& name) {
    auto core = RequireCore();
    rpc::TaskDone d;
    d.set_task_id(task_id);
    if (trace::ProcessRing() != nullptr) {  // the timeline: this run, on this thread
      uint64_t dur = static_cast<uint64_t>(std::max(0.0, exec_seconds) * 1e9);
      trace::Emit(trace::kExec, trace::NowNs() - dur, dur, d.task_id(), name, 0, 0, std::string(),
                  error.empty() ? 0 : trace::kFailed);
    }
    d.set_exiting(exiting);
    d.set_exec_seconds(exec_seconds);
    d.set_error(error);
    for (auto x : returns) AddReturn(&d, x.cast<pyb::tuple>());
    pyb::gil_scoped_release nogil;
    ThrowIfError(core->TaskDone(std::move(d)));
  }, pyb::arg("task_id"), pyb::arg("returns"), pyb::arg("exec_seconds"), pyb::arg("error"),
     pyb::arg("exiting") = false, pyb::arg("name") = std::string());

  // Generators. Worker side: one item (a return tuple as in task_done), or
  // None with end=True and the number of items made.
  m.def("stream_item", [](pyb::bytes task_id, pyb::object item, bool end, uint64_t count) {
    auto core = RequireCore();
    rpc::TaskDone d;
    d.set_task_id(task_id);
    if (!item.is_none()) AddReturn(&d, item.cast<pyb::tuple>());
    d.set_stream_end(end);
    d.set_stream_items(count);
    pyb::gil_scoped_release nogil;
    ThrowIfError(core->StreamItem(std::move(d)));
  }, pyb::arg("task_id"), pyb::arg("item"), pyb::arg("end") = false, pyb::arg("count") = 0);
  // -> (consumed, dropped) once the caller has read `need` items, it let go, or at the timeout.
  m.def("stream_credit", [](pyb::bytes task_id, uint64_t need, int64_t timeout_ms) {
    auto core = RequireCore();
    std::string tid = task_id;
    auto r = WithoutGil([&] { return core->StreamCredit(tid, need, timeout_ms); });
    ThrowIfError(r.status());
    return pyb::make_tuple(r.value().consumed(), r.value().dropped());
  });
  // Caller side: -> (available, ended) once more than `consumed` items are there, the end, or the timeout.
  m.def("stream_next", [](pyb::bytes task_id, uint64_t consumed, int64_t timeout_ms) {
    auto core = RequireCore();
    std::string tid = task_id;
    auto r = WithoutGil([&] { return core->StreamNext(tid, consumed, timeout_ms); });
    ThrowIfError(r.status());
    return pyb::make_tuple(r.value().available(), r.value().ended());
  });
  // phalanx.cancel (see rpc::CancelTask).
  m.def("cancel", [](pyb::bytes task_id, bool force, bool recursive) {
    auto core = RequireCore();
    std::string tid = task_id;
    pyb::gil_scoped_release nogil;
    ThrowIfError(core->Cancel(tid, force, recursive));
  });
  m.def("cancel_requested", [](pyb::bytes task_id, bool read) {
    auto core = Core();
    if (!core) return false;
    std::string tid = task_id;
    pyb::gil_scoped_release nogil;
    return core->CancelRequested(tid, read);
  });
  m.def("cancel_signalled", [](pyb::bytes task_id) {
    auto core = Core();
    if (!core) return false;
    std::string tid = task_id;
    pyb::gil_scoped_release nogil;
    return core->CancelSignalled(tid);
  });
  m.def("stream_drop", [](pyb::bytes task_id) {
    auto core = Core();
    if (core) (void)core->StreamDrop(task_id);  // (at exit, with the connection gone, there is nothing to drop)
  });
  m.def("stream_item_id", [](pyb::bytes task_id, uint64_t k) {
    return pyb::bytes(MakeObjectId(task_id, static_cast<uint32_t>(2 + k)));
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

  // The node table as dicts (protobuf parsed here, so Python needs no protobuf package).
  m.def("gcs_nodes", [](const std::string& host, int port, double timeout_s) {
    pyb::list raw = RedisCommand(host, port, {"HGETALL", "nodes"}, timeout_s);
    pyb::list out;
    for (size_t i = 1; i < raw.size(); i += 2) {
      rpc::NodeInfo n;
      if (!n.ParseFromString(raw[i].cast<std::string>())) continue;
      pyb::dict total, avail;
      for (const auto& [k, v] : n.resources_total()) total[pyb::str(k)] = v;
      for (const auto& [k, v] : n.resources_available()) avail[pyb::str(k)] = v;
      out.append(pyb::dict(pyb::arg("node_id") = ToHex(n.node_id()), pyb::arg("address") = n.address(),
                           pyb::arg("port") = n.port(), pyb::arg("socket_path") = n.socket_path(),
                           pyb::arg("resources_total") = total, pyb::arg("resources_available") = avail,
                           pyb::arg("start_time_ms") = n.start_time_ms(), pyb::arg("heartbeat_ms") = n.heartbeat_ms(),
                           pyb::arg("pid") = n.pid(), pyb::arg("alive") = n.alive(),
                           pyb::arg("session_dir") = n.session_dir(), pyb::arg("tasks_queued") = n.tasks_queued(),
                           pyb::arg("tasks_running") = n.tasks_running(), pyb::arg("workers") = n.workers(),
                           pyb::arg("actors_alive") = n.actors_alive(), pyb::arg("store_used") = n.store_used()));
    }
    return out;
  }, pyb::arg("host"), pyb::arg("port"), pyb::arg("timeout_s") = 5.0);

  m.def("gcs_actors", [](const std::string& host, int port, double timeout_s) {
    pyb::list raw = RedisCommand(host, port, {"HGETALL", "actors"}, timeout_s);
    pyb::list out;
    static const char* kStates[] = {"PENDING", "ALIVE", "RESTARTING", "DEAD"};
    for (size_t i = 1; i < raw.size(); i += 2) {
      rpc::ActorInfo a;
      if (!a.ParseFromString(raw[i].cast<std::string>())) continue;
      out.append(pyb::dict(pyb::arg("actor_id") = ToHex(a.actor_id()), pyb::arg("name") = a.name(),
                           pyb::arg("class_name") = a.class_name(), pyb::arg("state") = kStates[a.state() & 3],
                           pyb::arg("node_id") = ToHex(a.node_id()), pyb::arg("pid") = a.pid(),
                           pyb::arg("restarts") = a.restarts(), pyb::arg("death_cause") = a.death_cause(),
                           pyb::arg("worker_host") = a.worker_host(), pyb::arg("worker_port") = a.worker_port()));
    }
    return out;
  }, pyb::arg("host"), pyb::arg("port"), pyb::arg("timeout_s") = 5.0);

  m.def("redis_command", &RedisCommand, pyb::arg("host"), pyb::arg("port"), pyb::arg("args"),
        pyb::arg("timeout_s") = 5.0);
  m.def(
      "write_tls_pem",
      [](const std::string& token, const std::string& cert_path, const std::string& key_path) {
        auto ctx = TlsContext::Create(token);
        if (!ctx.ok()) throw StatusError(ctx.status());
        Status st = ctx.value()->WritePem(cert_path, key_path);
        if (!st.ok()) throw StatusError(st);
      },
      "Writes the cluster's TLS certificate and key (derived from `token`) as PEM files (key 0600).",
      pyb::arg("token"), pyb::arg("cert_path"), pyb::arg("key_path"));
}
