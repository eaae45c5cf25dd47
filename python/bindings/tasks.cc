// The tasks of phalanx._core: functions, submission (the job context a task
// inherits), the worker's next task and its results, generators' items and
// reads, cancels.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/ids.h"
#include "core/message_limits.h"
#include "core/trace.h"
#include "python/bindings/py_core.h"
#include "worker/task_spec_builder.h"

namespace phalanx::py {

namespace {

// submit_task's strategy with this bit: PlacementGroupSchedulingStrategy(...,
// placement_group_capture_child_tasks=True) (remote_function.strategy_args).
constexpr int kCaptureFlag = 256;
// ... and with this one: the default strategy, out of the placement group its submitter captures its children
// in (placement_group=None given, as Ray's).
constexpr int kNoCaptureFlag = 512;

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

}  // namespace

void BindTasks(pyb::module_& m) {
  m.def("next_task_id", [] { return pyb::bytes(RequireCore()->NextTaskId()); });

  m.def("register_function", [](pyb::bytes id, const std::string& name, pyb::bytes pickled) {
    ThrowIfError(RequireCore()->RegisterFunction(id, name, pickled));
  });
  m.def("send_output", [](pyb::bytes job_id, const std::string& source, bool is_err, pyb::bytes text) {
    ThrowIfError(RequireCore()->SendOutput(job_id, source, is_err, text));
  });
  // series: (name, kind 0/1/2, description, tag_keys, tag_values, value, boundaries, bucket_counts) each.
  m.def("send_metrics", [](const pyb::list& series) {
    rpc::MetricsReport report;
    for (const auto& item : series) {
      auto t = item.cast<pyb::tuple>();
      auto* s = report.add_series();
      s->set_name(t[0].cast<std::string>());
      s->set_kind(static_cast<rpc::MetricSeries::Kind>(t[1].cast<int>()));
      s->set_description(t[2].cast<std::string>());
      for (const auto& k : t[3]) s->add_tag_keys(k.cast<std::string>());
      for (const auto& v : t[4]) s->add_tag_values(v.cast<std::string>());
      s->set_value(t[5].cast<double>());
      for (const auto& b : t[6]) s->add_boundaries(b.cast<double>());
      for (const auto& c : t[7]) s->add_bucket_counts(c.cast<uint64_t>());
    }
    ThrowIfError(RequireCore()->SendMetrics(report));
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
         bool affinity_soft, int generator, int64_t backpressure, int bundle_index, bool calls_unordered,
         pyb::bytes runtime_env, pyb::object labels, double placement_cpus, int call_max_task_retries) {
        auto core = RequireCore();
        TaskRequest req;
        req.kind = static_cast<rpc::TaskKind>(kind);
        req.function_id = function_id;
        req.function_name = name;
        req.num_returns = num_returns;
        req.num_cpus = num_cpus;
        req.max_retries = max_retries;
        req.resources = resources;
        const JobContext& job = CurrentJob();
        req.job_id = job.job_id;
        req.namespace_name = job.ns;
        req.parent_task_id = job.parent_task;
        if (req.parent_task_id.empty() && tl_job_async) {  // the asyncio task's own (phalanx._private.state.current_task)
          static auto* current = new pyb::object(pyb::module_::import("phalanx._private.state").attr("current_task"));
          pyb::object t = current->attr("get")();
          if (!t.is_none()) req.parent_task_id = t.cast<pyb::tuple>()[0].cast<std::string>();
        }
        req.calls_unordered = calls_unordered;
        req.placement_cpus = placement_cpus;
        req.call_max_task_retries = call_max_task_retries;
        // (strategy | kCaptureFlag: a placement group that captures its children)
        bool capture = (strategy & kCaptureFlag) != 0;
        bool no_capture = (strategy & kNoCaptureFlag) != 0;
        strategy &= ~(kCaptureFlag | kNoCaptureFlag);
        std::string capture_pg = job.capture_pg;
        if (capture_pg.empty() && kind != rpc::TASK_ACTOR_METHOD && g_actor_captures.load(std::memory_order_acquire)) {
          std::lock_guard<std::mutex> l(g_job_mu);
          capture_pg = g_actor_capture_pg;
        }
        if (strategy == rpc::STRATEGY_DEFAULT && !no_capture && !capture_pg.empty() &&
            kind != rpc::TASK_ACTOR_METHOD) {
          // Submitted from a task or actor that captures its children: into its group, any bundle.
          strategy = rpc::STRATEGY_PLACEMENT_GROUP;
          affinity_node = pyb::bytes(capture_pg);
          bundle_index = -1;
          capture = true;
        }
        req.strategy = static_cast<rpc::SchedulingStrategy>(strategy);
        if (req.strategy == rpc::STRATEGY_PLACEMENT_GROUP) {  // (affinity_node carries the group's id)
          req.placement_group_id = affinity_node;
          req.bundle_index = bundle_index;
          req.capture_child_tasks = capture;
        } else {
          req.affinity_node = affinity_node;
          req.affinity_soft = affinity_soft;
        }
        req.generator = static_cast<rpc::GeneratorMode>(generator);
        req.generator_backpressure = backpressure;
        req.max_restarts = max_restarts;
        req.max_task_retries = max_task_retries;
        req.actor_name = actor_name;
        req.detached = detached;
        req.actor_id = actor_id;
        req.method_name = method_name;
        rpc::TaskSpec spec = BuildTaskSpec(*core, std::move(req));
        std::string env = runtime_env;
        if (!env.empty() && !spec.mutable_runtime_env()->ParseFromString(env)) {
          throw pyb::value_error("runtime_env: not one made by runtime_env_pack");
        }
        for (auto a : args) {
          auto t = a.cast<pyb::tuple>();
          if (!t[1].is_none()) {
            AddRefArg(&spec, t[0].cast<std::string>(), t[1].cast<std::string>());
          } else {
            char* p;
            Py_ssize_t n;
            PyBytes_AsStringAndSize(t[2].ptr(), &p, &n);
            AddValueArg(&spec, t[0].cast<std::string>(), p, static_cast<size_t>(n));
          }
        }
        for (auto c : contained) spec.add_contained_ids(c.cast<std::string>());
        if (!labels.is_none()) {  // (selector, fallbacks): lists of (key, op, [values]) (_private/label_strategy.py)
          auto pair = labels.cast<pyb::tuple>();
          auto add = [](google::protobuf::RepeatedPtrField<rpc::LabelConstraint>* out, const pyb::handle& list) {
            for (const auto& item : list) {
              auto t = item.cast<pyb::tuple>();
              auto* c = out->Add();
              c->set_key(t[0].cast<std::string>());
              c->set_op(static_cast<rpc::LabelConstraint::Op>(t[1].cast<int>()));
              for (const auto& v : t[2]) c->add_values(v.cast<std::string>());
            }
          };
          add(spec.mutable_label_selector(), pair[0]);
          for (const auto& f : pair[1]) add(spec.add_label_fallbacks()->mutable_constraints(), f);
        }
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
      pyb::arg("calls_unordered") = false, pyb::arg("runtime_env") = pyb::bytes(), pyb::arg("labels") = pyb::none(),
      pyb::arg("placement_cpus") = 0.0, pyb::arg("call_max_task_retries") = -2);

  // Runtime environments (python/phalanx/_private/runtime_env.py): what
  // submit_task's runtime_env takes, made from (env_vars as sorted (name,
  // value) pairs, working_dir package id or b"", py_modules package ids),
  // checked as the raylet checks it; and back.
  m.def("runtime_env_pack", [](const std::vector<std::pair<std::string, std::string>>& env_vars,
                               pyb::bytes working_dir, const std::vector<pyb::bytes>& py_modules) {
    rpc::RuntimeEnv env;
    for (const auto& [k, v] : env_vars) {
      auto* var = env.add_env_vars();
      var->set_name(k);
      var->set_value(v);
    }
    env.set_working_dir(working_dir);
    for (const auto& m : py_modules) env.add_py_modules(m);
    Status ok = CheckRuntimeEnv(env);
    if (!ok.ok()) throw pyb::value_error("runtime_env: " + ok.message());
    return pyb::bytes(env.SerializeAsString());
  });
  m.def("runtime_env_unpack", [](pyb::bytes packed) {
    rpc::RuntimeEnv env;
    if (!env.ParseFromString(std::string(packed))) throw pyb::value_error("runtime_env: malformed");
    pyb::list vars, mods;
    for (const auto& v : env.env_vars()) vars.append(pyb::make_tuple(v.name(), v.value()));
    for (const auto& m : env.py_modules()) mods.append(pyb::bytes(m));
    return pyb::make_tuple(vars, pyb::bytes(env.working_dir()), mods);
  });

  // The placement group of the running task or of this process's actor; empty bytes if none.
  m.def("current_placement_group", [] {
    std::string pg = CurrentJob().pg;
    if (pg.empty()) {
      std::lock_guard<std::mutex> l(g_job_mu);
      pg = g_actor_pg;
    }
    return pyb::bytes(pg);
  });

  // Whether what the running task (or this process's actor) submits goes into its placement group by default
  // (placement_group_capture_child_tasks=True).
  m.def("captures_child_tasks", [] {
    return !CurrentJob().capture_pg.empty() || g_actor_captures.load(std::memory_order_acquire);
  });

  // this_thread: only for the calling thread (a worker thread running a
  // task); else the process's default (a driver at init).
  m.def("set_job_context", [](pyb::bytes job_id, const std::string& ns, bool this_thread, pyb::bytes parent_task) {
    JobContext j;
    j.job_id = job_id;
    j.ns = ns;
    j.parent_task = parent_task;
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

  m.def("direct_calls_sent", [] {
    auto core = Core();
    return core ? core->direct_calls_sent() : 0;
  }, "How many actor method calls this process sent straight to an actor's worker.");
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
}

}  // namespace phalanx::py
