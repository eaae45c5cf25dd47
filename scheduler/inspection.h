// Inspection: the raylet's answers to the questions a person asks of the
// cluster (docs/observability.md): the counters (GET_STATS), the timeline
// (the trace rings of this node's processes, core/trace.h, and records of
// work still in flight) and `phalanx memory` (this node's objects, and what
// keeps each one). A client's question is answered for every live node: this
// raylet asks the others (the GCS lists them) and puts their answers
// together; another raylet's question gets this node's part (LocalTrace,
// LocalMemory). It only reads the parts it is given. Not thread-safe; the
// raylet's loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "collectives/allreduce.h"
#include "collectives/reduce_manager.h"
#include "collectives/reduce_step.h"
#include "core/proto/phalanx.pb.h"
#include "gcs/gcs_client.h"
#include "objectstore/object_manager.h"
#include "scheduler/clients.h"
#include "core/peer_channel.h"
#include "scheduler/router.h"
#include "scheduler/stream_table.h"
#include "scheduler/lineage.h"
#include "scheduler/task_table.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

// What the answers are read from: the raylet's parts, owned by it and outliving the Inspection.
struct InspectedParts {
  const TaskInspection* tasks;
  objectstore::ObjectManager* objects;
  const collectives::ReduceSteps* steps;
  const collectives::ReduceManager* reduces;
  const collectives::Allreduces* allreduces;
  const StreamTable* streams;
  const WorkerPool* pool;
  const Clients* clients;
};

class Inspection {
 public:
  // `gcs` lists the live nodes; `peers` asks them.
  Inspection(std::string node_id, std::string node_ip, std::string session_dir, InspectedParts parts, GcsClient* gcs,
             PeerChannel* peers);

  // This node's counters (GET_STATS; each node's part of the timeline's answer too).
  rpc::StatsReply Counters() const;
  // This node's part of the timeline since `since_ns` (wall clock).
  rpc::TraceNode LocalTrace(uint64_t since_ns) const;
  // This node's objects, largest first (at most `max_objects`; 0: the default), with what keeps each.
  rpc::NodeMemory LocalMemory(uint32_t max_objects) const;

  // A client's questions.
  // Its client messages (stats, timeline, memory) and peer messages (this node's timeline and memory).
  void AddRoutes(Router& router);
  void HandleStats(Client& c, uint64_t req) const { Clients::Reply(c, rpc::GET_STATS, req, Counters()); }
  void HandleTrace(const std::shared_ptr<Client>& c, uint64_t req, const rpc::TraceRequest& m);
  void HandleMemory(const std::shared_ptr<Client>& c, uint64_t req, const rpc::MemoryRequest& m);

 private:
  // Asks every other node the GCS lists alive: each(node, its answer, sent, got: wall ns) per
  // node, then done (not OK: the GCS did not list them).
  using AskEach = std::function<void(const std::string& node, const Result<std::string>& answer, uint64_t sent_ns,
                                     uint64_t got_ns)>;
  void AskEveryNode(rpc::MessageType type, const google::protobuf::Message& ask, AskEach each,
                    std::function<void(const Status&)> done);
  // Answers a client's `type` question with this node's part, `local`, and,
  // with `all_nodes`, every other live node's (asked with `ask`; `fix`, when
  // given, adjusts each well-formed answer with its round trip's times).
  template <typename ReplyMsg, typename NodePart>
  void AnswerFromEveryNode(const std::shared_ptr<Client>& c, uint64_t req, rpc::MessageType type, bool all_nodes,
                           NodePart local, const google::protobuf::Message& ask,
                           std::function<void(NodePart*, uint64_t sent_ns, uint64_t got_ns)> fix);

  std::string node_id_;
  std::string node_ip_;
  std::string session_dir_;
  InspectedParts parts_;
  GcsClient* gcs_;
  PeerChannel* peers_;
};

}  // namespace phalanx::scheduler
