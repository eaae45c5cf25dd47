#include "scheduler/label_match.h"

#include <algorithm>

namespace phalanx::scheduler {

bool LabelsMatch(const NodeLabels& labels, const LabelConstraints& constraints) {
  for (const auto& c : constraints) {
    auto it = labels.find(c.key());
    bool has = it != labels.end();
    bool in = has && std::find(c.values().begin(), c.values().end(), it->second) != c.values().end();
    switch (c.op()) {
      case rpc::LabelConstraint::IN:
        if (!in) return false;
        break;
      case rpc::LabelConstraint::NOT_IN:
        if (in) return false;
        break;
      case rpc::LabelConstraint::EXISTS:
        if (!has) return false;
        break;
      case rpc::LabelConstraint::DOES_NOT_EXIST:
        if (has) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

std::string DescribeSelector(const LabelConstraints& constraints) {
  std::string out = "{";
  for (const auto& c : constraints) {
    if (out.size() > 1) out += ", ";
    out += c.key();
    switch (c.op()) {
      case rpc::LabelConstraint::EXISTS:
        out += " exists";
        continue;
      case rpc::LabelConstraint::DOES_NOT_EXIST:
        out += " does not exist";
        continue;
      case rpc::LabelConstraint::NOT_IN:
        out += " not in (";
        break;
      default:
        out += " in (";
        break;
    }
    for (int i = 0; i < c.values_size(); ++i) out += (i ? ", " : "") + c.values(i);
    out += ")";
  }
  return out + "}";
}

}  // namespace phalanx::scheduler
