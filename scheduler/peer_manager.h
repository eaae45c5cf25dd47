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

#include "core/gcs_client.h"
#include "core/rpc_client.h"
#include "objectstore/object_store.h"
#include "objectstore/object_table.h"
#include "objectstore/object_transfer.h"
#include "scheduler/cluster_view.h"
#include "scheduler/task_manager.h"

namespace phalanx::scheduler {

class PeerManager {
 public:
  // `token`: the cluster token every peer must prove (non-empty); `tls`:
  // every peer connection is TLS under the handshake (null: plain TCP).
  PeerManager(boost::asio::io_context& io, std::string node_id, std::string node_ip, std::string token,
              std::shared_ptr<const TlsContext> tls,
              int64_t dead_after_ms, TaskManager* tasks, objectstore::ObjectTable* objects,
              objectstore::ObjectStore* store, GcsClient* gcs, objectstore::TransferOptions transfer = {});

  // Listens for other raylets on node_ip, on a port the kernel picks.
  Status Listen();
  int port() const { return port_; }
  // Reads the node table: updates the view, marks silent nodes dead.
  void Refresh(int64_t now_ms);
  // SpillHandler for the TaskManager (tasks and actor creations): sends the
  // task to a node where it fits; that node's id, or "" if none.
  std::string Spill(const rpc::TaskSpec& forward, const ResourceSet& need);
  // Whether `node_id` is another node, alive as last heard.
  bool IsAlive(const std::string& node_id) const { return view_.Find(node_id) != nullptr; }
  bool FitsSomewhere(const ResourceSet& need) const { return view_.FitsSomewhere(need, tasks_->total()); }
  // Sends the task to one node by id; false if that node is not alive.
  bool SpillTo(const std::string& node_id, const rpc::TaskSpec& forward);
  // Asks the node hosting an actor to kill it (fire and forget; its table entry tells the outcome).
  void KillRemoteActor(const std::string& node_id, const std::string& actor_id, bool no_restart);
  // Copies objects that live on `node_id` into this node (see ObjectTransfer).
  void Fetch(const std::vector<std::string>& ids, const std::string& node_id);
  // Asks `node_id` to hold `ids` for this node from now on, instead of
  // `holder` (the actor worker there that made them and may exit): they stay
  // there until this node Releases them (or dies).
  void Adopt(const std::string& node_id, const std::string& holder, const std::vector<std::string>& ids);
  // Lets go of holds that `node_id` has for this node: `counts[i]` of ids[i]
  // (none given: one each). Sent in one message per node per loop turn.
  void Release(const std::string& node_id, const std::vector<std::string>& ids,
               const std::vector<uint32_t>& counts = {});
  // Holds `id` for `node_id` once more (a value or task sent there with it
  // inside, or a result kept here for it), until that node Releases it (or dies).
  void HoldFor(const std::string& node_id, const std::string& id);
  // Refs nested in values that arrived from `node_id` (AddBorrowed): their holds there not needed are released.
  void Borrow(const std::vector<std::string>& ids, const std::string& node_id);
  // Runs on an adopting RELEASE_HELD from another node: (holder, ids) let go.
  using ReleaseHandler = std::function<void(const std::string& holder, const std::vector<std::string>& ids)>;
  void SetReleaseHandler(ReleaseHandler h) { on_release_ = std::move(h); }
  // Sends a one-way or request message to `node_id`; `done` (may be null) gets the reply or the error.
  void CallNode(const std::string& node_id, rpc::MessageType type, const google::protobuf::Message& m,
                int64_t timeout_ms, std::function<void(Result<std::string>)> done);
  // Handles REDUCE_STEP, DROP_PARTIALS, ASSEMBLE_SLICES and LOSE_OBJECTS from other nodes: (type, body, reply).
  using CollectiveHandler = std::function<void(rpc::MessageType type, const std::string& from_body,
                                               std::function<void(const Status&)> reply)>;
  void SetCollectiveHandler(CollectiveHandler h) { on_collective_ = std::move(h); }
  // Handles STREAM_ITEMS and STREAM_CREDIT from other nodes: (type, body, reply with this message).
  using StreamHandler = std::function<void(rpc::MessageType type, const std::string& body,
                                           std::function<void(const google::protobuf::MessageLite&)> reply)>;
  void SetStreamHandler(StreamHandler h) { on_stream_ = std::move(h); }
  // Handles BUNDLE_PREPARE / COMMIT / RETURN and PG_REMOVE from other nodes (same shape).
  void SetPlacementHandler(StreamHandler h) { on_placement_ = std::move(h); }
  objectstore::ObjectTransfer& transfer() { return transfer_; }
  // Told once about each node declared dead (after this node settled its actors and holds).
  void SetDeadNodeHandler(std::function<void(const std::string& node_id)> h) { on_dead_node_ = std::move(h); }
  bool IsCopy(const std::string& id) const { return transfer_.IsCopy(id); }
  void ForgetCopy(const std::string& id) { transfer_.Forget(id); }
  // SPREAD: the next node in round robin over this one and the others; "" means this one.
  std::string NextSpreadNode();
  // The other live nodes and what each has free, as last heard.
  std::vector<std::pair<std::string, ResourceSet>> FreeElsewhere() const;
  void Stop();
  // One frame from an authenticated peer on `c` (replies go there).
  void OnPeerFrame(const std::shared_ptr<FramedConnection>& c, const FrameHeader& h, const char* body, size_t len);

 private:
  void Accept();
  // Once per dead node (whoever declared it): its actors' fate here, and its orphans.
  void SettleDeadNode(const rpc::NodeInfo& n);
  // Detached actors the dead node hosted and owned: one live node restarts each.
  void RestartOrphans(const std::string& dead_node, const std::string& why);
  void HandleReleaseHeld(const rpc::ReleaseHeld& m);
  // Drops `count` holds of `id` for `node_id` (all of them when count exceeds what is held).
  void Unhold(const std::string& node_id, const std::string& id, uint32_t count);
  void FlushReleases();
  void HandleForward(const std::shared_ptr<FramedConnection>& conn, uint64_t request_id, rpc::ForwardTask m);
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
  TaskManager* tasks_;
  objectstore::ObjectTable* objects_;
  objectstore::ObjectStore* store_;
  GcsClient* gcs_;
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
  objectstore::ObjectTransfer transfer_;
  ReleaseHandler on_release_;
  CollectiveHandler on_collective_;
  StreamHandler on_stream_;
  StreamHandler on_placement_;
  std::function<void(const std::string& node_id)> on_dead_node_;
  // node id -> objects this node holds for it (and how many times), until it Releases them or dies
  std::unordered_map<std::string, std::unordered_map<std::string, uint32_t>> held_for_;
  // node id -> (object id -> holds) to release there, sent at the end of this loop turn
  std::unordered_map<std::string, std::unordered_map<std::string, uint32_t>> releasing_;
  bool release_posted_ = false;
  uint64_t spread_counter_ = 0;
};

}  // namespace phalanx::scheduler
