#include "scheduler/prometheus_text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace phalanx::scheduler {

namespace {

void AppendEscaped(std::string* out, const std::string& s, bool help) {
  for (char c : s) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '"' && !help) {
      *out += "\\\"";
    } else {
      *out += c;
    }
  }
}

}  // namespace

std::string PrometheusText::SafeName(const std::string& name, bool label) {
  std::string s = name.empty() ? "_" : name;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':') ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) s[i] = '_';
  }
  return s;
}

std::string PrometheusText::Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  for (int precision = 15; precision <= 17; ++precision) {  // the shortest that reads back the same
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

bool PrometheusText::Family(const std::string& name, const char* type, const std::string& help) {
  std::string safe = SafeName(name, false);
  skipping_ = !families_.insert(safe).second;
  if (skipping_) return false;
  out_ += "# HELP " + safe + " ";
  AppendEscaped(&out_, help, /*help=*/true);
  out_ += "\n# TYPE " + safe + " " + type + "\n";
  return true;
}

void PrometheusText::Sample(const std::string& name, const MetricLabels& labels, double value,
                            const std::pair<std::string, std::string>* extra) {
  if (skipping_) return;
  out_ += SafeName(name, false);
  if (!labels.empty() || extra != nullptr) {
    out_ += '{';
    bool first = true;
    auto add = [&](const std::pair<std::string, std::string>& l) {
      if (!first) out_ += ',';
      first = false;
      out_ += SafeName(l.first, true) + "=\"";
      AppendEscaped(&out_, l.second, /*help=*/false);
      out_ += '"';
    };
    for (const auto& l : labels) add(l);
    if (extra != nullptr) add(*extra);
    out_ += '}';
  }
  out_ += ' ' + Number(value) + '\n';
}

}  // namespace phalanx::scheduler
