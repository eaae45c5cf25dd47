// GcsClient: the tables of the global control store, kept in a real
// redis-server, as protobuf values (core/proto/phalanx.proto):
//
//   nodes                 hash  node id hex -> NodeInfo
//   actors                hash  actor id hex -> ActorInfo
//   tasks                 hash  task id hex -> TaskRecord   (removed when its returns are freed)
//   objdir:<object hex>   hash  "size" -> decimal, node hex -> ObjectLocation
//   rdv:<key>             hash  rank -> payload, while a rendezvous waits for ranks
//
// and pub/sub channels "nodes" (NodeInfo on register/death),
// "objloc:<object hex>" (ObjectDirectoryEntry on each location change) and
// "rdv:<key>" (every rank's payload, once all have arrived).
// Writes are fire-and-forget and pipelined by the RedisClient; reads take a
// callback. Not thread-safe; lives on the RedisClient's io_context.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "gcs/redis_client.h"

namespace phalanx {

class GcsClient {
 public:
  template <typename T>
  using Callback = std::function<void(Result<T>)>;

  // After each reconnect of `redis`, every object-location subscription is
  // fed the entry as read then (an announcement made while the server was
  // away was lost with it).
  explicit GcsClient(RedisClient* redis);

  // Node table.
  void RegisterNode(const rpc::NodeInfo& info);
  void UpdateNode(const rpc::NodeInfo& info);  // heartbeat / resource change; no announcement
  void MarkNodeDead(rpc::NodeInfo info);
  void GetAllNodes(Callback<std::vector<rpc::NodeInfo>> cb);
  void SubscribeNodes(std::function<void(const rpc::NodeInfo&)> cb);
  // Liveness (scheduler/heartbeat.h): hash "heartbeats", node id hex -> "seq:late_ms".
  void GetHeartbeats(Callback<std::unordered_map<std::string, std::string>> cb);
  static std::vector<std::string> HeartbeatCommand(const std::string& node_id, const std::string& value);

  // Task table. Records are written in one HSET per batch.
  void PutTaskRecords(const std::vector<rpc::TaskRecord>& records);
  void DeleteTaskRecords(const std::vector<std::string>& task_ids);
  void GetTaskRecord(const std::string& task_id, Callback<rpc::TaskRecord> cb);

  // Actor table: actors hash (actor id hex -> ActorInfo), announced on channel "actors".
  void PutActor(const rpc::ActorInfo& info);
  // Placement groups (hash "placement_groups", by hex id).
  void PutPlacementGroup(const rpc::PlacementGroupInfo& info);
  void GetPlacementGroup(const std::string& pg_id, Callback<rpc::PlacementGroupInfo> cb);
  void DeletePlacementGroup(const std::string& pg_id);
  void GetAllPlacementGroups(Callback<std::vector<rpc::PlacementGroupInfo>> cb);
  void GetAllActors(Callback<std::vector<rpc::ActorInfo>> cb);
  // True for the first caller (of any node) to claim `key`: one winner per key.
  void Claim(const std::string& key, Callback<bool> cb);
  // Named actors, cluster-wide: hash "actor_names" (namespace/name -> actor
  // id hex). Gives `name` to `actor_id` in one atomic step unless another
  // actor has it (and that actor is not `stale`, one found dead): `cb` gets
  // "" when `actor_id` has the name now, else the id of the actor that has it.
  void ClaimActorName(const std::string& name, const std::string& actor_id, const std::string& stale,
                      Callback<std::string> cb);
  // Frees `name` if `actor_id` still has it.
  void ReleaseActorName(const std::string& name, const std::string& actor_id);
  void GetActor(const std::string& actor_id, Callback<rpc::ActorInfo> cb);
  // Actor checkpoints (hash "actor_checkpoints", actor id hex -> pickled state).
  // `done` runs once redis-server has it (or could not take it).
  void PutCheckpoint(const std::string& actor_id, const std::string& state, std::function<void(Status)> done);
  // The last state kept; NotFound when there is none.
  void GetCheckpoint(const std::string& actor_id, Callback<std::string> cb);
  void DeleteCheckpoint(const std::string& actor_id);

  // Client table: clients hash (client id hex -> node id): every process that
  // ever registered with a raylet of this cluster, so the creators of objects.
  void RegisterClient(const std::string& client_id, const std::string& node_id);

  // What a job's tasks and actors print (scheduler/output_relay.h): stream "output:<job id hex>", an
  // entry per batch of whole lines (fields pid, ip, src, err "0"/"1", text), the newest ~10,000 kept,
  // for a day after the last. The driver of the job reads it (python/phalanx/_private/log_stream.py).
  struct OutputLines {
    int pid = 0;
    std::string ip;
    std::string source;
    bool is_err = false;
    std::string text;
  };
  void AppendOutput(const std::string& job_id, const OutputLines& lines);
  void ClientExists(const std::string& client_id, Callback<bool> cb);
  // The node `client_id` registered with (its raylet submitted what it made);
  // NotFound when no process of this cluster had that id.
  void ClientNode(const std::string& client_id, Callback<std::string> cb);

  // Function table: functions hash (function id hex -> RegisterFunction), so
  // any raylet can hand a worker code a driver registered elsewhere.
  void PutFunction(const rpc::RegisterFunction& f);
  void GetFunction(const std::string& function_id, Callback<rpc::RegisterFunction> cb);

  // Object directory.
  void AddObjectLocation(const std::string& object_id, uint64_t size, const rpc::ObjectLocation& loc);
  // Takes `node_id` out of the entry; the entry goes with its last location.
  void RemoveObjectLocation(const std::string& object_id, const std::string& node_id);
  // A reader starts (+1) or stops (-1) copying the object from `node_id`.
  void AdjustServing(const std::string& object_id, const std::string& node_id, int delta);
  // Picks the node `self` should copy the object from and counts the reader
  // on it, in one atomic step (a Lua script): see objectstore::ObjectDirectory::Pick.
  // `list_self`: list `self` as a partial copy (not when the bytes go elsewhere).
  void PickSource(const std::string& object_id, const std::string& self, const std::string& hint, bool resuming,
                  bool list_self, const std::vector<std::string>& exclude, Callback<std::string> cb);
  void GetObjectLocations(const std::string& object_id, Callback<rpc::ObjectDirectoryEntry> cb);
  void SubscribeObjectLocations(const std::string& object_id,
                                std::function<void(const rpc::ObjectDirectoryEntry&)> cb);
  void UnsubscribeObjectLocations(const std::string& object_id);

  // Rendezvous (static collective groups, see scheduler/rendezvous.h).
  // Hands in `payload` for `rank` of `world` at `key`, in one atomic step: the
  // last rank to arrive deletes the hash and publishes every payload on the
  // channel. `cb`: the published record (see ParseRendezvous) if this arrival
  // completed it, "!rank:why" (and no arrival) if the process of a rank in
  // `rank_clients` (client ids, by rank; may be empty) is gone (MarkGone),
  // else "". An incomplete rendezvous is forgotten `ttl_s` after its last
  // arrival.
  void Arrive(const std::string& key, int rank, int world, const std::string& payload, int64_t ttl_s,
              const std::vector<std::string>& rank_clients, Callback<std::string> cb);
  // Takes `rank`'s arrival back (it gave up); `cb`: the ranks still there.
  void Leave(const std::string& key, int rank, Callback<std::vector<int>> cb);
  // `done` runs with the published record (ParseRendezvous) once the
  // rendezvous completes; `subscribed` once no completion can be missed any
  // more (arrive after that).
  void SubscribeRendezvous(const std::string& key, std::function<void(const std::string& msg)> done,
                           std::function<void()> subscribed);
  void UnsubscribeRendezvous(const std::string& key);
  // The process `client` of a static group exited (`why`): every later
  // arrival that counts on it fails, for `ttl_s`, and SubscribeGone's
  // subscribers hear of it now.
  void MarkGone(const std::string& client, const std::string& why, int64_t ttl_s);
  // `gone` runs for each MarkGone from any raylet; `subscribed` once none can be missed.
  void SubscribeGone(std::function<void(const std::string& client, const std::string& why)> gone,
                     std::function<void()> subscribed);
  // The published form of a complete rendezvous: "rank:length:bytes" per rank.
  static Result<std::vector<std::string>> ParseRendezvous(const std::string& msg, int world);

  RedisClient* redis() { return redis_; }

 private:
  void AnnounceObject(const std::string& object_id);
  void ResyncObjectLocations();

  RedisClient* redis_;
  std::unordered_map<std::string, std::function<void(const rpc::ObjectDirectoryEntry&)>> objloc_subs_;
};

}  // namespace phalanx
