// phalanx-raylet: one per node. Parses its flags, builds the Raylet and
// runs the node's single io_context until SIGTERM/SIGINT or the loss of the
// GCS. Exit code 0 after a requested stop, 1 after a failure.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include <boost/asio.hpp>

#include "core/logging.h"
#include "scheduler/raylet.h"

namespace {

const char kUsage[] =
    "usage: phalanx-raylet --socket PATH --session-dir DIR --redis-address HOST:PORT[,REPLICA:PORT...]\n"
    "         --worker-command CMD [--cpp-worker-command CMD] [--num-cpus N] [--object-store-memory BYTES]\n"
    "         [--node-ip IP] [--heartbeat-ms MS] [--prestart-workers N]\n"
    "         [--inline-threshold BYTES] [--pipeline-depth N] [--num-gpus N]\n"
    "         [--resources '{\"name\": amount, ...}'] [--memory BYTES] [--infeasible-timeout-ms MS]\n"
    "         [--node-dead-after-ms MS] [--transfer-chunk-bytes BYTES] [--transfer-window N] [--tls 0|1]\n"
    "         [--gcs-reconnect-timeout-ms MS (60000)] [--gcs-restart-file PATH [--gcs-restart-tied 0|1]] [--stall-ms MS (60000)]\n"
    "         [--checkpoint-max-bytes BYTES (64 MiB)] [--spill-dir DIR (SESSION/spill)] [--spill-max-bytes BYTES (0: the disk's 95%)]\n"
    "         [--spill 0|1 (1)] [--lineage-max-bytes BYTES (64 MiB)] [--copy-progress-ms MS (5000)]\n"
    "         [--metrics-export-port PORT (0: a free one; -1: none)] [--labels 'key=value,key=value']\n"
    "         [--node-name NAME]\n"
    "The cluster token comes from PHALANX_CLUSTER_TOKEN (required; not a flag, which ps would show).\n"
    "--tls 1 (or PHALANX_TLS=1): TLS to other nodes, to actor workers over TCP and to redis-server.\n";

// Parses a flat JSON object of numbers: {"sim": 8, "tpu": 0.5}.
std::map<std::string, double> ParseResources(const std::string& text) {
  std::map<std::string, double> out;
  std::string s;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  }
  if (s.size() < 2 || s.front() != '{' || s.back() != '}') {
    throw std::invalid_argument("--resources wants a JSON object like '{\"sim\": 8}', got " + text);
  }
  s = s.substr(1, s.size() - 2);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(pos, end - pos);
    size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon < 2 || item.front() != '"' || item[colon - 1] != '"') {
      throw std::invalid_argument("--resources: cannot read '" + item + "' (want \"name\": number)");
    }
    std::string name = item.substr(1, colon - 2);
    double v = std::stod(item.substr(colon + 1));
    if (!(v >= 0 && v <= 1e12)) throw std::invalid_argument("--resources: " + name + " must be from 0 to 1e12");
    if (name == "CPU" || name == "GPU") throw std::invalid_argument("--resources: use --num-cpus/--num-gpus for " + name);
    out[name] = v;
    pos = end + 1;
  }
  return out;
}

// Parses node labels: "region=us,zone=a" (keys and values as Ray's: python/phalanx/_private/labels.py checks them).
std::map<std::string, std::string> ParseLabels(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || item.size() > 512) {
      throw std::invalid_argument("--labels: cannot read '" + item + "' (want key=value)");
    }
    std::string key = item.substr(0, eq);
    if (key == "ray.io/node-id") throw std::invalid_argument("--labels: ray.io/node-id is the system's (the node's id)");
    out[key] = item.substr(eq + 1);
    pos = end + 1;
  }
  return out;
}

bool ParseFlags(int argc, char** argv, std::map<std::string, std::string>* out, std::string* err) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) {
      *err = "bad argument: " + a;
      return false;
    }
    (*out)[a.substr(2)] = argv[++i];
  }
  for (const char* req : {"socket", "session-dir", "redis-address", "worker-command"}) {
    if (!out->count(req)) {
      *err = std::string("missing --") + req;
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> f;
  std::string err;
  if (!ParseFlags(argc, argv, &f, &err)) {
    std::cerr << "phalanx-raylet: " << err << "\n" << kUsage;
    return 2;
  }
  phalanx::scheduler::RayletOptions o;
  try {
    o.socket_path = f["socket"];
    o.session_dir = f["session-dir"];
    o.worker_command = f["worker-command"];
    if (f.count("cpp-worker-command")) o.cpp_worker_command = f["cpp-worker-command"];
    auto endpoints = phalanx::ParseRedisEndpoints(f["redis-address"]);
    if (!endpoints.ok()) throw std::invalid_argument("--redis-address: " + endpoints.status().message());
    o.redis_host = endpoints.value()[0].host;
    o.redis_port = endpoints.value()[0].port;
    o.redis_fallbacks.assign(endpoints.value().begin() + 1, endpoints.value().end());
    if (const char* token = std::getenv("PHALANX_CLUSTER_TOKEN")) o.cluster_token = token;  // not on argv: ps shows it
    const char* tls_env = std::getenv("PHALANX_TLS");
    bool tls = f.count("tls") ? f["tls"] == "1" : (tls_env != nullptr && std::string(tls_env) == "1");
    if (f.count("tls") && f["tls"] != "0" && f["tls"] != "1") throw std::invalid_argument("--tls wants 0 or 1");
    if (tls && !o.cluster_token.empty()) {
      auto ctx = phalanx::TlsContext::Create(o.cluster_token);
      if (!ctx.ok()) throw std::invalid_argument(ctx.status().message());
      o.tls = ctx.value();
    }
    if (f.count("num-cpus")) o.num_cpus = std::stod(f["num-cpus"]);
    if (!(o.num_cpus >= 0 && o.num_cpus <= 1e12)) throw std::invalid_argument("--num-cpus must be from 0 to 1e12");
    if (f.count("object-store-memory")) o.store_capacity = std::stoull(f["object-store-memory"]);
    if (f.count("node-ip")) o.node_ip = f["node-ip"];
    if (f.count("spill-dir")) o.spill_dir = f["spill-dir"];
    if (f.count("spill-max-bytes")) o.spill_max_bytes = std::stoull(f["spill-max-bytes"]);
    if (f.count("spill")) o.spill = f["spill"] != "0";
    if (f.count("lineage-max-bytes")) o.lineage_max_bytes = std::stoull(f["lineage-max-bytes"]);
    if (f.count("heartbeat-ms")) o.heartbeat_ms = std::stoi(f["heartbeat-ms"]);
    if (f.count("prestart-workers")) o.prestart_workers = std::stoi(f["prestart-workers"]);
    if (f.count("metrics-export-port")) o.metrics_export_port = std::stoi(f["metrics-export-port"]);
    if (o.metrics_export_port < -1 || o.metrics_export_port > 65535) {
      throw std::invalid_argument("--metrics-export-port wants 0 to 65535 (or -1: none)");
    }
    if (f.count("labels")) o.labels = ParseLabels(f["labels"]);
    if (f.count("node-name")) o.node_name = f["node-name"];
    if (f.count("inline-threshold")) o.inline_threshold = std::stoull(f["inline-threshold"]);
    if (f.count("pipeline-depth")) o.pipeline_depth = std::stoi(f["pipeline-depth"]);
    if (f.count("num-gpus")) o.num_gpus = std::stoi(f["num-gpus"]);
    if (f.count("resources")) o.resources = ParseResources(f["resources"]);
    if (f.count("memory")) o.resources["memory"] = std::stod(f["memory"]);
    if (f.count("infeasible-timeout-ms")) o.infeasible_timeout_ms = std::stoll(f["infeasible-timeout-ms"]);
    if (f.count("node-dead-after-ms")) o.node_dead_after_ms = std::stoll(f["node-dead-after-ms"]);
    if (f.count("gcs-reconnect-timeout-ms")) o.gcs_reconnect_timeout_ms = std::stoll(f["gcs-reconnect-timeout-ms"]);
    if (f.count("gcs-restart-file")) o.gcs_restart_file = f["gcs-restart-file"];
    if (f.count("gcs-restart-tied")) o.gcs_restart_tied = f["gcs-restart-tied"] == "1";
    if (f.count("stall-ms")) o.stall_ms = std::stoll(f["stall-ms"]);
    if (f.count("checkpoint-max-bytes")) o.checkpoint_max_bytes = std::stoull(f["checkpoint-max-bytes"]);
    if (f.count("copy-progress-ms")) o.copy_progress_ms = std::stoll(f["copy-progress-ms"]);
    if (o.copy_progress_ms < 100) throw std::invalid_argument("--copy-progress-ms wants >= 100");
    if (o.gcs_reconnect_timeout_ms < 0 || o.stall_ms < 1000) {
      throw std::invalid_argument("--gcs-reconnect-timeout-ms wants >= 0 and --stall-ms >= 1000");
    }
    if (f.count("transfer-chunk-bytes")) o.transfer.chunk_bytes = std::stoull(f["transfer-chunk-bytes"]);
    if (f.count("transfer-window")) o.transfer.window = std::stoi(f["transfer-window"]);
    if (o.transfer.chunk_bytes < 4096 || o.transfer.chunk_bytes > (64u << 20) || o.transfer.window < 1) {
      throw std::invalid_argument("--transfer-chunk-bytes wants 4096 to 64 MiB and --transfer-window >= 1");
    }
  } catch (const std::exception& e) {
    std::cerr << "phalanx-raylet: bad flag value: " << e.what() << "\n" << kUsage;
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  // Room for many peers and clients: the soft limit on descriptors up to the hard one.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }

  boost::asio::io_context io(1);
  auto nm = phalanx::scheduler::Raylet::Create(io, o);
  if (!nm.ok()) {
    PHALANX_LOG(Error) << "cannot start the raylet: " << nm.status().ToString();
    return 1;
  }
  phalanx::Status st = nm.value()->Start();
  if (!st.ok()) {
    PHALANX_LOG(Error) << "cannot start the raylet: " << st.ToString();
    return 1;
  }
  bool requested = false;
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    requested = true;
    nm.value()->Stop(std::string("signal ") + strsignal(sig));
  });
  // Run until stopped, then give queued farewells a moment to go out.
  while (!nm.value()->stopped()) io.run_for(std::chrono::milliseconds(200));
  io.restart();
  io.run_for(std::chrono::milliseconds(200));
  return requested ? 0 : 1;
}
