#include "scheduler/gcs_session.h"

#include <unistd.h>

#include <chrono>

#include "core/ids.h"
#include "core/logging.h"

namespace phalanx::scheduler {

constexpr int kResourceWatchMs = 100;  // (GcsSession::WatchResources)

static int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

GcsSession::GcsSession(boost::asio::io_context& io, std::string node_id, const RayletOptions& options,
                       SessionParts parts)
    : io_(io),
      node_id_(std::move(node_id)),
      options_(options),
      parts_(parts),
      heartbeat_timer_(io),
      gcs_check_timer_(io),
      resource_timer_(io),
      keeper_(options.gcs_restart_file, options.session_dir + "/redis.pid", options.gcs_restart_tied) {}

Status GcsSession::Connect() {
  parts_.redis->SetFallbacks(options_.redis_fallbacks);
  PHALANX_RETURN_IF_ERROR(parts_.redis->Connect(5000));
  parts_.redis->SetReconnect(
      options_.gcs_reconnect_timeout_ms, 0, [this](const Status& why) { OnGcsLost(why); }, [this] { OnGcsBack(); });
  HeartbeatOptions h;
  h.endpoints = {RedisEndpoint{options_.redis_host, options_.redis_port}};
  h.endpoints.insert(h.endpoints.end(), options_.redis_fallbacks.begin(), options_.redis_fallbacks.end());
  h.password = options_.cluster_token;
  h.tls = options_.tls;
  h.node_id = node_id_;
  h.interval_ms = options_.heartbeat_ms;
  h.stall_ms = options_.stall_ms;
  beat_ = std::make_unique<HeartbeatThread>(std::move(h));
  return Status::OK();
}

void GcsSession::Start() {
  start_time_ms_ = NowMs();
  parts_.gcs->RegisterNode(NodeInfoNow());
  Heartbeat();
  WatchResources();
  if (beat_) beat_->Start();
}

void GcsSession::WatchResources() {
  if (stopped_) return;
  if (parts_.tasks->available().amounts() != announced_available_) AnnounceSoon();
  resource_timer_.expires_after(std::chrono::milliseconds(kResourceWatchMs));
  resource_timer_.async_wait([this](auto ec) {
    if (!ec) WatchResources();
  });
}

void GcsSession::Announce() {
  announced_available_ = parts_.tasks->available().amounts();
  parts_.gcs->UpdateNode(NodeInfoNow());
}

void GcsSession::Stop() {
  stopped_ = true;
  heartbeat_timer_.cancel();
  gcs_check_timer_.cancel();
  resource_timer_.cancel();
  if (beat_) beat_->Stop();
}

void GcsSession::Close() {
  if (!parts_.redis->connected()) return;
  Flush();
  parts_.gcs->MarkNodeDead(NodeInfoNow());
}

rpc::NodeInfo GcsSession::NodeInfoNow() const {
  rpc::NodeInfo n;
  n.set_node_id(node_id_);
  n.set_address(options_.node_ip);
  n.set_port(parts_.peers->port());
  n.set_socket_path(options_.socket_path);
  n.set_session_dir(options_.session_dir);
  n.set_pid(static_cast<int>(::getpid()));
  n.set_start_time_ms(start_time_ms_);
  n.set_heartbeat_ms(NowMs());
  n.set_alive(!stopped_);
  const TaskInspection& tasks = *parts_.tasks;
  for (const auto& [k, v] : tasks.total().amounts()) (*n.mutable_resources_total())[k] = v;
  for (const auto& [k, v] : tasks.available().amounts()) (*n.mutable_resources_available())[k] = v;
  auto store = parts_.objects->store().Stats();
  (*n.mutable_resources_total())["object_store_memory"] = static_cast<double>(store.capacity);
  auto ts = tasks.Stats();
  n.set_tasks_queued(ts.queued);
  n.set_tasks_running(ts.running);
  n.set_workers(parts_.pool->size());
  n.set_actors_alive(parts_.actors->num_alive());
  n.set_store_used(store.used);
  n.set_peers_alive(parts_.peers->peers_alive());
  if (parts_.metrics != nullptr) n.set_metrics_export_port(parts_.metrics->port());
  for (const auto& [k, v] : options_.labels) (*n.mutable_labels())[k] = v;
  if (!options_.node_name.empty()) n.set_node_name(options_.node_name);
  (*n.mutable_labels())["ray.io/node-id"] = ToHex(node_id_);
  return n;
}

void GcsSession::AnnounceSoon() {
  if (node_update_posted_) return;
  node_update_posted_ = true;
  boost::asio::post(io_, [this] {
    node_update_posted_ = false;
    if (!stopped_) Announce();
  });
}

void GcsSession::RecordTask(const rpc::TaskRecord& r) {
  if (r.state() == rpc::TASK_PENDING || r.state() == rpc::TASK_RUNNING) return;
  pending_records_.push_back(r);
  pending_records_.back().set_node_id(node_id_);
  pending_records_.back().set_finish_time_ms(NowMs());
}

void GcsSession::Heartbeat() {
  if (stopped_) return;
  if (beat_) beat_->MainLoopAlive();
  if (!parts_.redis->reconnecting()) parts_.peers->Refresh();  // (while the GCS is away nobody can heartbeat: judge nobody)
  Announce();  // (after the refresh: the record says how many nodes it sees now)
  heartbeat_timer_.expires_after(std::chrono::milliseconds(options_.heartbeat_ms));
  heartbeat_timer_.async_wait([this](auto ec) {
    if (!ec) Heartbeat();
  });
  Flush();
}

void GcsSession::Flush() {
  parts_.gcs->PutTaskRecords(pending_records_);
  pending_records_.clear();
  parts_.gcs->DeleteTaskRecords(pending_task_deletes_);
  pending_task_deletes_.clear();
}

void GcsSession::OnGcsLost(const Status& why) {
  PHALANX_LOG(Warning) << why.message() << "; local tasks, gets and actor calls go on meanwhile";
  CheckGcs();
}

void GcsSession::CheckGcs() {
  if (stopped_ || !parts_.redis->reconnecting()) return;
  keeper_.Check();
  gcs_check_timer_.expires_after(std::chrono::seconds(1));
  gcs_check_timer_.async_wait([this](auto ec) {
    if (!ec) CheckGcs();
  });
}

void GcsSession::OnGcsBack() {
  if (stopped_) return;
  gcs_check_timer_.cancel();
  // Nobody could heartbeat while it was away; and a restarted server may
  // have lost its last second of writes (AOF everysec), a promoted replica
  // a little more: what this node owns goes in again.
  parts_.peers->Forgive();
  parts_.gcs->RegisterNode(NodeInfoNow());
  size_t functions = parts_.functions->Republish();
  parts_.clients->ForEachId([this](const std::string& id) { parts_.gcs->RegisterClient(id, node_id_); });
  parts_.actors->AnnounceAll();
  size_t objects = parts_.objects->ListAllInDirectory();
  PHALANX_LOG(Info) << "GCS back: re-published this node, " << functions << " functions, "
                    << parts_.clients->num_registered() << " clients and " << objects << " objects";
}

}  // namespace phalanx::scheduler
