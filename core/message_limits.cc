#include "core/message_limits.h"

#include <cctype>
#include <cmath>
#include <sstream>

#include "core/ids.h"

namespace phalanx {

bool IsObjectId(const std::string& id) { return id.size() == kObjectIdSize; }

bool ResultIdsOk(const rpc::TaskDone& done) {
  for (const auto& r : done.returns()) {
    if (!IsObjectId(r.object_id()) || !AllObjectIds(r.contained_ids())) return false;
  }
  return true;
}

bool IsResourceAmount(double amount) {
  return std::isfinite(amount) && amount >= 0 && amount <= kMaxResourceAmount;
}

Status CheckResourceAmount(const std::string& name, double amount, const std::string& what) {
  if (!IsResourceAmount(amount)) {
    std::ostringstream s;
    s << what << " asks for " << amount << " of resource '" << name
      << "': an amount must be a finite number from 0 to " << kMaxResourceAmount;
    return Status::InvalidArgument(s.str());
  }
  return Status::OK();
}

Status CheckLabelSelectors(const rpc::TaskSpec& spec) {
  auto check = [](const google::protobuf::RepeatedPtrField<rpc::LabelConstraint>& cs) {
    if (cs.size() > kMaxLabelConstraints) {
      return Status::InvalidArgument("a label selector has at most " + std::to_string(kMaxLabelConstraints) + " keys");
    }
    for (const auto& c : cs) {
      if (c.key().empty() || c.key().size() > kMaxLabelBytes || c.values_size() > kMaxLabelConstraints ||
          !rpc::LabelConstraint::Op_IsValid(c.op())) {
        return Status::InvalidArgument("malformed label selector (key '" + c.key().substr(0, 64) + "')");
      }
      for (const auto& v : c.values()) {
        if (v.size() > kMaxLabelBytes) return Status::InvalidArgument("a label value is at most 256 bytes");
      }
    }
    return Status::OK();
  };
  PHALANX_RETURN_IF_ERROR(check(spec.label_selector()));
  if (spec.label_fallbacks_size() > kMaxLabelConstraints) {
    return Status::InvalidArgument("at most " + std::to_string(kMaxLabelConstraints) + " fallback selectors");
  }
  for (const auto& f : spec.label_fallbacks()) PHALANX_RETURN_IF_ERROR(check(f.constraints()));
  return Status::OK();
}

Status ValidateTaskSpec(const rpc::TaskSpec& spec) {
  // (Names are built only for an error: this runs for every task.)
  auto what = [&] { return "task " + (spec.function_name().empty() ? std::string("(unnamed)") : spec.function_name()); };
  auto bad = [&](const std::string& why) { return Status::InvalidArgument(what() + ": " + why); };
  if (spec.task_id().size() != kTaskIdSize) return bad("malformed task id");
  if (spec.num_returns() < 0 || spec.num_returns() > kMaxReturns) {
    return bad("num_returns is " + std::to_string(spec.num_returns()) + "; it must be from 0 to " +
               std::to_string(kMaxReturns));
  }
  if (spec.args_size() > kMaxArgs) {
    return bad(std::to_string(spec.args_size()) + " arguments; at most " + std::to_string(kMaxArgs));
  }
  for (const auto& a : spec.args()) {
    if (!a.object_id().empty() && a.object_id().size() != kObjectIdSize) return bad("an argument has a malformed ref");
  }
  if (spec.contained_ids_size() > kMaxIdsPerMessage) return bad("too many nested refs");
  for (const auto& id : spec.contained_ids()) {
    if (id.size() != kObjectIdSize) return bad("a nested ref is malformed");
  }
  if (!spec.actor_id().empty() && spec.actor_id().size() != kTaskIdSize) return bad("malformed actor id");
  if (!rpc::TaskKind_IsValid(spec.kind())) return bad("unknown task kind " + std::to_string(spec.kind()));
  if (!rpc::Language_IsValid(spec.language())) return bad("unknown language " + std::to_string(spec.language()));
  if (!rpc::SchedulingStrategy_IsValid(spec.strategy())) {
    return bad("unknown scheduling strategy " + std::to_string(spec.strategy()));
  }
  if (spec.strategy() == rpc::STRATEGY_PLACEMENT_GROUP &&
      (spec.placement_group_id().size() != kTaskIdSize || spec.bundle_index() < -1)) {
    return bad("a placement group strategy needs a group id and a bundle index >= -1");
  }
  if (!IsResourceAmount(spec.num_cpus())) return CheckResourceAmount("CPU", spec.num_cpus(), what());
  for (const auto& [name, amount] : spec.resources()) {
    if (!IsResourceAmount(amount)) return CheckResourceAmount(name, amount, what());
  }
  if (spec.label_selector_size() > 0 || spec.label_fallbacks_size() > 0) {
    Status labels = CheckLabelSelectors(spec);
    if (!labels.ok()) return bad(labels.message());
  }
  if (spec.has_runtime_env()) {
    Status env = CheckRuntimeEnv(spec.runtime_env());
    if (!env.ok()) return bad("runtime_env: " + env.message());
  }
  return Status::OK();
}

Status CheckRuntimeEnv(const rpc::RuntimeEnv& env) {
  if (env.env_vars_size() > kMaxEnvVars) {
    return Status::InvalidArgument(std::to_string(env.env_vars_size()) + " env_vars; at most " +
                                   std::to_string(kMaxEnvVars));
  }
  size_t bytes = 0;
  const std::string* last = nullptr;
  for (const auto& v : env.env_vars()) {
    const std::string& n = v.name();
    bool name_ok = !n.empty() && !(n[0] >= '0' && n[0] <= '9');
    for (char c : n) name_ok = name_ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!name_ok) return Status::InvalidArgument("env_vars: '" + n + "' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
    if (n.rfind("PHALANX_", 0) == 0) {
      return Status::InvalidArgument("env_vars: " + n + " is phalanx's own (names starting PHALANX_ are reserved)");
    }
    if (v.value().find('\0') != std::string::npos) return Status::InvalidArgument("env_vars: " + n + " holds a NUL byte");
    if (last != nullptr && !(*last < n)) return Status::InvalidArgument("env_vars: not sorted by name, or " + n + " twice");
    last = &n;
    bytes += n.size() + v.value().size();
  }
  if (bytes > kMaxEnvBytes) {
    return Status::InvalidArgument("env_vars: " + std::to_string(bytes) + " bytes; at most " + std::to_string(kMaxEnvBytes));
  }
  if (!env.working_dir().empty() && env.working_dir().size() != kPackageIdSize) {
    return Status::InvalidArgument("malformed working_dir package id");
  }
  if (env.py_modules_size() > kMaxPyModules) {
    return Status::InvalidArgument(std::to_string(env.py_modules_size()) + " py_modules; at most " +
                                   std::to_string(kMaxPyModules));
  }
  for (const auto& m : env.py_modules()) {
    if (m.size() != kPackageIdSize) return Status::InvalidArgument("malformed py_modules package id");
  }
  return Status::OK();
}

}  // namespace phalanx
