#include "gcs/gcs_client.h"

#include <algorithm>
#include <cstdlib>

#include "core/ids.h"
#include "core/logging.h"
#include "gcs/gcs_tables.h"

namespace phalanx {
namespace {

std::string ObjKey(const std::string& id) { return "objdir:" + ToHex(id); }
std::string ObjChannel(const std::string& id) { return "objloc:" + ToHex(id); }

// HGET hash field as a message of type M; NotFound(`absent`) when there is none.
template <typename M>
void GetMessage(RedisClient* redis, const char* hash, const std::string& field, std::string absent,
                GcsClient::Callback<M> cb) {
  redis->Command({"HGET", hash, field}, [cb, absent = std::move(absent)](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    M m;
    if (r.value().type != RedisReply::kString || !m.ParseFromString(r.value().str)) {
      return cb(Status::NotFound(absent));
    }
    cb(std::move(m));
  });
}

// Every value of a hash of messages (those that do not parse are left out).
template <typename M>
void GetAllMessages(RedisClient* redis, const char* hash, GcsClient::Callback<std::vector<M>> cb) {
  redis->Command({"HGETALL", hash}, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    std::vector<M> out;
    const auto& els = r.value().elements;
    for (size_t i = 1; i < els.size(); i += 2) {
      M m;
      if (m.ParseFromString(els[i].str)) out.push_back(std::move(m));
    }
    cb(std::move(out));
  });
}

}  // namespace

GcsClient::GcsClient(RedisClient* redis) : redis_(redis) {
  redis_->OnReconnected([this] { ResyncObjectLocations(); });
}

void GcsClient::ResyncObjectLocations() {
  std::vector<std::string> ids;
  for (const auto& [id, cb] : objloc_subs_) ids.push_back(id);
  for (const auto& id : ids) {
    GetObjectLocations(id, [this, id](Result<rpc::ObjectDirectoryEntry> e) {
      if (!e.ok() || e.value().locations_size() == 0) return;
      auto it = objloc_subs_.find(id);
      if (it == objloc_subs_.end()) return;
      auto cb = it->second;  // (it may unsubscribe while it runs)
      cb(e.value());
    });
  }
}

void GcsClient::RegisterNode(const rpc::NodeInfo& info) {
  std::string v = info.SerializeAsString();
  redis_->Command({"HSET", gcs_tables::kNodes, ToHex(info.node_id()), v});
  redis_->Command({"PUBLISH", gcs_tables::kNodes, v});
}

void GcsClient::UpdateNode(const rpc::NodeInfo& info) {
  redis_->Command({"HSET", gcs_tables::kNodes, ToHex(info.node_id()), info.SerializeAsString()});
}

void GcsClient::MarkNodeDead(rpc::NodeInfo info) {
  info.set_alive(false);
  RegisterNode(info);
}

void GcsClient::GetAllNodes(Callback<std::vector<rpc::NodeInfo>> cb) {
  redis_->Command({"HGETALL", gcs_tables::kNodes}, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    std::vector<rpc::NodeInfo> out;
    const auto& els = r.value().elements;
    for (size_t i = 1; i < els.size(); i += 2) {
      rpc::NodeInfo n;
      if (n.ParseFromString(els[i].str)) out.push_back(std::move(n));
    }
    cb(std::move(out));
  });
}

void GcsClient::GetHeartbeats(Callback<std::unordered_map<std::string, std::string>> cb) {
  redis_->Command({"HGETALL", gcs_tables::kHeartbeats}, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    std::unordered_map<std::string, std::string> out;
    const auto& els = r.value().elements;
    for (size_t i = 0; i + 1 < els.size(); i += 2) out[els[i].str] = els[i + 1].str;
    cb(std::move(out));
  });
}

std::vector<std::string> GcsClient::HeartbeatCommand(const std::string& node_id, const std::string& value) {
  return {"HSET", gcs_tables::kHeartbeats, ToHex(node_id), value};
}

void GcsClient::PutCheckpoint(const std::string& actor_id, const std::string& state,
                              std::function<void(Status)> done) {
  redis_->Command({"HSET", gcs_tables::kActorCheckpoints, ToHex(actor_id), state}, [done](Result<RedisReply> r) {
    if (done) done(r.status());
  });
}

void GcsClient::GetCheckpoint(const std::string& actor_id, Callback<std::string> cb) {
  redis_->Command({"HGET", gcs_tables::kActorCheckpoints, ToHex(actor_id)}, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    if (r.value().type != RedisReply::kString) return cb(Status::NotFound("no checkpoint"));
    cb(std::move(r.value().str));
  });
}

void GcsClient::DeleteCheckpoint(const std::string& actor_id) {
  redis_->Command({"HDEL", gcs_tables::kActorCheckpoints, ToHex(actor_id)});
}

void GcsClient::SubscribeNodes(std::function<void(const rpc::NodeInfo&)> cb) {
  redis_->Subscribe(gcs_tables::kNodes, [cb](const std::string&, const std::string& payload) {
    rpc::NodeInfo n;
    if (n.ParseFromString(payload)) cb(n);
  });
}

void GcsClient::PutActor(const rpc::ActorInfo& info) {
  std::string v = info.SerializeAsString();
  redis_->Command({"HSET", gcs_tables::kActors, ToHex(info.actor_id()), v});
  redis_->Command({"PUBLISH", gcs_tables::kActors, v});
}

void GcsClient::GetAllActors(Callback<std::vector<rpc::ActorInfo>> cb) {
  GetAllMessages(redis_, gcs_tables::kActors, std::move(cb));
}

void GcsClient::Claim(const std::string& key, Callback<bool> cb) {
  redis_->Command({"SET", "claim:" + key, "1", "NX", "EX", "86400"}, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    cb(r.value().type == RedisReply::kStatus);  // OK when set, nil when taken
  });
}

namespace {
const char* kClaimName = R"lua(
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if (not cur) or cur == ARGV[2] or (ARGV[3] ~= '' and cur == ARGV[3]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return ''
end
return cur
)lua";
const char* kReleaseName = R"lua(
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
)lua";
}  // namespace

void GcsClient::ClaimActorName(const std::string& name, const std::string& actor_id, const std::string& stale,
                               Callback<std::string> cb) {
  redis_->Command({"EVAL", kClaimName, "1", "actor_names", name, ToHex(actor_id), stale.empty() ? "" : ToHex(stale)},
                  [cb](Result<RedisReply> r) {
                    if (!r.ok()) return cb(r.status());
                    if (r.value().type != RedisReply::kString) return cb(Status::Internal("malformed name claim reply"));
                    if (r.value().str.empty()) return cb(std::string());
                    std::string owner = FromHex(r.value().str);
                    if (owner.empty()) return cb(Status::Internal("malformed actor id in the GCS's actor_names"));
                    cb(owner);
                  });
}

void GcsClient::ReleaseActorName(const std::string& name, const std::string& actor_id) {
  redis_->Command({"EVAL", kReleaseName, "1", "actor_names", name, ToHex(actor_id)});
}

void GcsClient::PutPlacementGroup(const rpc::PlacementGroupInfo& info) {
  redis_->Command({"HSET", gcs_tables::kPlacementGroups, ToHex(info.pg_id()), info.SerializeAsString()});
}

void GcsClient::DeletePlacementGroup(const std::string& pg_id) {
  redis_->Command({"HDEL", gcs_tables::kPlacementGroups, ToHex(pg_id)});
}

void GcsClient::GetPlacementGroup(const std::string& pg_id, Callback<rpc::PlacementGroupInfo> cb) {
  GetMessage(redis_, gcs_tables::kPlacementGroups, ToHex(pg_id), "no placement group " + ToHex(pg_id) + " in the GCS",
             std::move(cb));
}

void GcsClient::GetAllPlacementGroups(Callback<std::vector<rpc::PlacementGroupInfo>> cb) {
  GetAllMessages(redis_, gcs_tables::kPlacementGroups, std::move(cb));
}

void GcsClient::GetActor(const std::string& actor_id, Callback<rpc::ActorInfo> cb) {
  GetMessage(redis_, gcs_tables::kActors, ToHex(actor_id), "no actor " + ToHex(actor_id) + " in the GCS", std::move(cb));
}

void GcsClient::RegisterClient(const std::string& client_id, const std::string& node_id) {
  redis_->Command({"HSET", gcs_tables::kClients, ToHex(client_id), ToHex(node_id)});
}

void GcsClient::AppendOutput(const std::string& job_id, const OutputLines& lines) {
  std::string key = std::string(gcs_tables::kOutputPrefix) + ToHex(job_id);
  redis_->Command({"XADD", key, "MAXLEN", "~", "10000", "*", "pid", std::to_string(lines.pid), "ip", lines.ip, "src",
                   lines.source, "err", lines.is_err ? "1" : "0", "text", lines.text});
  redis_->Command({"EXPIRE", key, "86400"});
}

void GcsClient::ClientExists(const std::string& client_id, Callback<bool> cb) {
  redis_->Command({"HEXISTS", gcs_tables::kClients, ToHex(client_id)}, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    cb(r.value().type == RedisReply::kInteger && r.value().integer == 1);
  });
}

void GcsClient::ClientNode(const std::string& client_id, Callback<std::string> cb) {
  redis_->Command({"HGET", gcs_tables::kClients, ToHex(client_id)}, [cb, client_id](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    std::string node = r.value().type == RedisReply::kString ? FromHex(r.value().str) : std::string();
    if (node.empty()) return cb(Status::NotFound("no process of this cluster had client id " + ToHex(client_id)));
    cb(std::move(node));
  });
}

void GcsClient::PutFunction(const rpc::RegisterFunction& f) {
  redis_->Command({"HSET", gcs_tables::kFunctions, ToHex(f.function_id()), f.SerializeAsString()});
}

void GcsClient::GetFunction(const std::string& function_id, Callback<rpc::RegisterFunction> cb) {
  GetMessage(redis_, gcs_tables::kFunctions, ToHex(function_id), "function " + ToHex(function_id) + " was never registered",
             std::move(cb));
}

void GcsClient::PutTaskRecords(const std::vector<rpc::TaskRecord>& records) {
  if (records.empty()) return;
  std::vector<std::string> args{"HSET", gcs_tables::kTasks};
  args.reserve(2 + 2 * records.size());
  for (const auto& r : records) {
    args.push_back(ToHex(r.task_id()));
    args.push_back(r.SerializeAsString());
  }
  redis_->Command(args);
}

void GcsClient::DeleteTaskRecords(const std::vector<std::string>& task_ids) {
  if (task_ids.empty()) return;
  std::vector<std::string> args{"HDEL", gcs_tables::kTasks};
  for (const auto& id : task_ids) args.push_back(ToHex(id));
  redis_->Command(args);
}

void GcsClient::GetTaskRecord(const std::string& task_id, Callback<rpc::TaskRecord> cb) {
  GetMessage(redis_, gcs_tables::kTasks, ToHex(task_id), "no task record for " + ToHex(task_id), std::move(cb));
}

// An object's directory entry is one hash: "size"; per node holding a copy,
// <node hex> -> ObjectLocation and cmp:<node hex> -> "1" complete / "0"
// partial (what the Lua script below reads); srv:<node hex> -> readers
// copying from that node now (deleted at 0).
void GcsClient::AddObjectLocation(const std::string& object_id, uint64_t size, const rpc::ObjectLocation& loc) {
  std::string node = ToHex(loc.node_id());
  redis_->Command({"HSET", ObjKey(object_id), "size", std::to_string(size), node, loc.SerializeAsString(),
                   "cmp:" + node, loc.complete() ? "1" : "0"});
  AnnounceObject(object_id);
}

namespace {
// KEYS[1] the entry; ARGV[1] the node. The last location to go takes the
// entry with it (copies and their maker may go in any order).
const char kRemoveLocation[] = R"lua(
redis.call('HDEL', KEYS[1], ARGV[1], 'cmp:' .. ARGV[1], 'srv:' .. ARGV[1])
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 4) == 'cmp:' then return 1 end
end
redis.call('DEL', KEYS[1])
return 0
)lua";
}  // namespace

void GcsClient::RemoveObjectLocation(const std::string& object_id, const std::string& node_id) {
  redis_->Command({"EVAL", kRemoveLocation, "1", ObjKey(object_id), ToHex(node_id)});
  AnnounceObject(object_id);
}

namespace {
const char kAdjustServing[] = R"lua(
local v = redis.call('HINCRBY', KEYS[1], ARGV[1], tonumber(ARGV[2]))
if v <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return v
)lua";

// KEYS[1] the entry; ARGV: self, hint, resuming ("1"/"0"), list self ("1"/"0"), then nodes to exclude.
const char kPickSource[] = R"lua(
local h = redis.call('HGETALL', KEYS[1])
local srv, cmp = {}, {}
for i = 1, #h, 2 do
  local p = string.sub(h[i], 1, 4)
  if p == 'srv:' then srv[string.sub(h[i], 5)] = tonumber(h[i + 1]) or 0
  elseif p == 'cmp:' then cmp[string.sub(h[i], 5)] = h[i + 1] end
end
local ex = {}
ex[ARGV[1]] = true
for i = 5, #ARGV do ex[ARGV[i]] = true end
local best, bs, bc = nil, 0, false
for node, c in pairs(cmp) do
  if not ex[node] and (ARGV[3] == '0' or c == '1') then
    local s = srv[node] or 0
    local complete = (c == '1')
    if best == nil or s < bs or (s == bs and complete and not bc) then best, bs, bc = node, s, complete end
  end
end
if best == nil and ARGV[2] ~= '' and not ex[ARGV[2]] then best = ARGV[2] end
if best == nil then return '' end
redis.call('HINCRBY', KEYS[1], 'srv:' .. best, 1)
if ARGV[4] == '1' and cmp[ARGV[1]] == nil then redis.call('HSET', KEYS[1], 'cmp:' .. ARGV[1], '0') end
return best
)lua";
}  // namespace

void GcsClient::AdjustServing(const std::string& object_id, const std::string& node_id, int delta) {
  redis_->Command({"EVAL", kAdjustServing, "1", ObjKey(object_id), "srv:" + ToHex(node_id), std::to_string(delta)});
}

void GcsClient::PickSource(const std::string& object_id, const std::string& self, const std::string& hint,
                           bool resuming, bool list_self, const std::vector<std::string>& exclude,
                           Callback<std::string> cb) {
  std::vector<std::string> args = {"EVAL", kPickSource, "1", ObjKey(object_id), ToHex(self),
                                   hint.empty() ? std::string() : ToHex(hint), resuming ? "1" : "0",
                                   list_self ? "1" : "0"};
  for (const auto& n : exclude) args.push_back(ToHex(n));
  redis_->Command(args, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    if (r.value().type == RedisReply::kError) return cb(Status::Internal(r.value().str));
    cb(r.value().str.empty() ? std::string() : FromHex(r.value().str));
  });
}

static Result<rpc::ObjectDirectoryEntry> ParseEntry(const std::string& object_id, const RedisReply& r) {
  rpc::ObjectDirectoryEntry e;
  e.set_object_id(object_id);
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2) {
    const std::string& field = r.elements[i].str;
    if (field == "size") {
      e.set_size(std::stoull(r.elements[i + 1].str));
    } else if (field.rfind("srv:", 0) == 0 || field.rfind("cmp:", 0) == 0) {
      continue;  // the pick script's counters; cmp: mirrors the ObjectLocation
    } else {
      rpc::ObjectLocation loc;
      if (loc.ParseFromString(r.elements[i + 1].str)) *e.add_locations() = std::move(loc);
    }
  }
  return e;
}

void GcsClient::GetObjectLocations(const std::string& object_id, Callback<rpc::ObjectDirectoryEntry> cb) {
  redis_->Command({"HGETALL", ObjKey(object_id)}, [cb, object_id](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    cb(ParseEntry(object_id, r.value()));
  });
}

// Publishes the entry as it is now. Redis runs the two commands in order, so
// the HGETALL sees the write queued just before it.
void GcsClient::AnnounceObject(const std::string& object_id) {
  RedisClient* redis = redis_;
  redis_->Command({"HGETALL", ObjKey(object_id)}, [redis, object_id](Result<RedisReply> r) {
    if (!r.ok() || !redis->connected()) return;
    auto e = ParseEntry(object_id, r.value());
    if (e.ok()) redis->Command({"PUBLISH", ObjChannel(object_id), e.value().SerializeAsString()});
  });
}

void GcsClient::SubscribeObjectLocations(const std::string& object_id,
                                         std::function<void(const rpc::ObjectDirectoryEntry&)> cb) {
  objloc_subs_[object_id] = cb;
  redis_->Subscribe(ObjChannel(object_id), [cb](const std::string&, const std::string& payload) {
    rpc::ObjectDirectoryEntry e;
    if (e.ParseFromString(payload)) cb(e);
  });
}

void GcsClient::UnsubscribeObjectLocations(const std::string& object_id) {
  objloc_subs_.erase(object_id);
  redis_->Unsubscribe(ObjChannel(object_id));
}

namespace {
std::string RdvKey(const std::string& key) { return "rdv:" + key; }
std::string GoneKey(const std::string& client) { return "rdv-gone:" + ToHex(client); }

// KEYS[1] the hash (also the channel), KEYS[2..] the gone-markers of each
// rank's process (if known); ARGV: rank, world, payload, ttl. A rank whose
// process is gone: "!rank:why", and this arrival is not counted.
const char kArrive[] = R"lua(
for i = 2, #KEYS do
  local why = redis.call('GET', KEYS[i])
  if why then return '!' .. (i - 2) .. ':' .. why end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
local n = redis.call('HLEN', KEYS[1])
if n < tonumber(ARGV[2]) then
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
  return ''
end
local h = redis.call('HGETALL', KEYS[1])
local parts = {}
for i = 1, #h, 2 do parts[#parts + 1] = h[i] .. ':' .. #h[i + 1] .. ':' .. h[i + 1] end
local msg = table.concat(parts)
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], msg)
return msg
)lua";

// KEYS[1] the client's gone-marker; ARGV: client (hex), why, ttl. Set before
// the news goes out, so an arrival after it finds the marker.
const char kGone[] = R"lua(
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
redis.call('PUBLISH', 'rdv-gone', ARGV[1] .. ':' .. ARGV[2])
return 1
)lua";

const char kLeave[] = R"lua(
redis.call('HDEL', KEYS[1], ARGV[1])
return redis.call('HKEYS', KEYS[1])
)lua";
}  // namespace

Result<std::vector<std::string>> GcsClient::ParseRendezvous(const std::string& msg, int world) {
  std::vector<std::string> out(world);
  std::vector<bool> seen(world, false);
  size_t pos = 0;
  while (pos < msg.size()) {
    size_t c1 = msg.find(':', pos);
    size_t c2 = c1 == std::string::npos ? c1 : msg.find(':', c1 + 1);
    if (c2 == std::string::npos) return Status::Internal("malformed rendezvous record");
    int rank = std::atoi(msg.substr(pos, c1 - pos).c_str());
    size_t len = std::strtoull(msg.substr(c1 + 1, c2 - c1 - 1).c_str(), nullptr, 10);
    if (c2 + 1 + len > msg.size()) return Status::Internal("malformed rendezvous record");
    if (rank < 0 || rank >= world) {
      return Status::InvalidArgument("rank " + std::to_string(rank) + " arrived at a rendezvous of " +
                                     std::to_string(world) + " ranks (do all ranks agree on the group's size?)");
    }
    out[rank] = msg.substr(c2 + 1, len);
    seen[rank] = true;
    pos = c2 + 1 + len;
  }
  for (int r = 0; r < world; ++r) {
    if (!seen[r]) return Status::InvalidArgument("a rendezvous completed without rank " + std::to_string(r));
  }
  return out;
}

void GcsClient::Arrive(const std::string& key, int rank, int world, const std::string& payload, int64_t ttl_s,
                       const std::vector<std::string>& rank_clients, Callback<std::string> cb) {
  std::vector<std::string> cmd = {"EVAL", kArrive, std::to_string(1 + rank_clients.size()), RdvKey(key)};
  for (const auto& c : rank_clients) cmd.push_back(GoneKey(c));
  for (auto a : {std::to_string(rank), std::to_string(world), payload, std::to_string(ttl_s)}) {
    cmd.push_back(std::move(a));
  }
  redis_->Command(std::move(cmd), [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    cb(std::move(r.value().str));
  });
}

void GcsClient::Leave(const std::string& key, int rank, Callback<std::vector<int>> cb) {
  redis_->Command({"EVAL", kLeave, "1", RdvKey(key), std::to_string(rank)}, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    std::vector<int> ranks;
    for (const auto& e : r.value().elements) ranks.push_back(std::atoi(e.str.c_str()));
    std::sort(ranks.begin(), ranks.end());
    cb(std::move(ranks));
  });
}

void GcsClient::SubscribeRendezvous(const std::string& key, std::function<void(const std::string& msg)> done,
                                    std::function<void()> subscribed) {
  redis_->Subscribe(
      RdvKey(key), [done](const std::string&, const std::string& msg) { done(msg); }, std::move(subscribed));
}

void GcsClient::UnsubscribeRendezvous(const std::string& key) { redis_->Unsubscribe(RdvKey(key)); }

void GcsClient::MarkGone(const std::string& client, const std::string& why, int64_t ttl_s) {
  redis_->Command({"EVAL", kGone, "1", GoneKey(client), ToHex(client), why, std::to_string(ttl_s)},
                  [client](Result<RedisReply> r) {
                    if (!r.ok()) {
                      PHALANX_LOG(Warning) << "could not tell the GCS that process " << ToHex(client).substr(0, 12)
                                           << " of a static group is gone: " << r.status().ToString();
                    }
                  });
}

void GcsClient::SubscribeGone(std::function<void(const std::string& client, const std::string& why)> gone,
                              std::function<void()> subscribed) {
  redis_->Subscribe(
      "rdv-gone",
      [gone](const std::string&, const std::string& msg) {
        size_t colon = msg.find(':');
        if (colon == std::string::npos) return;
        gone(FromHex(msg.substr(0, colon)), msg.substr(colon + 1));
      },
      std::move(subscribed));
}

}  // namespace phalanx
