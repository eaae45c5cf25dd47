#include "worker/task_spec_builder.h"

#include <utility>

namespace phalanx {

rpc::TaskSpec BuildTaskSpec(CoreWorker& core, TaskRequest r) {
  rpc::TaskSpec spec;
  spec.set_task_id(core.NextTaskId(r.kind == rpc::TASK_ACTOR_METHOD));
  spec.set_caller_id(core.client_id());
  spec.set_kind(r.kind);
  if (r.language != rpc::LANGUAGE_PYTHON) spec.set_language(r.language);
  spec.set_function_id(std::move(r.function_id));
  spec.set_function_name(std::move(r.function_name));
  spec.set_num_returns(r.num_returns);
  spec.set_num_cpus(r.num_cpus);
  spec.set_max_retries(r.max_retries);
  for (auto& [k, v] : r.resources) (*spec.mutable_resources())[k] = v;
  if (!r.job_id.empty()) spec.set_job_id(std::move(r.job_id));
  if (!r.namespace_name.empty()) spec.set_namespace_name(std::move(r.namespace_name));
  if (!r.parent_task_id.empty()) spec.set_parent_task_id(std::move(r.parent_task_id));
  spec.set_calls_unordered(r.calls_unordered);
  spec.set_strategy(r.strategy);
  if (r.strategy == rpc::STRATEGY_PLACEMENT_GROUP) {
    spec.set_placement_group_id(std::move(r.placement_group_id));
    spec.set_bundle_index(r.bundle_index);
    spec.set_capture_child_tasks(r.capture_child_tasks);
  } else {
    spec.set_affinity_node(std::move(r.affinity_node));
    spec.set_affinity_soft(r.affinity_soft);
  }
  if (r.generator != rpc::GENERATOR_NONE) {
    spec.set_generator(r.generator);
    spec.set_generator_backpressure(r.generator_backpressure);
  }
  if (r.kind == rpc::TASK_ACTOR_CREATION) {
    spec.set_actor_id(spec.task_id());  // (an actor's id is its creation task's)
    spec.set_max_restarts(r.max_restarts);
    spec.set_max_task_retries(r.max_task_retries);
    spec.set_actor_name(std::move(r.actor_name));
    spec.set_detached(r.detached);
    if (r.placement_cpus > 0) spec.set_placement_cpus(r.placement_cpus);
  } else if (r.kind == rpc::TASK_ACTOR_METHOD) {
    spec.set_actor_id(std::move(r.actor_id));
    spec.set_method_name(std::move(r.method_name));
    if (r.call_max_task_retries != -2) spec.set_call_max_task_retries(r.call_max_task_retries);
  }
  return spec;
}

void AddValueArg(rpc::TaskSpec* spec, std::string keyword, const char* data, size_t size) {
  rpc::TaskArg* arg = spec->add_args();
  if (!keyword.empty()) arg->set_keyword(std::move(keyword));
  arg->set_data(data, size);
}

void AddRefArg(rpc::TaskSpec* spec, std::string keyword, std::string object_id) {
  rpc::TaskArg* arg = spec->add_args();
  if (!keyword.empty()) arg->set_keyword(std::move(keyword));
  arg->set_object_id(std::move(object_id));
}

}  // namespace phalanx
