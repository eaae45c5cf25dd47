// PrometheusText: the text exposition format Prometheus scrapes (version
// 0.0.4): for each family a "# HELP" and a "# TYPE" line, then its samples,
// `name{label="value",...} number`. Label values are escaped (backslash,
// quote, newline), names not made of [a-zA-Z0-9_:] have the rest replaced by
// '_', and a family is written once per page: a second family of the same
// name is skipped (each sample of it too), so one page never has two TYPE
// lines for a name. Not thread-safe; one page at a time.
#pragma once

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace phalanx::scheduler {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  // Starts family `name` ("counter", "gauge" or "histogram"); false (and its
  // samples are dropped until the next Family) when this page already has it.
  bool Family(const std::string& name, const char* type, const std::string& help);
  // A sample of the current family: `name` is the family's name or it with a
  // suffix ("_bucket", "_sum", "_count"). `extra` is one more label (a bucket's "le").
  void Sample(const std::string& name, const MetricLabels& labels, double value,
              const std::pair<std::string, std::string>* extra = nullptr);
  const std::string& text() const { return out_; }

  // A metric or label name with the characters Prometheus does not allow replaced by '_'.
  static std::string SafeName(const std::string& name, bool label);
  // A value as Prometheus reads it ("+Inf", "-Inf", "NaN", or the shortest exact decimal).
  static std::string Number(double v);

 private:
  std::string out_;
  std::unordered_set<std::string> families_;
  bool skipping_ = false;
};

}  // namespace phalanx::scheduler
