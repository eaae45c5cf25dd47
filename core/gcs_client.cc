#include "core/gcs_client.h"

#include "core/ids.h"

namespace phalanx {
namespace {

const char kNodes[] = "nodes";
const char kTasks[] = "tasks";
std::string ObjKey(const std::string& id) { return "objdir:" + ToHex(id); }
std::string ObjChannel(const std::string& id) { return "objloc:" + ToHex(id); }

}  // namespace

void GcsClient::RegisterNode(const rpc::NodeInfo& info) {
  std::string v = info.SerializeAsString();
  redis_->Command({"HSET", kNodes, ToHex(info.node_id()), v});
  redis_->Command({"PUBLISH", kNodes, v});
}

void GcsClient::UpdateNode(const rpc::NodeInfo& info) {
  redis_->Command({"HSET", kNodes, ToHex(info.node_id()), info.SerializeAsString()});
}

void GcsClient::MarkNodeDead(rpc::NodeInfo info) {
  info.set_alive(false);
  RegisterNode(info);
}

void GcsClient::GetAllNodes(Callback<std::vector<rpc::NodeInfo>> cb) {
  redis_->Command({"HGETALL", kNodes}, [cb](Result<RedisReply> r) {
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

void GcsClient::SubscribeNodes(std::function<void(const rpc::NodeInfo&)> cb) {
  redis_->Subscribe(kNodes, [cb](const std::string&, const std::string& payload) {
    rpc::NodeInfo n;
    if (n.ParseFromString(payload)) cb(n);
  });
}

void GcsClient::PutActor(const rpc::ActorInfo& info) {
  std::string v = info.SerializeAsString();
  redis_->Command({"HSET", "actors", ToHex(info.actor_id()), v});
  redis_->Command({"PUBLISH", "actors", v});
}

void GcsClient::GetAllActors(Callback<std::vector<rpc::ActorInfo>> cb) {
  redis_->Command({"HGETALL", "actors"}, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    std::vector<rpc::ActorInfo> out;
    const auto& els = r.value().elements;
    for (size_t i = 1; i < els.size(); i += 2) {
      rpc::ActorInfo a;
      if (a.ParseFromString(els[i].str)) out.push_back(std::move(a));
    }
    cb(std::move(out));
  });
}

void GcsClient::Claim(const std::string& key, Callback<bool> cb) {
  redis_->Command({"SET", "claim:" + key, "1", "NX", "EX", "86400"}, [cb](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    cb(r.value().type == RedisReply::kStatus);  // OK when set, nil when taken
  });
}

void GcsClient::GetActor(const std::string& actor_id, Callback<rpc::ActorInfo> cb) {
  redis_->Command({"HGET", "actors", ToHex(actor_id)}, [cb, actor_id](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    rpc::ActorInfo a;
    if (r.value().type != RedisReply::kString || !a.ParseFromString(r.value().str)) {
      return cb(Status::NotFound("no actor " + ToHex(actor_id) + " in the GCS"));
    }
    cb(std::move(a));
  });
}

void GcsClient::PutFunction(const rpc::RegisterFunction& f) {
  redis_->Command({"HSET", "functions", ToHex(f.function_id()), f.SerializeAsString()});
}

void GcsClient::GetFunction(const std::string& function_id, Callback<rpc::RegisterFunction> cb) {
  redis_->Command({"HGET", "functions", ToHex(function_id)}, [cb, function_id](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    rpc::RegisterFunction f;
    if (r.value().type != RedisReply::kString || !f.ParseFromString(r.value().str)) {
      return cb(Status::NotFound("function " + ToHex(function_id) + " was never registered"));
    }
    cb(std::move(f));
  });
}

void GcsClient::PutTaskRecords(const std::vector<rpc::TaskRecord>& records) {
  if (records.empty()) return;
  std::vector<std::string> args{"HSET", kTasks};
  args.reserve(2 + 2 * records.size());
  for (const auto& r : records) {
    args.push_back(ToHex(r.task_id()));
    args.push_back(r.SerializeAsString());
  }
  redis_->Command(args);
}

void GcsClient::DeleteTaskRecords(const std::vector<std::string>& task_ids) {
  if (task_ids.empty()) return;
  std::vector<std::string> args{"HDEL", kTasks};
  for (const auto& id : task_ids) args.push_back(ToHex(id));
  redis_->Command(args);
}

void GcsClient::GetTaskRecord(const std::string& task_id, Callback<rpc::TaskRecord> cb) {
  redis_->Command({"HGET", kTasks, ToHex(task_id)}, [cb, task_id](Result<RedisReply> r) {
    if (!r.ok()) return cb(r.status());
    rpc::TaskRecord rec;
    if (r.value().type != RedisReply::kString || !rec.ParseFromString(r.value().str)) {
      return cb(Status::NotFound("no task record for " + ToHex(task_id)));
    }
    cb(std::move(rec));
  });
}

void GcsClient::AddObjectLocation(const std::string& object_id, uint64_t size, const rpc::ObjectLocation& loc) {
  redis_->Command({"HSET", ObjKey(object_id), "size", std::to_string(size), ToHex(loc.node_id()),
                   loc.SerializeAsString()});
  AnnounceObject(object_id);
}

void GcsClient::RemoveObjectLocation(const std::string& object_id, const std::string& node_id) {
  redis_->Command({"HDEL", ObjKey(object_id), ToHex(node_id)});
  AnnounceObject(object_id);
}

void GcsClient::RemoveObject(const std::string& object_id) { redis_->Command({"DEL", ObjKey(object_id)}); }

static Result<rpc::ObjectDirectoryEntry> ParseEntry(const std::string& object_id, const RedisReply& r) {
  rpc::ObjectDirectoryEntry e;
  e.set_object_id(object_id);
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2) {
    const std::string& field = r.elements[i].str;
    if (field == "size") {
      e.set_size(std::stoull(r.elements[i + 1].str));
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
  redis_->Subscribe(ObjChannel(object_id), [cb](const std::string&, const std::string& payload) {
    rpc::ObjectDirectoryEntry e;
    if (e.ParseFromString(payload)) cb(e);
  });
}

void GcsClient::UnsubscribeObjectLocations(const std::string& object_id) {
  redis_->Unsubscribe(ObjChannel(object_id));
}

}  // namespace phalanx
