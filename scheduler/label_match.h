// Node labels against a task's label selector (Ray's label_selector and
// fallback_strategy, NodeLabelSchedulingStrategy; python/phalanx/_private/labels.py
// makes them): whether a node's labels satisfy every constraint, and which
// selector of a task applies while the cluster is as it is (its own if some
// live node matches it, else the first of its fallbacks that one matches).
// Pure functions; thread-safe.
#pragma once

#include <string>

#include <google/protobuf/map.h>
#include <google/protobuf/repeated_ptr_field.h>

#include "core/proto/phalanx.pb.h"

namespace phalanx::scheduler {

using NodeLabels = google::protobuf::Map<std::string, std::string>;
using LabelConstraints = google::protobuf::RepeatedPtrField<rpc::LabelConstraint>;

// Whether `labels` satisfy every one of `constraints` (none: any node does).
bool LabelsMatch(const NodeLabels& labels, const LabelConstraints& constraints);
// Whether the task asks anything of a node's labels.
inline bool HasLabelSelector(const rpc::TaskSpec& spec) {
  return spec.label_selector_size() > 0 || spec.label_fallbacks_size() > 0;
}
// "{zone in (a, b), gpu-type not in (x)}", for errors.
std::string DescribeSelector(const LabelConstraints& constraints);
// The selector of `spec` that applies: its own if `any_node_matches` says some
// live node has those labels, else the first fallback one does; nullptr when none does.
template <typename AnyNodeMatches>
const LabelConstraints* ApplicableSelector(const rpc::TaskSpec& spec, AnyNodeMatches any_node_matches) {
  if (any_node_matches(spec.label_selector())) return &spec.label_selector();
  for (const auto& f : spec.label_fallbacks()) {
    if (any_node_matches(f.constraints())) return &f.constraints();
  }
  return nullptr;
}

}  // namespace phalanx::scheduler
