// GcsSession: this node's side of the GCS. It registers the node, writes
// its record every heartbeat and at the end of any turn that changed it
// (NodeAnnouncer), batches the task records the TaskManager reports and the
// deletes of tasks whose results are gone, and beats on its own thread too
// (scheduler/heartbeat.h). When redis-server goes away the GCS client keeps
// its writes and reconnects; meanwhile this checks every second whether the
// head's server must be started again (gcs_keeper.h), and once it is back
// re-publishes what this node owns: the node, its functions, clients,
// actors and object locations. Not thread-safe; the raylet's loop (but for
// the heartbeat thread, which has its own connection).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "core/proto/phalanx.pb.h"
#include "gcs/gcs_client.h"
#include "gcs/redis_client.h"
#include "objectstore/object_manager.h"
#include "scheduler/clients.h"
#include "scheduler/metrics_exporter.h"
#include "scheduler/function_table.h"
#include "scheduler/gcs_keeper.h"
#include "scheduler/heartbeat.h"
#include "scheduler/raylet_options.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/task_table.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

// What the node's record reads and what is re-published after an outage:
// the raylet's parts, each owned by the raylet and outliving the session.
struct SessionParts {
  RedisClient* redis;
  GcsClient* gcs;
  PeerView* peers;
  const TaskInspection* tasks;
  ActorCensus* actors;
  WorkerPool* pool;
  objectstore::ObjectManager* objects;
  FunctionTable* functions;
  Clients* clients;
  const MetricsExporter* metrics;  // its port goes in the node's record
};

class GcsSession final : public NodeAnnouncer, public TaskRecords {
 public:
  // `options`: the raylet's (outlive this).
  GcsSession(boost::asio::io_context& io, std::string node_id, const RayletOptions& options, SessionParts parts);

  // Connects to redis-server (Unavailable names it) and sets up reconnecting and the heartbeat thread.
  Status Connect();
  // Registers the node and starts beating.
  void Start();
  // No more beats or checks; the record says the node is gone at Close.
  void Stop();
  // The last writes: the pending task records, and the node marked dead (when redis-server is there).
  void Close();

  rpc::NodeInfo NodeInfoNow() const;
  // NodeAnnouncer: the node's record, once at the end of this turn.
  void AnnounceSoon() override;
  // A task ended (its record goes with the next heartbeat).
  void RecordTask(const rpc::TaskRecord& r) override;
  // The results of task `task_id` are gone: its record goes with the next heartbeat.
  void ForgetTask(const std::string& task_id) { pending_task_deletes_.push_back(task_id); }

 private:
  void Heartbeat();
  void WatchResources();
  void Announce();  // writes the node's record now
  void Flush();
  void OnGcsLost(const Status& why);
  void CheckGcs();  // every second while redis-server is away
  void OnGcsBack();

  boost::asio::io_context& io_;
  std::string node_id_;
  const RayletOptions& options_;
  SessionParts parts_;
  boost::asio::steady_timer heartbeat_timer_;
  boost::asio::steady_timer gcs_check_timer_;
  // Every kResourceWatchMs: the node's record is written again when its free resources changed since it was
  // last written, so that available_resources() (and the state API) lag a tenth of a second, not a heartbeat.
  boost::asio::steady_timer resource_timer_;
  std::map<std::string, double> announced_available_;  // what the last record written said was free
  std::unique_ptr<HeartbeatThread> beat_;  // liveness, on its own thread (null when offline)
  GcsKeeper keeper_;                        // restarts the head's redis-server
  std::vector<rpc::TaskRecord> pending_records_;
  std::vector<std::string> pending_task_deletes_;
  bool node_update_posted_ = false;  // a node table update is due at the end of this turn
  bool stopped_ = false;
  int64_t start_time_ms_ = 0;
};

}  // namespace phalanx::scheduler
