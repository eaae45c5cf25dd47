// Raylet: one node of the cluster, put together. It builds the node's parts
// (the object manager, worker pool, resource ledger, task and actor
// managers, peer manager, collectives) and the services that answer clients
// and peers through one Router (clients, tasks, actors, objects,
// placement, streams, collectives, functions, inspection), gives each the
// interfaces it needs, starts and stops them. It handles no message itself.
// docs/architecture.md draws the parts and what joins them. Not thread-safe:
// everything runs on the one io_context given to Create (the raylet's main
// loop), but for the heartbeat thread (heartbeat.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "core/framed_connection.h"
#include "gcs/gcs_client.h"
#include "gcs/redis_client.h"
#include "objectstore/object_manager.h"
#include "scheduler/actor_directory.h"
#include "scheduler/actor_manager.h"
#include "scheduler/actor_service.h"
#include "scheduler/client_service.h"
#include "scheduler/clients.h"
#include "scheduler/collective_service.h"
#include "scheduler/device_holders.h"
#include "scheduler/function_table.h"
#include "scheduler/metrics_exporter.h"
#include "scheduler/metrics_page.h"
#include "scheduler/metrics_registry.h"
#include "scheduler/output_relay.h"
#include "scheduler/gcs_object_directory.h"
#include "scheduler/gcs_session.h"
#include "scheduler/inspection.h"
#include "scheduler/object_requests.h"
#include "scheduler/peer_manager.h"
#include "scheduler/placement_service.h"
#include "scheduler/raylet_options.h"
#include "scheduler/resource_ledger.h"
#include "scheduler/router.h"
#include "scheduler/stream_service.h"
#include "scheduler/task_manager.h"
#include "scheduler/task_service.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

class Raylet final {
 public:
  // Creates the store and connects to the GCS. Unavailable names redis.
  static Result<std::unique_ptr<Raylet>> Create(boost::asio::io_context& io, RayletOptions options);
  // For the fuzzer (tests/fuzz) and tests: a node whose GCS is not connected
  // (every GCS call fails, as when redis-server is gone); Start it as usual.
  static Result<std::unique_ptr<Raylet>> CreateOffline(boost::asio::io_context& io, RayletOptions options);
  ~Raylet();

  // Listens on the socket and for peers, registers the node, starts the first workers.
  Status Start();
  // Tells every client why, stops the workers and the listeners. Idempotent.
  void Stop(const std::string& why);
  const std::string& node_id() const { return node_id_; }
  bool stopped() const { return stopped_; }

  // One frame as if an authenticated peer raylet sent it on `conn` (replies go there).
  void HandlePeerFrame(const std::shared_ptr<FramedConnection>& conn, const FrameHeader& h, const char* body,
                       size_t len) {
    router_.PeerFrame(conn, h, body, len);
  }
  // One frame as if a local client sent it on `conn` (a client of its own from its first frame on).
  void HandleClientFrame(const std::shared_ptr<FramedConnection>& conn, const FrameHeader& h, const char* body,
                         size_t len) {
    router_.ClientFrame(clients_.OfConnection(conn), h, body, len);
  }

 private:
  Raylet(boost::asio::io_context& io, RayletOptions options, std::unique_ptr<objectstore::ObjectStore> store);
  static Result<std::unique_ptr<Raylet>> Make(boost::asio::io_context& io, RayletOptions options, bool connect);
  // Spilling as the options say (from Start).
  void EnableSpilling();
  // Every heartbeat: idle workers beyond one per CPU go, gets waiting on slow
  // copies hear how far they are, old trace rings of exited workers go.
  void Tidy();

  boost::asio::io_context& io_;
  RayletOptions options_;
  std::string node_id_;
  // What the object layer and the peers tell the node, passed on to the parts that care (raylet.cc).
  class Events;
  std::unique_ptr<Events> events_;
  Router router_;  // both front doors: each service adds its routes in the constructor
  GcsObjectDirectory directory_;   // the object directory in the GCS, as the transfers see it
  objectstore::ObjectManager om_;  // the node's object layer: store, object table, transfers, holds
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
  Clients clients_;  // the drivers and workers connected here
  Inspection inspection_;  // counters, the timeline, `phalanx memory`
  ObjectRequests object_requests_;  // gets, waits, create/seal/put, holds and releases
  DeviceHolders device_holders_;    // who keeps GPU objects' bytes on a GPU, told when they are freed
  FunctionTable functions_;  // the functions clients registered or asked for
  OutputRelay output_;       // what workers print, to their job's stream in the GCS
  MetricsRegistry metrics_;  // what drivers and workers record (phalanx.util.metrics)
  MetricsPage metrics_page_;  // the node's Prometheus page: its system metrics, then metrics_'s
  MetricsExporter metrics_exporter_;  // serves it (GET /metrics)
  GcsSession session_;       // the node's record, task records, heartbeats, GCS outages
  TaskService task_service_;    // submissions, results, expected returns, cancels
  ActorService actor_service_;  // actor lookups, routes, kills, checkpoints
  ClientService client_service_;  // the Unix socket: registration, a client's exit
  boost::asio::steady_timer tidy_timer_;
  std::chrono::steady_clock::time_point rings_pruned_at_{};
  bool stopped_ = false;
};

}  // namespace phalanx::scheduler
