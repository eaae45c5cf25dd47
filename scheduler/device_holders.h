// DeviceHolders: which client processes keep the bytes of this node's GPU
// objects in GPU memory (python/phalanx/_private/gpu_objects.py, docs/gpu.md).
// A GPU object is stored as any object is (its bytes staged into the store,
// so every reader anywhere can read it); its producer also keeps it on its
// GPU, where readers that can reach that GPU map it. The producer says so
// (DEVICE_HELD) before it stores the object, on the same connection, so the
// record is here before the object can be freed. When this node frees the
// object (no reference to it remains in the cluster: other nodes' copies
// hold it here until they have their own bytes), each holder is told
// (DEVICE_OBJECTS_FREED, one-way; the ids freed in one turn of the loop go
// together) and lets the memory go. A holder's exit forgets its records
// (the stored bytes stay; readers read those). Not thread-safe; the
// raylet's loop.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "core/proto/phalanx.pb.h"
#include "objectstore/object_table.h"
#include "scheduler/clients.h"
#include "scheduler/router.h"

namespace phalanx::scheduler {

class DeviceHolders final : public ClientWatcher {
 public:
  // How many objects one client may say it holds (each record is ~100
  // bytes here; a client past this is warned and its further ids ignored).
  static constexpr size_t kMaxPerClient = 1 << 20;

  // Every collaborator is owned by the raylet and outlives this.
  DeviceHolders(boost::asio::io_context& io, const objectstore::ObjectTable* objects, Clients* clients);

  // DEVICE_HELD from clients.
  void AddRoutes(Router& router);
  // `id`'s value was freed on this node (its own, not a copy of another node's).
  void OnObjectFreed(const std::string& id);
  // ClientWatcher: what `c` held is forgotten.
  void OnClientGone(Client& c, const std::string& why) override;

  // How many objects have a holder recorded.
  size_t num_objects() const { return holders_.size(); }

 private:
  void Held(Client& c, const rpc::ObjectIds& m);
  // Queues `id` for `client_id`'s next DEVICE_OBJECTS_FREED.
  void Tell(const std::string& client_id, const std::string& id);
  void Flush();

  boost::asio::io_context& io_;
  const objectstore::ObjectTable* objects_;
  Clients* clients_;
  std::unordered_map<std::string, std::vector<std::string>> holders_;         // object id -> holding clients
  std::unordered_map<std::string, std::unordered_set<std::string>> held_by_;  // client id -> object ids
  std::unordered_map<std::string, rpc::ObjectIds> to_tell_;  // client id -> freed ids not yet sent
  bool flush_posted_ = false;
};

}  // namespace phalanx::scheduler
