#include "scheduler/node_manager.h"

#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"
#include "core/process.h"
#include "core/status_proto.h"
#include "core/trace.h"
#include "objectstore/shm_region.h"
#include "objectstore/tcp_transport.h"
#include "scheduler/gpu_allocator.h"

namespace phalanx::scheduler {

namespace asio = boost::asio;
using asio::local::stream_protocol;
using Clock = std::chrono::steady_clock;

static int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The "memory" a node offers unless told (--resources '{"memory": BYTES}'): as Ray's nodes do, 70% of the
// memory available at start, less the object store's share of it.
static double DefaultMemoryResource(uint64_t store_capacity) {
  long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  double available = static_cast<double>(pages) * static_cast<double>(page);
  return std::max(0.0, std::floor((available - static_cast<double>(store_capacity)) * 0.7));
}

// What this node offers: its CPUs, GPUs, "memory" and custom resources.
static ResourceSet NodeResources(const NodeManagerOptions& o) {
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

static TaskManagerOptions MakeTaskManagerOptions(const NodeManagerOptions& o) {
  TaskManagerOptions t;
  t.pipeline_depth = o.pipeline_depth;
  t.infeasible_timeout_ms = o.infeasible_timeout_ms;
  t.inline_threshold = o.inline_threshold;
  t.lineage_max_bytes = o.lineage_max_bytes;
  return t;
}

Result<std::unique_ptr<NodeManager>> NodeManager::Create(asio::io_context& io, NodeManagerOptions options) {
  return Make(io, std::move(options), /*connect=*/true);
}

Result<std::unique_ptr<NodeManager>> NodeManager::CreateOffline(asio::io_context& io, NodeManagerOptions options) {
  return Make(io, std::move(options), /*connect=*/false);
}

void NodeManager::HandleClientFrame(const std::shared_ptr<FramedConnection>& conn, const FrameHeader& h,
                                    const char* body, size_t len) {
  router_.ClientFrame(clients_.OfConnection(conn), h, body, len);
}

Result<std::unique_ptr<NodeManager>> NodeManager::Make(asio::io_context& io, NodeManagerOptions options,
                                                       bool connect) {
  if (options.cluster_token.empty()) {
    return Status::InvalidArgument("no cluster token: set PHALANX_CLUSTER_TOKEN (phalanx start and phalanx.init() "
                                   "make one for each session)");
  }
  if (options.store_capacity == 0) options.store_capacity = objectstore::DefaultStoreCapacity();
  auto region = objectstore::ShmRegion::Create(options.store_capacity, "phalanx-store");
  if (!region.ok()) return region.status();
  auto store = std::make_unique<objectstore::ObjectStore>(std::move(region).value());
  std::unique_ptr<NodeManager> nm(new NodeManager(io, std::move(options), std::move(store)));
  if (connect) {
    nm->redis_.SetFallbacks(nm->options_.redis_fallbacks);
    PHALANX_RETURN_IF_ERROR(nm->redis_.Connect(5000));
    NodeManager* p = nm.get();
    nm->redis_.SetReconnect(
        nm->options_.gcs_reconnect_timeout_ms, 0, [p](const Status& why) { p->OnGcsLost(why); },
        [p] { p->OnGcsBack(); });
    HeartbeatOptions h;
    h.endpoints = {RedisEndpoint{nm->options_.redis_host, nm->options_.redis_port}};
    h.endpoints.insert(h.endpoints.end(), nm->options_.redis_fallbacks.begin(), nm->options_.redis_fallbacks.end());
    h.password = nm->options_.cluster_token;
    h.tls = nm->options_.tls;
    h.node_id = nm->node_id_;
    h.interval_ms = nm->options_.heartbeat_ms;
    h.stall_ms = nm->options_.stall_ms;
    nm->beat_ = std::make_unique<HeartbeatThread>(std::move(h));
  }
  return nm;
}

// The object layer's and the peer layer's view of this raylet: how they
// reach other nodes and the object directory, and what they tell it (their
// messages come through the Router, not through here).
class NodeManager::Links : public objectstore::ObjectPeers,
                           public objectstore::ObjectEvents,
                           public PeerEvents {
 public:
  explicit Links(NodeManager* nm) : nm_(nm) {}
  // objectstore::ObjectPeers
  void Call(const std::string& node, rpc::MessageType type, const google::protobuf::Message& m, int64_t timeout_ms,
            std::function<void(Result<std::string>)> done) override {
    nm_->peers_.CallNode(node, type, m, timeout_ms, std::move(done));
  }
  // objectstore::ObjectEvents
  void OnObjectFreed(const std::string& id, bool, bool was_copy) override { nm_->OnObjectFreed(id, was_copy); }
  void OnStoreFull() override { nm_->object_requests_.UnmapIdle(); }
  bool OnCopiesLost(const std::string& id, const std::string&, std::string* reason) override {
    return nm_->object_requests_.OnCopiesLost(id, reason);
  }
  void OnEntryGone(const std::string& id) override { nm_->tasks_.OnReturnSafe(id); }
  void OnCopiedHere(const std::string& id) override { nm_->tasks_.OnReturnSafe(id); }
  void OnAdopted(const std::string& holder, const std::vector<std::string>& ids) override {
    nm_->object_requests_.OnAdopted(holder, ids);
  }
  // PeerEvents
  void OnNodeDead(const std::string& node) override { nm_->OnNodeDead(node); }

  // The transport of the node's copies: framed TCP over the peers' connections.
  std::unique_ptr<objectstore::Transport> MakeTransport() {
    return std::make_unique<objectstore::TcpTransport>(
        [nm = nm_](const std::string& node, std::function<void(Result<std::shared_ptr<RpcClient>>)> done) {
          nm->peers_.Connect(node, std::move(done));
        });
  }
  // The GCS object directory as the transfers see it.
  objectstore::TransferDirectory Directory() {
    NodeManager* nm = nm_;
    return objectstore::TransferDirectory{
        [nm](const std::string& id, const std::string& hint, bool resuming, bool list,
             const std::vector<std::string>& exclude, std::function<void(Result<std::string>)> cb) {
          nm->gcs_.PickSource(id, nm->node_id_, hint, resuming, list, exclude, std::move(cb));
        },
        [nm](const std::string& id, const std::string& node, int delta) { nm->gcs_.AdjustServing(id, node, delta); },
        [nm](const std::string& id, uint64_t size, uint64_t bytes, bool complete) {
          rpc::ObjectLocation loc;
          loc.set_node_id(nm->node_id_);
          loc.set_complete(complete);
          loc.set_bytes_present(bytes);
          nm->gcs_.AddObjectLocation(id, size, loc);
        },
        [nm](const std::string& id) { nm->gcs_.RemoveObjectLocation(id, nm->node_id_); },
        [nm](const std::string& id, uint64_t size, const std::string& device) {
          rpc::ObjectLocation loc;
          loc.set_node_id(nm->node_id_);
          loc.set_complete(true);
          loc.set_bytes_present(size);
          loc.set_device(device);
          nm->gcs_.AddObjectLocation(id, size, loc);
        }};
  }

 private:
  NodeManager* nm_;
};

NodeManager::NodeManager(asio::io_context& io, NodeManagerOptions options,
                         std::unique_ptr<objectstore::ObjectStore> store)
    : io_(io),
      options_(std::move(options)),
      node_id_(RandomBytes(16)),
      links_(std::make_unique<Links>(this)),
      om_(io, node_id_, std::move(store), links_->MakeTransport(), links_.get(), links_.get(), options_.transfer,
          links_->Directory()),
      objects_(om_.table()),
      store_(&om_.store()),
      pool_(io,
            WorkerPoolOptions{options_.worker_command, options_.cpp_worker_command, options_.socket_path,
                              options_.session_dir, options_.session_dir + "/logs", {}},
            this),
      redis_(io, options_.redis_host, options_.redis_port, options_.cluster_token, options_.tls),
      gcs_(&redis_),
      actor_directory_(&gcs_),
      peers_(io, node_id_, options_.node_ip, options_.cluster_token, options_.tls, options_.node_dead_after_ms,
             &tasks_, &actors_, &om_, &gcs_, &router_, links_.get()),
      ledger_(NodeResources(options_)),
      placement_(io, node_id_, &ledger_, &peers_, &gcs_, &objects_, &tasks_, &actors_, this),
      tasks_(io, &objects_, &pool_, &ledger_, &actors_, this, &peers_, placement_.groups(), MakeTaskManagerOptions(options_),
             node_id_),
      actors_(&tasks_, &ledger_, &pool_, node_id_, &actor_directory_, &peers_, placement_.groups()),
      collectives_(io, node_id_, &om_, options_.inline_threshold, &peers_, &gcs_),
      streams_(io, node_id_, &objects_, &tasks_, &peers_, &clients_, this),
      acceptor_(io),
      accept_retry_(io),
      heartbeat_timer_(io),
      keeper_(options_.gcs_restart_file, options_.session_dir + "/redis.pid", options_.gcs_restart_tied),
      gcs_check_timer_(io),
      inspection_(node_id_, options_.node_ip, options_.session_dir,
                  InspectedParts{&tasks_, &om_, &collectives_.steps(), &collectives_.reduces(), &collectives_.allreduces(),
                                 &streams_.table(), &pool_, &clients_},
                  &gcs_, &peers_),
      object_requests_(io, node_id_, &om_, &tasks_, &peers_, &gcs_, &clients_, options_.copy_progress_ms),
      functions_(io, &gcs_) {
  // Every part lists the messages it owns, from clients and from peers.
  AddRoutes(router_);
  functions_.AddRoutes(router_);
  peers_.AddRoutes(router_);
  object_requests_.AddRoutes(router_);
  collectives_.AddRoutes(router_);
  streams_.AddRoutes(router_);
  placement_.AddRoutes(router_);
  inspection_.AddRoutes(router_);
}

NodeManager::~NodeManager() { Stop("raylet destroyed"); }

void NodeManager::OnTaskRecord(const rpc::TaskRecord& r) {
  if (r.state() == rpc::TASK_PENDING || r.state() == rpc::TASK_RUNNING) return;
  pending_records_.push_back(r);
  pending_records_.back().set_node_id(node_id_);
  pending_records_.back().set_finish_time_ms(NowMs());
}

void NodeManager::OnObjectFreed(const std::string& id, bool was_copy) {
  collectives_.OnObjectFreed(id);
  if (was_copy) return;  // the task that made it is another node's to forget
  if (id.size() != kObjectIdSize) return;  // (none enters the table: messages with such ids are refused)
  int index = IndexOf(id);
  if (index > 0) pending_task_deletes_.push_back(TaskIdOf(id));
  if (index == 1) actors_.OnHandlesGone(TaskIdOf(id));  // (an actor's handles carry its creation's return)
}

void NodeManager::OnNodeDead(const std::string& node) {
  collectives_.OnNodeDead(node);
  placement_.OnNodeDead(node);
}

void NodeManager::AnnounceSoon() {
  if (node_update_posted_) return;
  node_update_posted_ = true;
  boost::asio::post(io_, [this] {
    node_update_posted_ = false;
    if (!stopped_) gcs_.UpdateNode(NodeInfoNow());
  });
}

void NodeManager::Warn(const std::string& caller_id, const std::string& message) {
  rpc::Status s = ToProto(Status(StatusCode::kInfeasible, message));
  clients_.ForEach([&](Client& c) {
    if (c.client_id == caller_id) c.conn->Send(rpc::CLIENT_WARNING, 0, 0, s);
  });
}

void NodeManager::EnableSpilling() {
  if (!options_.spill) return;
  std::string parent = options_.spill_dir.empty() ? options_.session_dir + "/spill" : options_.spill_dir;
  om_.EnableSpilling(objectstore::SpillOptions{parent + "/" + ToHex(node_id_).substr(0, 12), options_.spill_max_bytes});
}

Status NodeManager::Start() {
  std::error_code fs_ec;
  std::filesystem::create_directories(options_.session_dir + "/logs", fs_ec);
  EnableSpilling();
  if (options_.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::InvalidArgument("socket path is too long for a Unix socket (" +
                                   std::to_string(options_.socket_path.size()) + " bytes, at most " +
                                   std::to_string(sizeof(sockaddr_un::sun_path) - 1) + "): " + options_.socket_path);
  }
  ::unlink(options_.socket_path.c_str());
  boost::system::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  if (!ec) SetCloseOnExec(acceptor_.native_handle());
  // Only this user may connect (connect() needs write permission on the socket).
  mode_t old_mask = ::umask(0077);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(options_.socket_path), ec);
  ::umask(old_mask);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen on " + options_.socket_path + ": " + ec.message());

  PHALANX_RETURN_IF_ERROR(peers_.Listen());
  redis_.SetDisconnectCallback([this](const Status& why) { Stop(why.message()); });

  start_time_ms_ = NowMs();
  trace::OpenProcessRing(options_.session_dir, node_id_, "raylet", /*capacity=*/65536);  // (8 MiB)
  gcs_.RegisterNode(NodeInfoNow());
  int prestart = options_.prestart_workers >= 0 ? options_.prestart_workers
                                                : std::max(1, static_cast<int>(options_.num_cpus));
  for (int i = 0; i < prestart; ++i) pool_.StartWorker();
  Accept();
  Heartbeat();
  if (beat_) beat_->Start();
  PHALANX_LOG(Info) << "raylet " << ToHex(node_id_) << " listening on " << options_.socket_path << " with "
                    << tasks_.total().ToString() << ", store " << (store_->Stats().capacity >> 20) << " MiB, GCS "
                    << redis_.address();
  return Status::OK();
}

rpc::NodeInfo NodeManager::NodeInfoNow() const {
  rpc::NodeInfo n;
  n.set_node_id(node_id_);
  n.set_address(options_.node_ip);
  n.set_port(peers_.port());
  n.set_socket_path(options_.socket_path);
  n.set_session_dir(options_.session_dir);
  n.set_pid(static_cast<int>(::getpid()));
  n.set_start_time_ms(start_time_ms_);
  n.set_heartbeat_ms(NowMs());
  n.set_alive(!stopped_);
  for (const auto& [k, v] : tasks_.total().amounts()) (*n.mutable_resources_total())[k] = v;
  for (const auto& [k, v] : tasks_.available().amounts()) (*n.mutable_resources_available())[k] = v;
  (*n.mutable_resources_total())["object_store_memory"] = static_cast<double>(store_->Stats().capacity);
  auto ts = tasks_.Stats();
  n.set_tasks_queued(ts.queued);
  n.set_tasks_running(ts.running);
  n.set_workers(pool_.size());
  n.set_actors_alive(actors_.num_alive());
  n.set_store_used(store_->Stats().used);
  return n;
}

void NodeManager::Heartbeat() {
  if (stopped_) return;
  if (beat_) beat_->MainLoopAlive();
  gcs_.UpdateNode(NodeInfoNow());
  if (!redis_.reconnecting()) peers_.Refresh();  // (while the GCS is away nobody can heartbeat: judge nobody)
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
  heartbeat_timer_.expires_after(std::chrono::milliseconds(options_.heartbeat_ms));
  heartbeat_timer_.async_wait([this](auto ec) {
    if (!ec) Heartbeat();
  });
  FlushGcs();
}

void NodeManager::OnGcsLost(const Status& why) {
  PHALANX_LOG(Warning) << why.message() << "; local tasks, gets and actor calls go on meanwhile";
  CheckGcs();
}

void NodeManager::CheckGcs() {
  if (stopped_ || !redis_.reconnecting()) return;
  keeper_.Check();
  gcs_check_timer_.expires_after(std::chrono::seconds(1));
  gcs_check_timer_.async_wait([this](auto ec) {
    if (!ec) CheckGcs();
  });
}

void NodeManager::OnGcsBack() {
  if (stopped_) return;
  gcs_check_timer_.cancel();
  // Nobody could heartbeat while it was away; and a restarted server may
  // have lost its last second of writes (AOF everysec), a promoted replica
  // a little more: what this node owns goes in again.
  peers_.Forgive();
  gcs_.RegisterNode(NodeInfoNow());
  size_t functions = functions_.Republish();
  clients_.ForEachId([this](const std::string& id) { gcs_.RegisterClient(id, node_id_); });
  actors_.AnnounceAll();
  size_t objects = om_.ListAllInDirectory();
  PHALANX_LOG(Info) << "GCS back: re-published this node, " << functions << " functions, "
                    << clients_.num_registered() << " clients and " << objects << " objects";
}

void NodeManager::HandleCheckpoint(const std::shared_ptr<Client>& c, uint64_t req, rpc::ActorCheckpoint m) {
  std::weak_ptr<Client> weak = c;
  auto reply = [this, weak, req](const Status& st, bool found, std::string state) {
    auto c = weak.lock();
    if (!c) return;
    rpc::ActorCheckpointReply r;
    *r.mutable_status() = ToProto(st);
    r.set_found(found);
    r.set_state(std::move(state));
    Reply(*c, rpc::ACTOR_CHECKPOINT, req, r);
  };
  if (!m.save()) {
    gcs_.GetCheckpoint(m.actor_id(), [reply](Result<std::string> r) {
      if (r.ok()) return reply(Status::OK(), true, std::move(r).value());
      reply(r.status().code() == StatusCode::kNotFound ? Status::OK() : r.status(), false, "");
    });
    return;
  }
  if (m.state().size() > options_.checkpoint_max_bytes) {
    return reply(Status::InvalidArgument("the checkpoint is " + std::to_string(m.state().size() >> 20) +
                                         " MiB, more than the " + std::to_string(options_.checkpoint_max_bytes >> 20) +
                                         " MiB kept (the raylet's --checkpoint-max-bytes)"),
                 false, "");
  }
  gcs_.PutCheckpoint(m.actor_id(), m.state(), [reply](Status st) { reply(st, false, ""); });
}

void NodeManager::FlushGcs() {
  gcs_.PutTaskRecords(pending_records_);
  pending_records_.clear();
  gcs_.DeleteTaskRecords(pending_task_deletes_);
  pending_task_deletes_.clear();
}

void NodeManager::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, stream_protocol::socket sock) {
    if (stopped_) return;
    if (ec) {
      PHALANX_LOG(Warning) << "accept failed: " << ec.message();
      // Out of descriptors, say: try again shortly rather than spin.
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](const boost::system::error_code& e) {
        if (!e && !stopped_) Accept();
      });
      return;
    } else if (Status who = CheckPeerUser(sock.native_handle()); !who.ok()) {
      PHALANX_LOG(Warning) << "refused a client on " << options_.socket_path << ": " << who.message();
    } else {
      SetCloseOnExec(sock.native_handle());
      FramedConnection::Socket generic(io_);
      generic.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), sock.release());
      auto c = clients_.Add(std::make_shared<FramedConnection>(std::move(generic), "client"));
      std::weak_ptr<Client> weak = c;
      c->conn->Start(
          [this, weak](const FrameHeader& h, const char* body, size_t len) {
            if (auto cl = weak.lock()) router_.ClientFrame(cl, h, body, len);
          },
          [this, weak](const Status& why) {
            if (auto cl = weak.lock()) OnClose(cl, why);
          });
    }
    Accept();
  });
}

void NodeManager::HandleRegister(const std::shared_ptr<Client>& c, uint64_t req, const rpc::RegisterClient& m) {
  rpc::RegisterClientReply r;
  if (m.client_id().size() != kClientIdSize) {
    *r.mutable_status() = ToProto(Status::InvalidArgument("malformed client id"));
    Reply(*c, rpc::REGISTER_CLIENT, req, r);
    c->conn->Close();
    return;
  }
  c->pid = m.pid();
  c->client_id = m.client_id();
  c->is_worker = m.is_worker();
  if (m.is_worker()) {
    c->worker = pool_.Register(m.worker_token(), m.pid(), c->conn);
    if (c->worker == nullptr) {
      *r.mutable_status() =
          ToProto(Status::InvalidArgument("unknown worker token: this raylet did not start that worker"));
      Reply(*c, rpc::REGISTER_CLIENT, req, r);
      return;
    }
    c->worker->client_id = c->client_id;
  }
  c->registered = true;
  r.set_node_id(node_id_);
  r.set_store_capacity(store_->Stats().capacity);
  r.set_session_dir(options_.session_dir);
  r.set_gcs_address(redis_.addresses());
  r.set_inline_threshold(options_.inline_threshold);
  r.set_node_address(options_.node_ip);
  r.set_cluster_token(options_.cluster_token);
  r.set_tls(options_.tls != nullptr);
  clients_.Registered(c.get());
  if (object_requests_.CreatorRegistered(c->client_id)) gcs_.RegisterClient(c->client_id, node_id_);
  Status st = c->conn->SendWithFd(EncodeFrame(rpc::REGISTER_CLIENT, kReplyFlag, req, r), store_->region().fd());
  if (!st.ok()) {
    PHALANX_LOG(Warning) << st.ToString();
    c->conn->Close();
    return;
  }
  if (c->worker) tasks_.OnWorkerRegistered(c->worker);
}

void NodeManager::HandleSubmit(Client& c, rpc::TaskSpec spec) {
  Status valid = ValidateTaskSpec(spec);
  if (!valid.ok()) {  // said to the client; nothing of it is kept
    PHALANX_LOG(Warning) << "refused a task from pid " << c.pid << ": " << valid.message();
    c.conn->Send(rpc::CLIENT_WARNING, 0, 0, ToProto(valid));
    if (spec.num_returns() < 0 || spec.num_returns() > kMaxReturns) return;
    for (int i = 1; i <= spec.num_returns(); ++i) {
      std::string id = MakeObjectId(spec.task_id(), static_cast<uint32_t>(i));
      if (!spec.returns_held()) object_requests_.Hold(c, id);
      objects_.MarkLost(id, valid.code(), valid.message());
    }
    return;
  }
  for (int i = 1; i <= spec.num_returns(); ++i) {
    std::string id = MakeObjectId(spec.task_id(), static_cast<uint32_t>(i));
    // A direct actor call handed back after its connection broke: the caller
    // already holds its returns (and its stream is open); the task now produces them.
    if (spec.returns_held()) {
      c.expected.erase(id);
    } else {
      object_requests_.Hold(c, id);
    }
  }
  if (spec.generator() != rpc::GENERATOR_NONE && !spec.returns_held()) {
    streams_.table().Open(spec.task_id(), c.client_id, spec.generator() == rpc::GENERATOR_DYNAMIC);
  }
  tasks_.Submit(std::move(spec));
}

void NodeManager::HandleGetActor(const std::shared_ptr<Client>& c, uint64_t req, const std::string& name) {
  // (An actor created here still claiming its name cluster-wide: once it has it, or lost it.)
  std::weak_ptr<Client> weak = c;
  actors_.WhenNamed(name, [this, weak, req, name] {
    if (auto cl = weak.lock()) LookUpActor(cl, req, name);
  });
}

void NodeManager::LookUpActor(const std::shared_ptr<Client>& c, uint64_t req, const std::string& name) {
  auto r = actors_.Lookup(name);
  if (r.ok()) return Reply(*c, rpc::GET_ACTOR, req, r.value());
  // Not created here: ask the GCS, which every node's actors are in.
  std::weak_ptr<Client> weak = c;
  gcs_.GetAllActors([this, weak, req, name](Result<std::vector<rpc::ActorInfo>> all) {
    rpc::GetActorReply reply;
    bool found = false;
    if (all.ok()) {
      for (const auto& a : all.value()) {
        if (a.name() == name && a.state() != rpc::ACTOR_DEAD) {
          reply.set_actor_id(a.actor_id());
          reply.set_function_id(a.function_id());
          reply.set_class_name(a.class_name());
          reply.set_state(a.state());
          found = true;
          break;
        }
      }
    }
    if (!found) *reply.mutable_status() = ToProto(Status::NotFound("no live actor named '" + name + "'"));
    if (auto cl = weak.lock()) Reply(*cl, rpc::GET_ACTOR, req, reply);
  });
}

void NodeManager::HandleExpectReturns(Client& c, const rpc::ExpectReturns& m) {
  for (int i = 0; i < m.task_ids_size(); ++i) {
    for (int k = 1; k <= m.num_returns(i); ++k) {
      std::string id = MakeObjectId(m.task_ids(i), static_cast<uint32_t>(k));
      object_requests_.Hold(c, id);
      c.expected.insert(id);
    }
  }
  for (const auto& tid : m.streams()) streams_.table().Open(tid, c.client_id, /*dynamic=*/false);
  for (const auto& tid : m.dynamic_streams()) streams_.table().Open(tid, c.client_id, /*dynamic=*/true);
}

void NodeManager::HandleDirectResults(Client& c, rpc::TaskDone m) {
  for (const auto& r : m.returns()) c.expected.erase(r.object_id());
  if (m.item()) return streams_.StoreItems(std::move(m));
  StoreHandedResults(m);
}

void NodeManager::StoreHandedResults(rpc::TaskDone& m) {
  // Store results made on another node stay there, held for this node, until
  // their bytes are needed here (ObjectTable::SetRemote).
  std::vector<std::string> remote;
  std::vector<uint64_t> sizes;
  for (auto& r : *m.mutable_returns()) {
    const std::string& id = r.object_id();
    if (r.in_store() && !m.holder_node().empty() && m.holder_node() != node_id_) {
      remote.push_back(id);
      sizes.push_back(r.size());
      continue;
    }
    if (r.in_store()) {
      // Created and sealed here by the actor's worker, which held it until
      // now: the caller's hold (EXPECT_RETURNS) keeps it from here on.
      Client* holder = clients_.Find(m.release_holder());
      if (holder != nullptr && holder->holds.erase(id)) objects_.RemoveRef(id);
      if (holder == nullptr && !objects_.IsReady(id)) {
        objects_.MarkLost(id, StatusCode::kObjectLost, "the actor's worker that made it exited before handing it over");
      }
      continue;
    }
    std::vector<std::string> contained(r.contained_ids().begin(), r.contained_ids().end());
    if (r.data().size() <= options_.inline_threshold) {
      objects_.PutInline(id, std::move(*r.mutable_data()), std::move(contained));
      continue;
    }
    // A large result from an actor on another node came inline: it goes to the store.
    Status st = objects_.PutInStore(id, r.data(), std::move(contained));
    if (!st.ok()) objects_.MarkLost(id, st.code(), "cannot store the result of an actor call: " + st.message());
  }
  if (remote.empty()) return;
  om_.Adopt(m.holder_node(), m.release_holder(), remote);
  for (size_t i = 0; i < remote.size(); ++i) {
    if (!objects_.SetRemote(remote[i], m.holder_node(), sizes[i])) om_.Release(m.holder_node(), {remote[i]});
  }
}

void NodeManager::OnClose(const std::shared_ptr<Client>& c, const Status& why) {
  if (!stopped_ && c->registered) placement_.OnClientGone(c->client_id);  // its groups go with it (unless detached)
  if (c->met && !stopped_) {
    collectives_.OnClientGone(c->client_id, std::string(c->is_worker ? "worker" : "driver") + " process " +
                                             std::to_string(c->pid) + " on node " + ToHex(node_id_).substr(0, 12) +
                                             " exited" + (why.ok() ? "" : " (" + why.message() + ")"));
  }
  if (c->worker != nullptr) {
    // The exit status usually follows the closed socket by a moment; wait
    // briefly for SIGCHLD so the error can say how the worker died.
    std::string token = c->worker->token;
    std::string why_text = "worker process " + std::to_string(c->pid) + " disconnected" +
                           (why.ok() ? "" : " (" + why.message() + ")");
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
    timer->async_wait([this, timer, token, why_text](auto) {
      if (Worker* w = pool_.Find(token)) pool_.MarkDead(w, why_text);
    });
    c->worker = nullptr;
  }
  for (const auto& [id, n] : c->pins) {
    for (int64_t i = 0; i < n; ++i) objects_.ReleasePin(id);
  }
  c->pins.clear();
  for (const auto& id : c->creating) objects_.AbortCreate(id);
  c->creating.clear();
  // Results its direct actor calls would have brought: nobody else can bring them.
  for (const auto& id : c->expected) {
    if (!objects_.IsReady(id)) {
      objects_.MarkLost(id, StatusCode::kObjectLost,
                        "the process that called the actor exited before the call's result came back to it");
    }
  }
  c->expected.clear();
  streams_.table().DropAllOf(c->client_id);  // its generators stop; their unread items go
  auto holds = std::move(c->holds);
  c->holds.clear();
  for (const auto& id : holds) objects_.RemoveRef(id);
  if (!stopped_) actors_.OnClientGone(c->client_id);
  clients_.Remove(c.get());
}

void NodeManager::Stop(const std::string& why) {
  if (stopped_) return;
  stopped_ = true;
  functions_.Stop();
  placement_.Stop();
  PHALANX_LOG(Info) << "raylet stopping: " << why;
  boost::system::error_code ec;
  acceptor_.close(ec);
  heartbeat_timer_.cancel();
  object_requests_.Stop();
  gcs_check_timer_.cancel();
  if (beat_) beat_->Stop();
  rpc::Status s = ToProto(Status::Unavailable("raylet " + options_.socket_path + " stopped: " + why));
  clients_.ForEach([&](Client& c) {
    if (!c.is_worker) c.conn->Send(rpc::RAYLET_FAILING, 0, 0, s);
  });
  pool_.KillAll(std::chrono::milliseconds(300));
  collectives_.Stop("raylet " + options_.socket_path + " stopped: " + why);
  peers_.Stop();
  if (redis_.connected()) {
    FlushGcs();
    gcs_.MarkNodeDead(NodeInfoNow());
  }
  ::unlink(options_.socket_path.c_str());
}

}  // namespace phalanx::scheduler
