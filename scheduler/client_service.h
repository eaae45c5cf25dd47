// ClientService: the raylet's door for local processes. It listens on the
// node's Unix socket (this user only: the socket's mode and SO_PEERCRED),
// hands each frame of a connection to the Router, registers drivers and
// workers (a worker proves it was started here by its token; the reply
// carries the store's descriptor and what a client needs to know of the
// node), and when a client's connection closes tells every ClientWatcher,
// in order, then marks a worker dead once its exit status is in. Stop tells
// each driver why the raylet stops. Not thread-safe; the raylet's loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "gcs/redis_client.h"
#include "objectstore/object_manager.h"
#include "scheduler/clients.h"
#include "scheduler/object_requests.h"
#include "scheduler/raylet_options.h"
#include "scheduler/router.h"
#include "scheduler/task_table.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

class ClientService {
 public:
  // `options`: the raylet's; `watchers`: told of each client's exit, in this order.
  // Every collaborator is owned by the raylet and outlives this; none is used before Listen.
  ClientService(boost::asio::io_context& io, std::string node_id, const RayletOptions& options, Router* router,
                Clients* clients, WorkerPool* pool, objectstore::ObjectManager* objects, const RedisClient* redis,
                ObjectRequests* requests, TaskQueue* tasks, std::vector<ClientWatcher*> watchers);

  // Its client message: registration.
  void AddRoutes(Router& router);
  // Listens on the socket (InvalidArgument for a path too long, Unavailable if it cannot).
  Status Listen();
  // Stops listening, tells every driver `why` (RAYLET_FAILING), removes the socket. Idempotent.
  void Stop(const std::string& why);
  void HandleRegister(const std::shared_ptr<Client>& c, uint64_t req, const rpc::RegisterClient& m);

 private:
  void Accept();
  void OnClose(const std::shared_ptr<Client>& c, const Status& why);

  boost::asio::io_context& io_;
  std::string node_id_;
  const RayletOptions& options_;
  Router* router_;
  Clients* clients_;
  WorkerPool* pool_;
  objectstore::ObjectManager* objects_;
  const RedisClient* redis_;
  ObjectRequests* requests_;
  TaskQueue* tasks_;
  std::vector<ClientWatcher*> watchers_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  bool stopped_ = false;
};

}  // namespace phalanx::scheduler
