#include "objectstore/object_transfer.h"

#include <algorithm>
#include <cstring>

#include "core/ids.h"
#include "core/logging.h"

namespace phalanx::objectstore {

ObjectTransfer::ObjectTransfer(ObjectTable* objects, ObjectStore* store, Connect connect, TransferOptions options)
    : objects_(objects), store_(store), connect_(std::move(connect)), options_(options) {}

void ObjectTransfer::Pull(const std::string& id, const std::string& node_id) {
  // (A copy freed here earlier does not count: IsReady alone would say yes.)
  if (pulls_.count(id) || (objects_->Contains(id) && objects_->IsReady(id))) return;
  objects_->AddRef(id);  // the pull holds it until it is ready
  if (objects_->ReviveFromStore(id)) {  // the last copy here is still mapped by a reader
    objects_->RemoveRef(id);
    return;
  }
  PullState& p = pulls_[id];
  p.node_id = node_id;
  connect_(node_id, [this, id](Result<std::shared_ptr<RpcClient>> c) {
    auto it = pulls_.find(id);
    if (it == pulls_.end()) return;
    if (!c.ok()) return Fail(id, c.status().message());
    it->second.client = c.value();
    Request(id, 0);
  });
}

void ObjectTransfer::Request(const std::string& id, uint64_t offset) {
  PullState& p = pulls_[id];
  rpc::PullObject m;
  m.set_object_id(id);
  m.set_offset(offset);
  m.set_length(options_.chunk_bytes);
  ++p.inflight;
  p.next_offset = offset + options_.chunk_bytes;
  p.client->Call(rpc::PULL_OBJECT, m, -1,
                 [this, id, offset](Result<std::string> body) { OnReply(id, offset, std::move(body)); });
}

void ObjectTransfer::OnReply(const std::string& id, uint64_t offset, Result<std::string> body) {
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  PullState& p = it->second;
  --p.inflight;
  if (p.failed) {
    if (p.inflight == 0) pulls_.erase(it);
    return;
  }
  rpc::PullObjectReply r;
  if (!body.ok()) return Fail(id, body.status().message());
  if (!r.ParseFromString(body.value())) return Fail(id, "a malformed reply");
  if (r.status().code() != 0) return Fail(id, r.status().message());
  if (r.state() == rpc::OBJ_LOST) {
    objects_->MarkLost(id, static_cast<StatusCode>(r.error_code()), r.error());
    pulls_.erase(it);
    objects_->RemoveRef(id);
    return;
  }
  if (r.contains_refs()) {
    return Fail(id, "its value holds ObjectRefs, which cannot move between nodes yet");
  }
  if (r.state() == rpc::OBJ_INLINE) {
    objects_->PutInline(id, std::move(*r.mutable_data()), {});
    pulls_.erase(it);
    objects_->RemoveRef(id);
    return;
  }
  if (offset == 0) {  // the first range: now the size is known
    p.size = r.size();
    auto off = objects_->CreateInStore(id, p.size, {});
    if (!off.ok()) return Fail(id, "no room here: " + off.status().message());
  }
  const auto* e = store_->Find(id);
  if (e == nullptr || r.data().size() > p.size - std::min(offset, p.size)) return Fail(id, "a range out of bounds");
  std::memcpy(store_->base() + e->offset + offset, r.data().data(), r.data().size());
  p.received += r.data().size();
  if (p.received >= p.size) {
    Status st = objects_->SealInStore(id);
    if (!st.ok()) PHALANX_LOG(Warning) << "sealing a pulled object: " << st.ToString();
    pulls_.erase(it);
    objects_->RemoveRef(id);
    return;
  }
  while (p.inflight < options_.window && p.next_offset < p.size) Request(id, p.next_offset);
}

void ObjectTransfer::Fail(const std::string& id, const std::string& why) {
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  PullState& p = it->second;
  p.failed = true;
  std::string msg = "cannot copy object " + ToHex(id) + " from node " + ToHex(p.node_id).substr(0, 12) + ": " + why;
  PHALANX_LOG(Warning) << msg;
  objects_->AbortCreate(id);
  objects_->MarkLost(id, StatusCode::kObjectLost, msg);
  bool done = p.inflight == 0;
  if (done) pulls_.erase(it);
  objects_->RemoveRef(id);
}

void ObjectTransfer::Serve(const rpc::PullObject& m, std::function<void(const rpc::PullObjectReply&)> reply) {
  std::string id = m.object_id();
  uint64_t offset = m.offset(), length = m.length();
  if (!objects_->Contains(id)) {
    rpc::PullObjectReply r;
    r.set_state(rpc::OBJ_LOST);
    r.set_error_code(static_cast<int>(StatusCode::kObjectLost));
    r.set_error(objects_->WasFreed(id) ? "it was freed on the node that had it"
                                       : "the node asked for it does not have it");
    return reply(r);
  }
  objects_->AddRef(id);  // kept while we wait for it
  objects_->OnReady(id, [this, id, offset, length, reply = std::move(reply)] {
    rpc::ObjectValue v;
    objects_->Describe(id, &v, /*pin=*/true);
    rpc::PullObjectReply r;
    r.set_state(v.state());
    r.set_contains_refs(objects_->ContainsRefs(id));
    if (v.state() == rpc::OBJ_INLINE) {
      r.set_size(v.data().size());
      r.set_data(v.data());
    } else if (v.state() == rpc::OBJ_IN_STORE) {
      r.set_size(v.size());
      uint64_t from = std::min(offset, v.size());
      uint64_t n = std::min(length, v.size() - from);
      r.set_data(reinterpret_cast<const char*>(store_->base() + v.offset() + from), n);
      objects_->ReleasePin(id);
    } else {
      r.set_state(rpc::OBJ_LOST);
      r.set_error(v.error());
      r.set_error_code(v.error_code());
    }
    reply(r);
    objects_->RemoveRef(id);
  });
}

}  // namespace phalanx::objectstore
