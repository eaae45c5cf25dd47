// PeerManager: this raylet's dealings with the other raylets of the cluster,
// over TCP. It keeps the ClusterView fresh from the GCS (and marks nodes
// whose heartbeats stopped as dead), spills tasks that do not fit here to a
// node where they fit, runs tasks other nodes spilled here and sends their
// results back. A spilled task whose node dies (its connection closes, or
// its heartbeats stop) is retried per max_retries by the TaskManager.
// Every connection, both ways, first proves the cluster token (core/auth.h):
// nothing a peer sends is read before that.
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio.hpp>

#include "core/peer_channel.h"
#include "core/rpc_client.h"
#include "gcs/gcs_client.h"
#include "objectstore/object_manager.h"
#include "scheduler/cluster_view.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/router.h"
#include "scheduler/task_table.h"

namespace phalanx::scheduler {

// What the other raylets' messages mean to the rest of this raylet: the
// collectives', the generators' and the placement groups' messages, and the
// death of a node. Given to the PeerManager at construction.
class PeerEvents {
 public:
  virtual ~PeerEvents() = default;
  // Once per node declared dead, after this node settled its actors and holds.
  virtual void OnNodeDead(const std::string& node_id) = 0;
};

class PeerManager final : public RemoteNodes,
                          public NodeLiveness,
                          public ClusterResources,
                          public PeerView,
                          public PeerChannel {
 public:
  // `token`: the cluster token every peer must prove (non-empty); `tls`:
  // every peer connection is TLS under the handshake (null: plain TCP).
  // `tasks`, `actors`: the node's task queue and actors; `objects`: the node's object layer (holds across nodes, copies of
  // results); `events`: the rest of the raylet, told what concerns it. Both owned by the
  // caller, outliving this; neither is used before the first message.
  PeerManager(boost::asio::io_context& io, std::string node_id, std::string node_ip, std::string token,
              std::shared_ptr<const TlsContext> tls, int64_t dead_after_ms, ForwardedTasks* tasks,
              NodeActors* actors, objectstore::ObjectManager* objects, GcsClient* gcs, const Router* router,
              PeerEvents* events);
  // Its peer routes: pulls and releases of held objects, cancels, kills, forwarded tasks.
  void AddRoutes(Router& router);

  // Listens for other raylets on node_ip, on a port the kernel picks.
  Status Listen();
  int port() const override { return port_; }
  // Reads the node table and heartbeats: updates the view, marks silent nodes dead.
  void Refresh() override;
  // Every node's silence counts from now again (the GCS was away: nobody could heartbeat).
  void Forgive() override;
  size_t peers_alive() const override { return view_.size(); }
  size_t peers_dead() const override { return view_.dead(); }
  // RemoteNodes (for the TaskManager and the ActorManager).
  std::string Spill(const rpc::TaskSpec& forward, const ResourceSet& need) override;
  // Whether `node_id` is another node, alive as last heard.
  bool IsAlive(const std::string& node_id) const override { return view_.Find(node_id) != nullptr; }
  bool FitsSomewhere(const ResourceSet& need) const override { return view_.FitsSomewhere(need, tasks_->total()); }
  // Sends the task to one node by id; false if that node is not alive.
  bool SpillTo(const std::string& node_id, const rpc::TaskSpec& forward) override;
  // Asks the node hosting an actor to kill it (fire and forget; its table entry tells the outcome).
  // `done` gets that node's answer (OK when the node is gone: so is the actor).
  void KillActor(const std::string& node_id, const std::string& actor_id, bool no_restart,
                 std::function<void(const Status&)> done) override;
  void CancelTask(const std::string& node_id, const rpc::CancelTask& m) override {
    Call(node_id, rpc::CANCEL_TASK, m, 10000, nullptr);
  }
  // PeerChannel: a one-way or request message to `node_id`; `done` (may be null) gets the reply or the error.
  void Call(const std::string& node_id, rpc::MessageType type, const google::protobuf::Message& m,
            int64_t timeout_ms, std::function<void(Result<std::string>)> done) override;
  // A connection to `node_id` (made if needed), or why there is none: the
  // object layer's TcpTransport reads ranges over it.
  void Connect(const std::string& node_id, std::function<void(Result<std::shared_ptr<RpcClient>>)> done);
  // SPREAD: the next node in round robin over this one and the others; "" means this one.
  std::string NextSpreadNode() override;
  Result<std::string> PlaceByLabels(const rpc::TaskSpec& spec, const ResourceSet& need) override {
    auto where = view_.PlaceByLabels(spec, need, tasks_->total(), tasks_->available());
    if (where.ok() && !where.value().empty()) view_.Reserve(where.value(), need);  // (booked till the next read)
    return where;
  }
  // The other live nodes and what each has free, as last heard.
  std::vector<std::pair<std::string, ResourceSet>> FreeElsewhere() const override;
  void Stop();

 private:
  void Accept();
  // Once per dead node (whoever declared it): its actors' fate here, and its orphans.
  void SettleDeadNode(const rpc::NodeInfo& n);
  // Detached actors the dead node hosted and owned: one live node restarts each.
  void RestartOrphans(const std::string& dead_node, const std::string& why);
  void HandleForward(const PeerReply& reply, rpc::ForwardTask m);
  void Send(const rpc::NodeInfo& node, const rpc::TaskSpec& spec);
  // Runs `fn` with a connection to `node` (connecting first if needed), or with null if it cannot.
  void WithClient(const rpc::NodeInfo& node, std::function<void(std::shared_ptr<RpcClient>, const Status&)> fn);
  void Call(const std::shared_ptr<RpcClient>& client, const std::string& node_id, const std::string& node_desc,
            const rpc::TaskSpec& spec);

  boost::asio::io_context& io_;
  std::string node_id_;
  std::string node_ip_;
  std::string token_;
  std::shared_ptr<const TlsContext> tls_;
  ForwardedTasks* tasks_;
  NodeActors* actors_;
  objectstore::ObjectManager* objects_;
  GcsClient* gcs_;
  const Router* router_;  // where an authenticated peer's frames go
  PeerEvents* events_;
  ClusterView view_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;  // accepting paused (out of descriptors)
  int port_ = 0;
  bool stopped_ = false;
  std::unordered_map<std::string, std::shared_ptr<RpcClient>> clients_;       // node id -> connection
  // node id -> what waits for the connection being made
  std::unordered_map<std::string, std::vector<std::function<void(std::shared_ptr<RpcClient>, const Status&)>>>
      connecting_;
  std::vector<std::shared_ptr<FramedConnection>> inbound_;
  std::unordered_set<std::string> marked_dead_;
  uint64_t spread_counter_ = 0;
};

}  // namespace phalanx::scheduler
