#include "scheduler/raylet.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/ids.h"
#include "core/logging.h"
#include "core/trace.h"
#include "objectstore/shm_region.h"
#include "objectstore/tcp_transport.h"
#include "scheduler/gpu_allocator.h"

namespace phalanx::scheduler {

namespace asio = boost::asio;

// The "memory" a node offers unless told (--resources '{"memory": BYTES}'): as Ray's nodes do, 70% of the
// memory available at start, less the object store's share of it.
static double DefaultMemoryResource(uint64_t store_capacity) {
  long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  double available = static_cast<double>(pages) * static_cast<double>(page);
  return std::max(0.0, std::floor((available - static_cast<double>(store_capacity)) * 0.7));
}

// What this node offers: its CPUs, GPUs, "memory" and custom resources.
static ResourceSet NodeResources(const RayletOptions& o) {
  ResourceSet total({{"CPU", o.num_cpus}});
  int gpus = o.num_gpus >= 0 ? o.num_gpus : DetectGpus();
  if (gpus > 0) total.Set("GPU", gpus);
  if (!o.resources.count("memory")) {
    double memory = DefaultMemoryResource(o.store_capacity != 0 ? o.store_capacity : objectstore::DefaultStoreCapacity());
    if (memory > 0) total.Set("memory", memory);
  }
  for (const auto& [k, v] : o.resources) total.Set(k, v);
  return total;
}

static TaskManagerOptions MakeTaskManagerOptions(const RayletOptions& o) {
  TaskManagerOptions t;
  t.pipeline_depth = o.pipeline_depth;
  t.infeasible_timeout_ms = o.infeasible_timeout_ms;
  t.inline_threshold = o.inline_threshold;
  t.lineage_max_bytes = o.lineage_max_bytes;
  return t;
}

Result<std::unique_ptr<Raylet>> Raylet::Create(asio::io_context& io, RayletOptions options) {
  return Make(io, std::move(options), /*connect=*/true);
}

Result<std::unique_ptr<Raylet>> Raylet::CreateOffline(asio::io_context& io, RayletOptions options) {
  return Make(io, std::move(options), /*connect=*/false);
}

Result<std::unique_ptr<Raylet>> Raylet::Make(asio::io_context& io, RayletOptions options, bool connect) {
  if (options.cluster_token.empty()) {
    return Status::InvalidArgument("no cluster token: set PHALANX_CLUSTER_TOKEN (phalanx start and phalanx.init() "
                                   "make one for each session)");
  }
  if (options.store_capacity == 0) options.store_capacity = objectstore::DefaultStoreCapacity();
  auto region = objectstore::ShmRegion::Create(options.store_capacity, "phalanx-store");
  if (!region.ok()) return region.status();
  auto store = std::make_unique<objectstore::ObjectStore>(std::move(region).value());
  std::unique_ptr<Raylet> r(new Raylet(io, std::move(options), std::move(store)));
  if (connect) PHALANX_RETURN_IF_ERROR(r->session_.Connect());
  return r;
}

// What the object layer and the peers tell the node, passed on to the
// parts that care (their messages come through the Router, not through
// here), and the transport of the node's copies.
class Raylet::Events : public objectstore::ObjectEvents, public PeerEvents {
 public:
  explicit Events(Raylet* r) : nm_(r) {}
  // objectstore::ObjectEvents
  // An object freed here: its reduce record, its task record and, for an
  // actor's creation, the actor's handles go.
  void OnObjectFreed(const std::string& id, bool, bool was_copy) override {
    nm_->collectives_.OnObjectFreed(id);
    if (was_copy) return;  // the task that made it is another node's to forget
    nm_->device_holders_.OnObjectFreed(id);
    if (id.size() != kObjectIdSize) return;  // (none enters the table: messages with such ids are refused)
    int index = IndexOf(id);
    if (index > 0) nm_->session_.ForgetTask(TaskIdOf(id));
    if (index == 1) nm_->actors_.OnHandlesGone(TaskIdOf(id));  // (an actor's handles carry its creation's return)
  }
  void OnStoreFull() override { nm_->object_requests_.UnmapIdle(); }
  bool OnCopiesLost(const std::string& id, const std::string&, std::string* reason) override {
    return nm_->object_requests_.OnCopiesLost(id, reason);
  }
  void OnEntryGone(const std::string& id) override {
    nm_->tasks_.OnReturnSafe(id);
    // An actor whose constructor never returned (it keeps failing and restarting): its ready object,
    // pending, went with its last holder, without a value to free. Its handles are gone all the same.
    if (id.size() == kObjectIdSize && IndexOf(id) == 1) nm_->actors_.OnHandlesGone(TaskIdOf(id));
  }
  void OnCopiedHere(const std::string& id) override { nm_->tasks_.OnReturnSafe(id); }
  void OnAdopted(const std::string& holder, const std::vector<std::string>& ids) override {
    nm_->object_requests_.OnAdopted(holder, ids);
  }
  // PeerEvents
  // A node was declared dead: its reduce steps, rendezvous and bundles here.
  void OnNodeDead(const std::string& node) override {
    nm_->collectives_.OnNodeDead(node);
    nm_->placement_.OnNodeDead(node);
  }

  // The transport of the node's copies: framed TCP over the peers' connections.
  std::unique_ptr<objectstore::Transport> MakeTransport() {
    return std::make_unique<objectstore::TcpTransport>(
        [nm = nm_](const std::string& node, std::function<void(Result<std::shared_ptr<RpcClient>>)> done) {
          nm->peers_.Connect(node, std::move(done));
        });
  }

 private:
  Raylet* nm_;
};

Raylet::Raylet(asio::io_context& io, RayletOptions options, std::unique_ptr<objectstore::ObjectStore> store)
    : io_(io),
      options_(std::move(options)),
      node_id_(RandomBytes(16)),
      events_(std::make_unique<Events>(this)),
      directory_(&gcs_, node_id_),
      om_(io, node_id_, std::move(store), events_->MakeTransport(), &peers_, events_.get(), options_.transfer,
          &directory_),
      pool_(io,
            WorkerPoolOptions{options_.worker_command, options_.cpp_worker_command, options_.socket_path,
                              options_.session_dir, options_.session_dir + "/logs",
                              {{"PHALANX_NODE_IP", options_.node_ip}}},  // (ray.util.get_node_ip_address in a worker)
            &tasks_),
      redis_(io, options_.redis_host, options_.redis_port, options_.cluster_token, options_.tls),
      gcs_(&redis_),
      actor_directory_(&gcs_),
      peers_(io, node_id_, options_.node_ip, options_.cluster_token, options_.tls, options_.node_dead_after_ms,
             &tasks_, &actors_, &om_, &gcs_, &router_, events_.get()),
      ledger_(NodeResources(options_)),
      placement_(io, node_id_, &ledger_, &peers_, &peers_, &gcs_, &om_.table(), &tasks_, &actors_, &session_),
      tasks_(io, &om_.table(), &pool_, &ledger_, &actors_, &task_service_, &peers_, placement_.groups(),
             MakeTaskManagerOptions(options_), node_id_),
      actors_(&tasks_, &ledger_, &pool_, node_id_, &actor_directory_, &peers_, placement_.groups()),
      collectives_(io, node_id_, &om_, options_.inline_threshold, &peers_, &gcs_),
      streams_(io, node_id_, &om_.table(), &tasks_, &tasks_, &peers_, &clients_, &task_service_),
      inspection_(node_id_, options_.node_ip, options_.session_dir,
                  InspectedParts{&tasks_, &om_, &collectives_.steps(), &collectives_.reduces(), &collectives_.allreduces(),
                                 &streams_.table(), &pool_, &clients_},
                  &gcs_, &peers_),
      object_requests_(io, node_id_, &om_, &tasks_, &peers_, &gcs_, &clients_, options_.copy_progress_ms),
      device_holders_(io, &om_.table(), &clients_),
      functions_(io, &gcs_),
      output_(&gcs_, options_.node_ip),
      metrics_(options_.node_ip, MetricsPage::SessionName(options_.session_dir)),
      metrics_page_(options_.node_ip, options_.session_dir,
                    options_.gcs_restart_file.empty() ? "" : options_.session_dir + "/redis.pid",
                    MetricsPageParts{&inspection_, &tasks_, &actors_, &placement_.table(), &clients_, &peers_, &metrics_}),
      metrics_exporter_(io, &metrics_page_, options_.cluster_token),
      session_(io, node_id_, options_,
               SessionParts{&redis_, &gcs_, &peers_, &tasks_, &actors_, &pool_, &om_, &functions_, &clients_,
                            &metrics_exporter_}),
      task_service_(node_id_, options_.inline_threshold, &om_, &tasks_, &streams_, &object_requests_, &clients_,
                    &session_),
      actor_service_(&actors_, &tasks_, &gcs_, options_.checkpoint_max_bytes),
      // A client's exit: its groups, its rendezvous, its generators, what it held, its GPU objects, the actors it owned.
      client_service_(io, node_id_, options_, &router_, &clients_, &pool_, &om_, &redis_, &object_requests_, &tasks_,
                      {&placement_, &collectives_, &streams_, &object_requests_, &device_holders_, &actor_service_,
                       &metrics_}),
      tidy_timer_(io) {
  // Every service lists the messages it owns, from clients and from peers.
  client_service_.AddRoutes(router_);
  task_service_.AddRoutes(router_);
  actor_service_.AddRoutes(router_);
  functions_.AddRoutes(router_);
  output_.AddRoutes(router_);
  metrics_.AddRoutes(router_);
  peers_.AddRoutes(router_);
  object_requests_.AddRoutes(router_);
  device_holders_.AddRoutes(router_);
  collectives_.AddRoutes(router_);
  streams_.AddRoutes(router_);
  placement_.AddRoutes(router_);
  inspection_.AddRoutes(router_);
}

Raylet::~Raylet() { Stop("raylet destroyed"); }

void Raylet::EnableSpilling() {
  if (!options_.spill) return;
  std::string parent = options_.spill_dir.empty() ? options_.session_dir + "/spill" : options_.spill_dir;
  om_.EnableSpilling(objectstore::SpillOptions{parent + "/" + ToHex(node_id_).substr(0, 12), options_.spill_max_bytes});
}

Status Raylet::Start() {
  std::error_code fs_ec;
  std::filesystem::create_directories(options_.session_dir + "/logs", fs_ec);
  EnableSpilling();
  PHALANX_RETURN_IF_ERROR(client_service_.Listen());
  PHALANX_RETURN_IF_ERROR(peers_.Listen());
  if (options_.metrics_export_port >= 0) {  // (-1: no endpoint)
    PHALANX_RETURN_IF_ERROR(metrics_exporter_.Listen(options_.node_ip, options_.metrics_export_port));
  }
  redis_.SetDisconnectCallback([this](const Status& why) { Stop(why.message()); });
  trace::OpenProcessRing(options_.session_dir, node_id_, "raylet", /*capacity=*/65536);  // (8 MiB)
  session_.Start();
  int prestart = options_.prestart_workers >= 0 ? options_.prestart_workers
                                                : std::max(1, static_cast<int>(options_.num_cpus));
  for (int i = 0; i < prestart; ++i) pool_.StartWorker();
  Tidy();
  PHALANX_LOG(Info) << "raylet " << ToHex(node_id_) << " listening on " << options_.socket_path << " with "
                    << tasks_.total().ToString() << ", store " << (om_.store().Stats().capacity >> 20) << " MiB, GCS "
                    << redis_.address();
  return Status::OK();
}

void Raylet::Tidy() {
  if (stopped_) return;
  size_t keep_idle = std::max<size_t>(1, static_cast<size_t>(options_.num_cpus));
  if (pool_.num_idle() > keep_idle) {  // a worker that created actors lives on while they do (they die with it)
    auto owners = actors_.Owners();
    pool_.TrimIdle(keep_idle, std::chrono::seconds(10), [&](const Worker& w) { return owners.count(w.client_id) > 0; });
  }
  object_requests_.ReportSlowCopies();
  auto now = std::chrono::steady_clock::now();
  if (now - rings_pruned_at_ > std::chrono::seconds(30)) {  // the trace rings of exited workers: the newest 32 stay
    rings_pruned_at_ = now;
    trace::PruneExitedRings(options_.session_dir, node_id_, 32);
  }
  tidy_timer_.expires_after(std::chrono::milliseconds(options_.heartbeat_ms));
  tidy_timer_.async_wait([this](auto ec) {
    if (!ec) Tidy();
  });
}

void Raylet::Stop(const std::string& why) {
  if (stopped_) return;
  stopped_ = true;
  functions_.Stop();
  placement_.Stop();
  PHALANX_LOG(Info) << "raylet stopping: " << why;
  tidy_timer_.cancel();
  metrics_exporter_.Stop();
  session_.Stop();
  object_requests_.Stop();
  client_service_.Stop("raylet " + options_.socket_path + " stopped: " + why);
  pool_.KillAll(std::chrono::milliseconds(300));
  collectives_.Stop("raylet " + options_.socket_path + " stopped: " + why);
  peers_.Stop();
  session_.Close();
}

}  // namespace phalanx::scheduler
