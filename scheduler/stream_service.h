// StreamService: generators on this raylet. It owns the StreamTable (the
// streams called from this node, their items and credit:
// scheduler/stream_table.h) and takes items from this node's workers, from
// callers of actors and from other nodes; an item of a task whose caller is
// on another node is passed on there. Items are stored as results through
// HandedResults (the raylet's object requests). A worker whose read waits
// for an item lends its task's CPUs meanwhile (ObjectTasks), as it does in a
// get: a task reading a generator on a one-CPU node would otherwise wait for
// a producer that never gets the CPU. Not thread-safe; the raylet's loop.
#pragma once

#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "core/proto/phalanx.pb.h"
#include "objectstore/object_table.h"
#include "scheduler/clients.h"
#include "scheduler/router.h"
#include "core/peer_channel.h"
#include "scheduler/stream_table.h"
#include "scheduler/task_table.h"

namespace phalanx::scheduler {

// Where results handed in by whoever brought them go (inline values stored,
// store values adopted from their holder).
class HandedResults {
 public:
  virtual ~HandedResults() = default;
  virtual void StoreHandedResults(rpc::TaskDone& m) = 0;
};

class StreamService final : public ClientWatcher {
 public:
  // Every collaborator is owned by the raylet and outlives this.
  StreamService(boost::asio::io_context& io, std::string node_id, objectstore::ObjectTable* objects,
                TaskTable* tasks, ObjectTasks* lender, PeerChannel* peers, Clients* clients,
                HandedResults* results);

  StreamTable& table() { return table_; }
  const StreamTable& table() const { return table_; }
  // Items a worker here made (TASK_DONE with `item`).
  // Its client messages (stream read, drop, credit) and peer messages (items, credit).
  void AddRoutes(Router& router);
  void HandleWorkerItems(Client& c, rpc::TaskDone m);
  // ClientWatcher: a client's generators stop; their unread items go.
  void OnClientGone(Client& c, const std::string&) override { table_.DropAllOf(c.client_id); }
  // Items handed in by a caller or another node (only the task's own are kept).
  void StoreItems(rpc::TaskDone m);
  // STREAM_NEXT and STREAM_CREDIT from clients.
  void HandleStreamNext(const std::shared_ptr<Client>& c, uint64_t req, const rpc::StreamNext& m);
  void HandleStreamCredit(const std::shared_ptr<Client>& c, uint64_t req, const rpc::StreamCredit& m);
  // STREAM_ITEMS and STREAM_CREDIT from other nodes.
  void HandlePeer(rpc::MessageType type, const std::string& body, const PeerReply& reply);

 private:
  // Items already checked to be the task's own.
  void StoreOwnItems(rpc::TaskDone m);

  std::string node_id_;
  objectstore::ObjectTable* objects_;
  TaskTable* tasks_;
  ObjectTasks* lender_;
  PeerChannel* peers_;
  Clients* clients_;
  HandedResults* results_;
  StreamTable table_;
};

}  // namespace phalanx::scheduler
