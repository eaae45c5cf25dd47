// RayletOptions: what a raylet is told at start (phalanx-raylet's flags,
// scheduler/raylet_main.cc). The raylet keeps them; its services read theirs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tls.h"
#include "gcs/redis_client.h"
#include "objectstore/object_transfer.h"

namespace phalanx::scheduler {

struct RayletOptions {
  std::string socket_path;
  std::string session_dir;
  std::string node_ip = "127.0.0.1";
  std::string worker_command;            // how this node starts a Python worker
  std::string cpp_worker_command;        // ... and a C++ worker (empty: it runs no C++ tasks)
  std::string redis_host = "127.0.0.1";
  int redis_port = 6379;
  std::vector<RedisEndpoint> redis_fallbacks;  // replicas that may be promoted (--redis-address A,B,...)
  // The cluster's shared token (PHALANX_CLUSTER_TOKEN): redis-server's
  // password, and what every peer connection proves (core/auth.h). Required.
  std::string cluster_token;
  // --tls: TLS for every connection to another node and to redis-server
  // (core/tls.h); null for plain TCP.
  std::shared_ptr<const TlsContext> tls;
  double num_cpus = 1;
  int num_gpus = -1;                    // -1: as many as the CUDA driver reports (0 without one)
  std::map<std::string, double> resources;  // custom resources (and "memory")
  int64_t infeasible_timeout_ms = 60000;
  int64_t node_dead_after_ms = 5000;    // a node silent this long is marked dead
  uint64_t store_capacity = 0;          // 0: objectstore::DefaultStoreCapacity()
  // Spilling (objectstore/spill_files.h): objects go to files under
  // spill_dir/<node id> when the store is full ("": session_dir/spill), at
  // most spill_max_bytes of them (0: until the disk is 95% full).
  bool spill = true;
  uint64_t lineage_max_bytes = 64ull << 20;  // task specs kept to rebuild lost results (scheduler/lineage.h)
  std::string spill_dir;
  uint64_t spill_max_bytes = 0;
  uint64_t inline_threshold = 100 * 1024;
  int heartbeat_ms = 1000;
  // A get that waits on a copy from another node running longer than this
  // is told its progress, this often (docs/observability.md).
  int64_t copy_progress_ms = 5000;
  // How long to keep GCS commands and reconnect after losing redis-server
  // before stopping (UnavailableError naming it); 0: stop at once.
  int64_t gcs_reconnect_timeout_ms = 60000;
  // The head node's: redis-server's command line, to start it again when it
  // dies (scheduler/gcs_keeper.h); empty on other nodes and for an external GCS.
  std::string gcs_restart_file;
  bool gcs_restart_tied = false;  // the restarted one dies with this raylet (embedded clusters)
  // The largest actor checkpoint kept (in the GCS).
  uint64_t checkpoint_max_bytes = 64ull << 20;
  // Main loop silent this long: the heartbeat thread stops beating (scheduler/heartbeat.h).
  int64_t stall_ms = 60000;
  int prestart_workers = -1;            // -1: one per CPU
  // The node's Prometheus endpoint (scheduler/metrics_exporter.h) on node_ip: 0 picks a free port, -1 none.
  int metrics_export_port = 0;
  // The node's labels (Ray's node labels: what label_selector matches), besides ray.io/node-id.
  std::map<std::string, std::string> labels;
  // The node's name (Ray's node_name: ray.nodes()' NodeName); empty: its address.
  std::string node_name;
  int pipeline_depth = 8;
  objectstore::TransferOptions transfer;  // object copies between nodes: chunk size, requests in flight
};

}  // namespace phalanx::scheduler
