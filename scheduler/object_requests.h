// ObjectRequests: the raylet's answers to its clients' object requests: get,
// wait, create, seal, put inline, holds and releases. A get or wait waits
// for objects made here, copied here from another node (a get or a fetching
// wait asks for the copy), or, for a wait with fetch_local off, known to be
// ready on another node. A ref whose creator no process of the cluster ever
// was fails at once (NotFound); an object whose every copy is gone is made
// again by this node's lineage or asked of the node that submitted its task
// (OnCopiesLost). A worker blocked in a get lends its CPUs back meanwhile.
// Not thread-safe; the raylet's loop.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio.hpp>

#include "core/proto/phalanx.pb.h"
#include "gcs/gcs_client.h"
#include "objectstore/object_manager.h"
#include "scheduler/clients.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/router.h"
#include "scheduler/task_table.h"

namespace phalanx::scheduler {

class ObjectRequests final : public ClientWatcher {
 public:
  // `copy_progress_ms`: how often a get waiting on a long copy from another
  // node is told how far it is. Every collaborator is owned by the raylet and outlives this.
  ObjectRequests(boost::asio::io_context& io, std::string node_id, objectstore::ObjectManager* objects,
                 ObjectTasks* tasks, NodeLiveness* peers, GcsClient* gcs, Clients* clients, int64_t copy_progress_ms);

  // Its client messages: gets, waits, create/seal/put, refs, releases, fetches and lends.
  void AddRoutes(Router& router);
  // Client messages.
  void HandleGet(const std::shared_ptr<Client>& c, uint64_t req, const rpc::GetObjects& m);
  void HandleWait(const std::shared_ptr<Client>& c, uint64_t req, const rpc::WaitObjects& m);
  void HandleCreate(Client& c, uint64_t req, const rpc::CreateObject& m);
  void HandleSeal(Client& c, const std::string& id);
  void HandlePutInline(Client& c, rpc::PutInline m);
  void HandleRefs(Client& c, const rpc::UpdateRefs& m);
  void HandleRelease(Client& c, const rpc::ObjectIds& m);
  // A worker runs a direct call whose ref arguments (and refs nested in them) are on another node.
  void HandleFetch(Client& c, const rpc::FetchObjects& m);
  // `c` holds `id` until it lets go (UPDATE_REFS) or exits.
  void Hold(Client& c, const std::string& id);

  // A client registered here: the objects it makes have a known creator
  // (the GCS hears of it when the cluster did not know it yet).
  void ClientRegistered(const std::string& client_id);
  // ClientWatcher: what it pinned, was creating and held goes; results its
  // direct actor calls would have brought are lost (nobody else can bring them).
  void OnClientGone(Client& c, const std::string& why) override;
  // Every copy of pending `id` is gone (objectstore::ObjectEvents): true when
  // it is being made again, here (this node's lineage) or by the node whose
  // client made the ref (asked through a copy from it); else false with *reason.
  bool OnCopiesLost(const std::string& id, std::string* reason);
  // Another node adopted what `holder` (a client here) made: its holds go.
  void OnAdopted(const std::string& holder, const std::vector<std::string>& ids);
  // Asks every client that maps objects to let go of the ones nothing reads
  // (UNMAP_IDLE), at most every kUnmapIdleEvery.
  void UnmapIdle();
  // Tells the processes whose gets wait on a long copy how far it is (each heartbeat).
  void ReportSlowCopies();
  // The raylet stops: no deadline fires any more.
  void Stop() { deadline_timer_.cancel(); }

 private:
  struct PendingGet;
  struct PendingWait;
  using GetClock = std::chrono::steady_clock;
  using GetDeadlines = std::multimap<GetClock::time_point, std::weak_ptr<PendingGet>>;

  void CompleteGet(const std::shared_ptr<PendingGet>& g);
  void CompleteWait(const std::shared_ptr<PendingWait>& w);
  void ArmGetDeadlines(GetClock::time_point at);
  // Pending ids whose creator no process of the cluster ever was (a made-up
  // or stale ref) fail at once with NotFound instead of waiting forever.
  void CheckCreators(const std::vector<std::string>& ids);
  void AskOwner(const std::string& id, const Result<std::string>& owner);
  void AnsweredByOwner(const std::string& id);  // the ask ended: the lender's holds go

  boost::asio::io_context& io_;
  std::string node_id_;
  objectstore::ObjectManager* om_;
  objectstore::ObjectTable& objects_;  // om_'s
  ObjectTasks* tasks_;
  NodeLiveness* peers_;
  GcsClient* gcs_;
  Clients* clients_;
  int64_t copy_progress_ms_;
  GetDeadlines get_deadlines_;  // pending gets by deadline
  GetClock::time_point get_timer_at_ = GetClock::time_point::max();
  boost::asio::steady_timer deadline_timer_;  // for get_deadlines_' earliest
  // Client ids known to have registered with a raylet of this cluster (the
  // creators of objects), and the pending ids of creators being looked up.
  std::unordered_set<uint64_t> creators_;  // CreatorKey of each
  std::unordered_map<std::string, std::vector<std::string>> unknown_creators_;
  std::unordered_set<uint64_t> own_creators_;  // CreatorKey of the clients that registered here
  // Lost objects whose owner node (the one that submitted their task) is
  // asked to make them again: that node ("" while the GCS is asked), and the
  // holds the object had at the node that lent it here, kept until the
  // owner answers (so that a lender that is the owner keeps it meanwhile).
  struct AskedOwner {
    std::string owner;
    std::string lender;
    uint32_t holds = 0;
  };
  std::unordered_map<std::string, AskedOwner> asked_owner_;
  std::chrono::steady_clock::time_point unmap_idle_at_{};
};

}  // namespace phalanx::scheduler
