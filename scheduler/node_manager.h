// NodeManager: the raylet's front door. It accepts drivers and workers on the
// node's Unix socket, answers their requests (objects, refs, functions, gets
// and waits with deadlines), hands tasks to the TaskManager, and keeps the
// node's entries in the GCS: registration, heartbeats with free resources,
// task records and the object directory. When redis-server goes away it
// keeps its GCS writes and reconnects (the head's restarts it: gcs_keeper.h),
// then re-publishes what it owns; past the reconnect deadline it tells every
// client why and stops (docs/fault-tolerance.md). Not thread-safe:
// everything runs on the one io_context given to Create (the raylet's main
// loop), but for the heartbeat thread (heartbeat.h).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio.hpp>

#include "collectives/allreduce.h"
#include "collectives/collective_wire.h"
#include "collectives/reduce_manager.h"
#include "collectives/reduce_step.h"
#include "core/framed_connection.h"
#include "gcs/gcs_client.h"
#include "gcs/redis_client.h"
#include "objectstore/object_manager.h"
#include "scheduler/actor_directory.h"
#include "scheduler/clients.h"
#include "scheduler/collective_service.h"
#include "scheduler/function_table.h"
#include "scheduler/gcs_keeper.h"
#include "scheduler/heartbeat.h"
#include "scheduler/inspection.h"
#include "scheduler/object_requests.h"
#include "scheduler/peer_manager.h"
#include "scheduler/placement_service.h"
#include "scheduler/rendezvous.h"
#include "scheduler/router.h"
#include "scheduler/stream_service.h"
#include "scheduler/task_manager.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

struct NodeManagerOptions {
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
  int pipeline_depth = 8;
  objectstore::TransferOptions transfer;  // object copies between nodes: chunk size, requests in flight
};

class NodeManager final : private TaskEvents, private WorkerDeaths, private NodeAnnouncer, private HandedResults {
 public:
  // Creates the store and connects to the GCS. Unavailable names redis.
  static Result<std::unique_ptr<NodeManager>> Create(boost::asio::io_context& io, NodeManagerOptions options);
  ~NodeManager();

  // Listens on the socket, registers the node, starts the first workers.
  Status Start();
  // Spilling as the options say (from Start).
  void EnableSpilling();
  // Tells every client why, stops the workers and the listener. Idempotent.
  void Stop(const std::string& why);
  const std::string& node_id() const { return node_id_; }
  bool stopped() const { return stopped_; }

  // For the fuzzer (tests/fuzz) and tests: a node whose GCS is not connected
  // (every GCS call fails, as when redis-server is gone); Start it as usual.
  static Result<std::unique_ptr<NodeManager>> CreateOffline(boost::asio::io_context& io, NodeManagerOptions options);
  // One frame as if an authenticated peer raylet sent it on `conn` (replies go there).
  void HandlePeerFrame(const std::shared_ptr<FramedConnection>& conn, const FrameHeader& h, const char* body,
                       size_t len) {
    router_.PeerFrame(conn, h, body, len);
  }
  // One frame as if a local client sent it on `conn` (a client of its own from its first frame on).
  void HandleClientFrame(const std::shared_ptr<FramedConnection>& conn, const FrameHeader& h, const char* body,
                         size_t len);

 private:
  NodeManager(boost::asio::io_context& io, NodeManagerOptions options,
              std::unique_ptr<objectstore::ObjectStore> store);
  static Result<std::unique_ptr<NodeManager>> Make(boost::asio::io_context& io, NodeManagerOptions options,
                                                   bool connect);
  void Accept();
  // Its own client routes (node_routes.cc): registration, tasks, actors.
  void AddRoutes(Router& router);
  void OnClose(const std::shared_ptr<Client>& c, const Status& why);
  static void Reply(Client& c, uint16_t type, uint64_t request_id, const google::protobuf::MessageLite& m) {
    Clients::Reply(c, type, request_id, m);
  }

  void HandleRegister(const std::shared_ptr<Client>& c, uint64_t req, const rpc::RegisterClient& m);
  void HandleSubmit(Client& c, rpc::TaskSpec spec);
  void HandleDirectResults(Client& c, rpc::TaskDone m);
  // HandedResults: results handed in by whoever brought them (a caller of an actor, another
  // node): inline values stored here, store values adopted from their holder.
  void StoreHandedResults(rpc::TaskDone& m) override;
  void HandleGetActor(const std::shared_ptr<Client>& c, uint64_t req, const std::string& name);
  void HandleCheckpoint(const std::shared_ptr<Client>& c, uint64_t req, rpc::ActorCheckpoint m);
  void LookUpActor(const std::shared_ptr<Client>& c, uint64_t req, const std::string& name);
  // TaskEvents: task records for the GCS, warnings for a submitter.
  void OnTaskRecord(const rpc::TaskRecord& r) override;
  void Warn(const std::string& caller_id, const std::string& message) override;
  // WorkerDeaths
  void OnWorkerDied(Worker* w, const std::string& why) override { tasks_.OnWorkerDied(w, why); }
  // NodeAnnouncer: the node's record in the GCS, once at the end of this turn.
  void AnnounceSoon() override;
  void HandleExpectReturns(Client& c, const rpc::ExpectReturns& m);
  std::chrono::steady_clock::time_point rings_pruned_at_{};
  // An object freed here (objectstore::ObjectEvents): its reduce record, its
  // task record and, for an actor's creation, the actor's handles go.
  void OnObjectFreed(const std::string& id, bool was_copy);

  rpc::NodeInfo NodeInfoNow() const;
  void Heartbeat();
  // A node was declared dead: its reduce steps, rendezvous and bundles here.
  void OnNodeDead(const std::string& node);
  void FlushGcs();

  boost::asio::io_context& io_;
  NodeManagerOptions options_;
  std::string node_id_;
  // The object layer's and the peer layer's view of this raylet (node_manager.cc).
  class Links;
  std::unique_ptr<Links> links_;
  Router router_;  // both front doors: each part adds its routes in the constructor
  objectstore::ObjectManager om_;  // the node's object layer: store, object table, transfers, holds
  objectstore::ObjectTable& objects_;  // om_'s
  objectstore::ObjectStore* store_;    // om_'s
  WorkerPool pool_;
  RedisClient redis_;
  GcsClient gcs_;
  GcsActorDirectory actor_directory_;  // actors' names, homes and states in the GCS
  PeerManager peers_;     // the other raylets (RemoteNodes for the task and actor managers)
  ResourceLedger ledger_;  // the node's resources: tasks, actors and placement groups take from it
  PlacementService placement_;  // placement groups: this node's and its side of others'
  TaskManager tasks_;
  ActorManager actors_;   // the actors whose home is this node
  CollectiveService collectives_;   // reduces, allreduces, rendezvous, located refs; the wire to peers
  StreamService streams_;           // generators called from this node
  bool node_update_posted_ = false;  // a node table update is due at the end of this turn
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  boost::asio::steady_timer heartbeat_timer_;
  std::unique_ptr<HeartbeatThread> beat_;  // liveness, on its own thread (null when offline)
  GcsKeeper keeper_;                        // restarts the head's redis-server
  boost::asio::steady_timer gcs_check_timer_;
  void OnGcsLost(const Status& why);
  void CheckGcs();  // every second while redis-server is away
  void OnGcsBack();
  Clients clients_;  // the drivers and workers connected here
  Inspection inspection_;  // counters, the timeline, `phalanx memory`
  ObjectRequests object_requests_;  // gets, waits, create/seal/put, holds and releases
  FunctionTable functions_;  // the functions clients registered or asked for
  std::vector<rpc::TaskRecord> pending_records_;
  std::vector<std::string> pending_task_deletes_;
  bool stopped_ = false;
  int64_t start_time_ms_ = 0;
};

}  // namespace phalanx::scheduler
