// The raylet's clients: the drivers and workers connected on the node's Unix
// socket, and what each holds, pins and creates here (a client's exit lets
// go of all of it: each ClientWatcher is told, scheduler/client_service.h).
// Clients is the table of them, by connection and, once registered, by
// client id; every service that answers a client or looks one up by id is
// given it at construction. Not thread-safe; the raylet's loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <google/protobuf/message_lite.h>

#include "core/framed_connection.h"

namespace phalanx::scheduler {

struct Worker;

// A connected worker or driver, and what it holds, pins and creates here.
struct Client {
  std::shared_ptr<FramedConnection> conn;
  bool registered = false;
  bool is_worker = false;
  int pid = 0;
  std::string client_id;
  Worker* worker = nullptr;
  std::unordered_set<std::string> holds;
  std::unordered_map<std::string, int64_t> pins;
  std::unordered_set<std::string> creating;
  // Results of this client's direct actor calls, not handed in yet (EXPECT_RETURNS).
  std::unordered_set<std::string> expected;
  bool met = false;  // made a rendezvous (a static group's rank): its exit is news to the other ranks
  // Sleeping in a get for its direct actor calls' results (WORKER_BLOCKED), in lease `direct_blocked_lease`.
  bool direct_blocked = false;
  uint64_t direct_blocked_lease = 0;
};

// A part with something of a client's that must go when the client does
// (its holds, its groups, its rendezvous, its generators, its actors). The
// ClientService tells each, in the order given to it, before the record goes.
class ClientWatcher {
 public:
  virtual ~ClientWatcher() = default;
  // `c` closed its connection; `why` says who it was and how it ended
  // ("worker process 7 on node 3fa2... exited (...)"). Not called once the raylet stops.
  virtual void OnClientGone(Client& c, const std::string& why) = 0;
};

class Clients {
 public:
  // A new connection's record (not registered yet).
  std::shared_ptr<Client> Add(std::shared_ptr<FramedConnection> conn);
  // The record of `conn`, made if it has none.
  std::shared_ptr<Client> OfConnection(const std::shared_ptr<FramedConnection>& conn);
  // `c` registered as c->client_id: found by id from now on.
  void Registered(Client* c) { by_id_[c->client_id] = c; }
  // The registered client with that id, or nullptr (it exited, or never registered here).
  Client* Find(const std::string& client_id) const;
  void Remove(Client* c);
  void ForEach(const std::function<void(Client&)>& fn) const;
  size_t num_registered() const { return by_id_.size(); }
  void ForEachId(const std::function<void(const std::string&)>& fn) const;

  // Answers request `request_id` of `c`.
  static void Reply(Client& c, uint16_t type, uint64_t request_id, const google::protobuf::MessageLite& m);

 private:
  std::unordered_map<Client*, std::shared_ptr<Client>> all_;
  std::unordered_map<std::string, Client*> by_id_;
};

}  // namespace phalanx::scheduler
