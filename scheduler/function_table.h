// FunctionTable: the functions this node's clients registered or asked for,
// as the raylet keeps them (pickled by the driver, run by workers). A
// registration is kept here and written to the GCS for the other nodes; a
// worker's request is answered from here, else from the GCS (asked again
// for a few seconds: the node that registered it may not have written it
// yet when its task arrives). After a GCS outage every function kept here
// is written again. Not thread-safe; the raylet's loop.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/asio.hpp>

#include "core/proto/phalanx.pb.h"
#include "gcs/gcs_client.h"
#include "scheduler/clients.h"
#include "scheduler/router.h"

namespace phalanx::scheduler {

class FunctionTable {
 public:
  // `gcs` outlives this.
  FunctionTable(boost::asio::io_context& io, GcsClient* gcs) : io_(io), gcs_(gcs) {}

  // Its client messages: REGISTER_FUNCTION and GET_FUNCTION.
  void AddRoutes(Router& router);
  // The GCS came back: every function kept here goes in again. Returns how many.
  size_t Republish();
  void Stop() { stopped_ = true; }

 private:
  struct Function {
    std::string name;
    std::string pickled;
  };
  // Answers `c`'s request `req` from the GCS, asking again until `give_up`.
  void LookUp(const std::shared_ptr<Client>& c, uint64_t req, const std::string& function_id,
              std::chrono::steady_clock::time_point give_up);

  boost::asio::io_context& io_;
  GcsClient* gcs_;
  std::unordered_map<std::string, Function> functions_;
  bool stopped_ = false;
};

}  // namespace phalanx::scheduler
