// The GCS of phalanx._core: commands on redis-server (the CLI, init with an
// address, tests), the node and actor tables as dicts, the cluster's TLS files.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/ids.h"
#include "core/tls.h"
#include "gcs/gcs_tables.h"
#include "gcs/redis_client.h"
#include "python/bindings/py_core.h"

namespace phalanx::py {

namespace {

pyb::object RedisToPython(const RedisReply& r) {
  switch (r.type) {
    case RedisReply::kString:
    case RedisReply::kStatus: return pyb::bytes(r.str);
    case RedisReply::kInteger: return pyb::int_(r.integer);
    case RedisReply::kArray: {
      pyb::list l;
      for (const auto& e : r.elements) l.append(RedisToPython(e));
      return std::move(l);
    }
    case RedisReply::kError: {
      if (r.str.rfind("NOAUTH", 0) == 0) {
        throw StatusError(Status::Unavailable("this cluster's redis-server (GCS) requires the cluster token: "
                                              "set PHALANX_CLUSTER_TOKEN to the token its head printed"));
      }
      throw StatusError(Status::Internal("redis error: " + r.str));
    }
    default: return pyb::none();
  }
}

// One command on a fresh connection; for the CLI, init(address=...) and
// tests. The token (PHALANX_CLUSTER_TOKEN) and TLS (PHALANX_TLS=1) come from
// the environment, as for every process of the cluster.
pyb::object RedisCommand(const std::string& host, int port, const std::vector<std::string>& args, double timeout_s) {
  const char* env = std::getenv("PHALANX_CLUSTER_TOKEN");
  std::string token = env ? env : "";
  auto run = [&]() -> Result<RedisReply> {
    pyb::gil_scoped_release unlocked;
    PHALANX_ASSIGN_OR_RETURN(auto c, RedisConnection::Open(host, port, token, TlsFromEnvironment(token),
                                                           static_cast<int64_t>(std::max(timeout_s, 0.001) * 1000)));
    return c->Command(args);
  };
  Result<RedisReply> r = run();
  if (!r.ok()) throw StatusError(r.status());
  return RedisToPython(r.value());
}

// One authenticated connection to a cluster's GCS kept for many commands
// (the job agent and the submission client: a TLS handshake once, not per
// command). "HOST:PORT[,HOST:PORT...]" finds the primary; a connection found
// broken when reused is opened again once, at the primary of that moment (a
// restarted server or a promoted replica), so the command is not lost; a
// timed-out one is dropped and its error raised (whether it ran is unknown).
class RedisSession {
 public:
  RedisSession(const std::string& address, double timeout_s)
      : timeout_ms_(static_cast<int64_t>(std::max(timeout_s, 0.001) * 1000)) {
    auto eps = ParseRedisEndpoints(address);
    if (!eps.ok()) throw StatusError(eps.status());
    endpoints_ = std::move(eps).value();
    const char* env = std::getenv("PHALANX_CLUSTER_TOKEN");
    token_ = env ? env : "";
  }

  pyb::object Command(const std::vector<std::string>& args, std::optional<double> timeout_s) {
    int64_t ms = timeout_s ? static_cast<int64_t>(std::max(*timeout_s, 0.001) * 1000) : timeout_ms_;
    auto once_more_if_stale = [&]() -> Result<RedisReply> {
      pyb::gil_scoped_release unlocked;
      std::lock_guard<std::mutex> hold(mu_);
      bool reused = conn_ != nullptr;
      auto r = Run(args, ms);
      if (!r.ok() && reused && r.status().code() == StatusCode::kUnavailable) return Run(args, ms);
      return r;
    };
    Result<RedisReply> r = once_more_if_stale();
    if (!r.ok()) throw StatusError(r.status());
    return RedisToPython(r.value());
  }

 private:
  Result<RedisReply> Run(const std::vector<std::string>& args, int64_t ms) {
    if (!conn_) {
      PHALANX_ASSIGN_OR_RETURN(auto opened, OpenPrimary(endpoints_, token_, TlsFromEnvironment(token_), timeout_ms_));
      conn_ = std::move(opened.first);
    }
    auto r = conn_->Command(args, ms);
    if (!r.ok()) conn_.reset();
    return r;
  }

  std::vector<RedisEndpoint> endpoints_;
  std::string token_;
  int64_t timeout_ms_;
  std::mutex mu_;
  std::unique_ptr<RedisConnection> conn_;  // under mu_; null until the first command or after a failure
};

}  // namespace

void BindGcs(pyb::module_& m) {
  // The node table as dicts (protobuf parsed here, so Python needs no protobuf package).
  m.def("gcs_nodes", [](const std::string& host, int port, double timeout_s) {
    pyb::list raw = RedisCommand(host, port, {"HGETALL", gcs_tables::kNodes}, timeout_s);
    pyb::list out;
    for (size_t i = 1; i < raw.size(); i += 2) {
      rpc::NodeInfo n;
      if (!n.ParseFromString(raw[i].cast<std::string>())) continue;
      pyb::dict total, avail, labels;
      for (const auto& [k, v] : n.labels()) labels[pyb::str(k)] = pyb::str(v);
      for (const auto& [k, v] : n.resources_total()) total[pyb::str(k)] = v;
      for (const auto& [k, v] : n.resources_available()) avail[pyb::str(k)] = v;
      out.append(pyb::dict(pyb::arg("node_id") = ToHex(n.node_id()), pyb::arg("address") = n.address(),
                           pyb::arg("port") = n.port(), pyb::arg("socket_path") = n.socket_path(),
                           pyb::arg("resources_total") = total, pyb::arg("resources_available") = avail,
                           pyb::arg("start_time_ms") = n.start_time_ms(), pyb::arg("heartbeat_ms") = n.heartbeat_ms(),
                           pyb::arg("pid") = n.pid(), pyb::arg("alive") = n.alive(),
                           pyb::arg("session_dir") = n.session_dir(), pyb::arg("tasks_queued") = n.tasks_queued(),
                           pyb::arg("tasks_running") = n.tasks_running(), pyb::arg("workers") = n.workers(),
                           pyb::arg("actors_alive") = n.actors_alive(), pyb::arg("store_used") = n.store_used(),
                           pyb::arg("peers_alive") = n.peers_alive(),
                           pyb::arg("metrics_export_port") = n.metrics_export_port(), pyb::arg("labels") = labels,
                           pyb::arg("node_name") = n.node_name()));
    }
    return out;
  }, pyb::arg("host"), pyb::arg("port"), pyb::arg("timeout_s") = 5.0);

  m.def("gcs_actors", [](const std::string& host, int port, double timeout_s) {
    pyb::list raw = RedisCommand(host, port, {"HGETALL", gcs_tables::kActors}, timeout_s);
    pyb::list out;
    static const char* kStates[] = {"PENDING", "ALIVE", "RESTARTING", "DEAD"};
    for (size_t i = 1; i < raw.size(); i += 2) {
      rpc::ActorInfo a;
      if (!a.ParseFromString(raw[i].cast<std::string>())) continue;
      out.append(pyb::dict(pyb::arg("actor_id") = ToHex(a.actor_id()), pyb::arg("name") = a.name(),
                           pyb::arg("class_name") = a.class_name(), pyb::arg("state") = kStates[a.state() & 3],
                           pyb::arg("node_id") = ToHex(a.node_id()), pyb::arg("pid") = a.pid(),
                           pyb::arg("restarts") = a.restarts(), pyb::arg("death_cause") = a.death_cause(),
                           pyb::arg("worker_host") = a.worker_host(), pyb::arg("worker_port") = a.worker_port()));
    }
    return out;
  }, pyb::arg("host"), pyb::arg("port"), pyb::arg("timeout_s") = 5.0);

  pyb::class_<RedisSession>(m, "RedisSession",
                            "One authenticated connection to the GCS at \"HOST:PORT[,HOST:PORT...]\" for many "
                            "commands (token and TLS from the environment, as redis_command); closed with the object.")
      .def(pyb::init<const std::string&, double>(), pyb::arg("address"), pyb::arg("timeout_s") = 5.0)
      .def("command", &RedisSession::Command, pyb::arg("args"), pyb::arg("timeout_s") = pyb::none());
  m.def("redis_command", &RedisCommand, pyb::arg("host"), pyb::arg("port"), pyb::arg("args"),
        pyb::arg("timeout_s") = 5.0);
  m.def(
      "write_tls_pem",
      [](const std::string& token, const std::string& cert_path, const std::string& key_path) {
        auto ctx = TlsContext::Create(token);
        if (!ctx.ok()) throw StatusError(ctx.status());
        Status st = ctx.value()->WritePem(cert_path, key_path);
        if (!st.ok()) throw StatusError(st);
      },
      "Writes the cluster's TLS certificate and key (derived from `token`) as PEM files (key 0600).",
      pyb::arg("token"), pyb::arg("cert_path"), pyb::arg("key_path"));
}

}  // namespace phalanx::py
