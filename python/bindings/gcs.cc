// The GCS of phalanx._core: commands on redis-server (the CLI, init with an
// address, tests), the node and actor tables as dicts, the cluster's TLS files.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
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

}  // namespace

void BindGcs(pyb::module_& m) {
  // The node table as dicts (protobuf parsed here, so Python needs no protobuf package).
  m.def("gcs_nodes", [](const std::string& host, int port, double timeout_s) {
    pyb::list raw = RedisCommand(host, port, {"HGETALL", gcs_tables::kNodes}, timeout_s);
    pyb::list out;
    for (size_t i = 1; i < raw.size(); i += 2) {
      rpc::NodeInfo n;
      if (!n.ParseFromString(raw[i].cast<std::string>())) continue;
      pyb::dict total, avail;
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
                           pyb::arg("peers_alive") = n.peers_alive()));
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
