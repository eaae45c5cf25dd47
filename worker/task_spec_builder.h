// TaskRequest and BuildTaskSpec: one task as a language's API asks for it,
// made into the TaskSpec the raylet takes, in one place for the Python
// bindings (python/bindings/tasks.cc) and the C++ API (worker/cpp_api.cc).
// The builder gives the task its id (an actor call's id says it is one),
// names the caller, and fills only the fields the task's kind and strategy
// use; the caller adds the arguments (AddValueArg, AddRefArg) and submits.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/proto/phalanx.pb.h"
#include "worker/core_worker.h"

namespace phalanx {

struct TaskRequest {
  rpc::TaskKind kind = rpc::TASK_NORMAL;
  rpc::Language language = rpc::LANGUAGE_PYTHON;
  std::string function_id;
  std::string function_name;
  int num_returns = 1;
  double num_cpus = 1.0;
  int max_retries = 0;
  std::map<std::string, double> resources;  // besides CPUs
  // The job it belongs to, and the task that submits it (phalanx.cancel's recursive=True).
  std::string job_id;
  std::string namespace_name;
  std::string parent_task_id;
  // TASK_ACTOR_CREATION: the actor's options.
  int max_restarts = 0;
  int max_task_retries = 0;
  std::string actor_name;
  bool detached = false;
  bool calls_unordered = false;  // an async or threaded actor
  double placement_cpus = 0;     // free CPUs its node must have when it is placed (it holds none)
  // TASK_ACTOR_METHOD: which actor, which method.
  std::string actor_id;
  std::string method_name;
  int call_max_task_retries = -2;  // its own max_task_retries (-2: the actor's)
  // Where it may run: node affinity (affinity_node), or a placement group's bundle (-1: any).
  rpc::SchedulingStrategy strategy = rpc::STRATEGY_DEFAULT;
  std::string affinity_node;
  bool affinity_soft = false;
  std::string placement_group_id;
  int bundle_index = -1;
  bool capture_child_tasks = false;
  // Generators: the mode and how many unread items the caller allows (0: no limit).
  rpc::GeneratorMode generator = rpc::GENERATOR_NONE;
  int64_t generator_backpressure = 0;
};

// The spec of `request`, with a fresh task id from `core`; no arguments yet.
rpc::TaskSpec BuildTaskSpec(CoreWorker& core, TaskRequest request);
// Arguments, in order: a value that travels with the call, or a ref.
void AddValueArg(rpc::TaskSpec* spec, std::string keyword, const char* data, size_t size);
void AddRefArg(rpc::TaskSpec* spec, std::string keyword, std::string object_id);

}  // namespace phalanx
