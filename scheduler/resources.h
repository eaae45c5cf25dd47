// ResourceSet: named quantities ("CPU", "GPU", "memory", custom names) a node
// offers and a task asks for. Quantities are doubles so fractional GPUs work;
// sums are kept on Ray's grid of 1/10000 (Ray counts in fixed-point units of
// that size), so that taking and giving back 0.1s returns 2.0, not 1.9999...;
// comparisons allow for rounding. A value type; not thread-safe.
#pragma once

#include <cmath>
#include <map>
#include <string>

namespace phalanx::scheduler {

class ResourceSet {
 public:
  ResourceSet() = default;
  explicit ResourceSet(std::map<std::string, double> amounts) : amounts_(std::move(amounts)) {}

  double Get(const std::string& name) const {
    auto it = amounts_.find(name);
    return it == amounts_.end() ? 0.0 : it->second;
  }
  void Set(const std::string& name, double v) { amounts_[name] = v; }
  void Erase(const std::string& name) { amounts_.erase(name); }
  // True when every quantity in `need` is available here.
  bool Contains(const ResourceSet& need) const {
    for (const auto& [k, v] : need.amounts_) {
      if (v > 0 && Get(k) + 1e-9 < v) return false;
    }
    return true;
  }
  void Add(const ResourceSet& o) {
    for (const auto& [k, v] : o.amounts_) {
      double& have = amounts_[k];
      have = OnGrid(have + v);
    }
  }
  void Subtract(const ResourceSet& o) {
    for (const auto& [k, v] : o.amounts_) {
      double& have = amounts_[k];
      have = OnGrid(have - v);
    }
  }
  // `v` on the grid of 1/10000 (amounts of memory in bytes are whole already: kept as they are).
  static double OnGrid(double v) { return std::fabs(v) < 1e12 ? std::round(v * 1e4) / 1e4 : v; }
  bool operator==(const ResourceSet& o) const { return amounts_ == o.amounts_; }
  const std::map<std::string, double>& amounts() const { return amounts_; }
  std::string ToString() const {
    std::string s = "{";
    for (const auto& [k, v] : amounts_) {
      if (s.size() > 1) s += ", ";
      s += k + ": " + std::to_string(v).substr(0, std::to_string(v).find('.') + 3);
    }
    return s + "}";
  }

 private:
  std::map<std::string, double> amounts_;
};

}  // namespace phalanx::scheduler
