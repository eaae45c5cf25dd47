// An in-memory network of ObjectTransfers for tests (objectstore/transport.h):
// the nodes are transfers in one process, a request is answered by the
// serving node's Serve on the next turn of the loop. The network can lose a
// node, hold replies back, or damage them, so recovery is tested without
// sockets. RunUntil turns a loop until a condition holds (or 10 s pass).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

#include "core/frame.h"
#include "objectstore/object_transfer.h"
#include "objectstore/transport.h"

namespace phalanx::objectstore {

// Runs handlers of `io` until `until()` holds or `timeout` passes.
inline void RunUntil(boost::asio::io_context& io, const std::function<bool()>& until,
                     std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!until() && std::chrono::steady_clock::now() < deadline) {
    if (io.poll() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    io.restart();
  }
}

// Routes requests to the transfers registered by node name.
class MemoryNetwork {
 public:
  explicit MemoryNetwork(boost::asio::io_context& io) : io_(io) {}
  void Join(const std::string& node, ObjectTransfer* t) { nodes_[node] = t; }
  // The node dies: the requests it holds fail, as on a closed connection.
  void Kill(const std::string& node) {
    dead_.insert(node);
    for (auto& reply : held_[node]) {
      boost::asio::post(io_, [node, reply] { reply(Status::Unavailable("node " + node + " closed the connection"), nullptr, 0); });
    }
    held_.erase(node);
  }
  // Replies of `node` past its first `n` are held back (the node stalls).
  void StallAfter(const std::string& node, int n) { stall_after_[node] = n; }
  // Replies of `node` past its first `n` lose their last byte.
  void TruncateAfter(const std::string& node, int n) { truncate_after_[node] = n; }
  int served(const std::string& node) const { return served_.count(node) ? served_.at(node) : 0; }

  class Endpoint : public Transport {
   public:
    explicit Endpoint(MemoryNetwork* net) : net_(net) {}
    void Request(const std::string& node, const rpc::PullObject& m, Reply reply) override {
      net_->Request(node, m, std::move(reply));
    }

   private:
    MemoryNetwork* net_;
  };

 private:
  void Request(const std::string& node, const rpc::PullObject& m, Transport::Reply reply) {
    auto it = nodes_.find(node);
    if (it == nodes_.end() || dead_.count(node)) return reply(Status::Unavailable("node " + node + " is gone"), nullptr, 0);
    it->second->Serve(m, ++request_ids_, [this, node, reply](OutFrame frame) {
      std::string body = frame.bytes.substr(kFrameHeaderSize);
      if (frame.tail_len > 0) body.append(frame.tail, frame.tail_len);
      int n = served_[node]++;
      if (stall_after_.count(node) && n >= stall_after_[node]) return held_[node].push_back(reply);
      if (truncate_after_.count(node) && n >= truncate_after_[node] && !body.empty()) body.pop_back();
      boost::asio::post(io_, [this, node, reply, body = std::move(body)] {
        if (dead_.count(node)) return reply(Status::Unavailable("node " + node + " closed the connection"), nullptr, 0);
        reply(Status::OK(), body.data(), body.size());
      });
    });
  }

  boost::asio::io_context& io_;
  std::map<std::string, ObjectTransfer*> nodes_;
  std::set<std::string> dead_;
  std::map<std::string, int> stall_after_, truncate_after_, served_;
  std::map<std::string, std::vector<Transport::Reply>> held_;
  uint64_t request_ids_ = 0;
};

}  // namespace phalanx::objectstore
