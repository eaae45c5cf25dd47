#include "objectstore/object_transfer.h"

#include <algorithm>
#include <cstring>

#include "core/ids.h"
#include "core/logging.h"
#include "core/trace.h"
#include "core/message_limits.h"
#include "core/status_proto.h"

namespace phalanx::objectstore {

namespace {
std::string Short(const std::string& node) { return ToHex(node).substr(0, 12); }

// Ranges at least this long are written from the store, shorter ones copied into the frame.
constexpr size_t kTailBytes = 16 << 10;

// A reply: header, u32 meta length, meta, then `n` bytes: written from
// `data` when `keep` holds them (a store range), else copied in.
OutFrame ReplyFrame(uint64_t request_id, const rpc::PullObjectReply& meta, const char* data, size_t n,
                    std::shared_ptr<const void> keep = nullptr) {
  std::string m = meta.SerializeAsString();
  FrameHeader h;
  h.length = static_cast<uint32_t>(4 + m.size() + n);
  h.type = rpc::PULL_OBJECT;
  h.flags = kReplyFlag;
  h.request_id = request_id;
  bool inline_data = !keep;
  OutFrame out;
  out.bytes.assign(kFrameHeaderSize + 4 + m.size() + (inline_data ? n : 0), '\0');
  EncodeHeader(h, out.bytes.data());
  uint32_t meta_len = static_cast<uint32_t>(m.size());
  std::memcpy(out.bytes.data() + kFrameHeaderSize, &meta_len, 4);
  std::memcpy(out.bytes.data() + kFrameHeaderSize + 4, m.data(), m.size());
  if (n > 0 && inline_data) {
    std::memcpy(out.bytes.data() + kFrameHeaderSize + 4 + m.size(), data, n);
  } else if (n > 0) {
    out.tail = data;
    out.tail_len = n;
    out.keep = std::move(keep);
  }
  return out;
}

// A reply that the object is not there: lost, with why.
rpc::PullObjectReply LostReply(const std::string& why, StatusCode code = StatusCode::kObjectLost) {
  rpc::PullObjectReply r;
  r.set_state(rpc::OBJ_LOST);
  r.set_error_code(static_cast<int>(code));
  r.set_error(why);
  return r;
}
}  // namespace

bool ObjectTransfer::ParseReply(const char* body, size_t len, rpc::PullObjectReply* meta, const char** data,
                                size_t* size) {
  if (body == nullptr || len < 4) return false;
  uint32_t meta_len = 0;
  std::memcpy(&meta_len, body, 4);
  if (len - 4 < meta_len || !meta->ParseFromArray(body + 4, static_cast<int>(meta_len))) return false;
  *data = body + 4 + meta_len;
  *size = len - 4 - meta_len;
  return true;
}

ObjectTransfer::ObjectTransfer(ObjectTable* objects, ObjectStore* store, std::unique_ptr<Transport> transport,
                               TransferOptions options, ObjectDirectory* directory, std::string self_id,
                               RefLender* refs)
    : objects_(objects),
      store_(store),
      transport_(std::move(transport)),
      options_(options),
      directory_(directory),
      refs_(refs),
      self_(std::move(self_id)) {}

void ObjectTransfer::Pull(const std::string& id, const std::string& hint_node) {
  // (A copy freed here earlier does not count: IsReady alone would say yes.)
  if (pulls_.count(id) || (objects_->Contains(id) && objects_->IsReady(id))) return;
  objects_->AddRef(id);  // the pull holds it until it is ready
  if (objects_->ReviveFromStore(id)) {  // the last copy here is still mapped by a reader
    objects_->RemoveRef(id);
    return;
  }
  PullState& p = pulls_[id];
  p.object = id;
  p.hint = hint_node;
  EndWhenMadeHere(id);
  ChooseSource(id);
}

void ObjectTransfer::EndWhenMadeHere(const std::string& id) {
  // The object may get its value here by another way while no byte of the
  // copy has come (a task rerun here makes it: the node this copy waits on
  // may be waiting for this very node). Then the copy ends, and whoever
  // waits on it reads the value made here.
  objects_->OnReady(id, [this, id] {
    auto it = pulls_.find(id);
    if (it != pulls_.end() && !it->second.sized && !it->second.open && !it->second.produced) Finish(id);
  });
}

void ObjectTransfer::CopyFrom(const std::string& id, const std::string& node, uint32_t wait_ms) {
  if (pulls_.count(id) || (objects_->Contains(id) && objects_->IsReady(id))) return;
  objects_->AddRef(id);  // the copy holds it until it is ready
  PullState& p = pulls_[id];
  p.object = id;
  p.hint = node;
  p.fixed = true;
  p.wait_ms = wait_ms;
  EndWhenMadeHere(id);
  ChooseSource(id);
}

void ObjectTransfer::StopCopy(const std::string& id, const std::string& why) {
  auto it = pulls_.find(id);
  if (it != pulls_.end() && !it->second.open && !it->second.produced) Fail(id, why);
}

void ObjectTransfer::TakeExpected(const std::string& id, PullState& p) {
  auto it = expected_.find(id);
  if (it == expected_.end()) return;
  for (auto& w : it->second) p.waiters.push_back(std::move(w));
  expected_.erase(it);
}

void ObjectTransfer::PullInto(const std::string& key, const std::string& id, const std::string& hint_node, Sink sink,
                              Progress progress, uint32_t wait_ms) {
  Opener open = [sink = std::move(sink)](uint64_t size) -> Result<ChunkWriter> {
    PHALANX_ASSIGN_OR_RETURN(uint8_t * dest, sink(size));
    return ChunkWriter([dest](uint64_t offset, const char* data, size_t len) {
      std::memcpy(dest + offset, data, len);
      return Status::OK();
    });
  };
  PullChunks(key, id, hint_node, std::move(open), std::move(progress), wait_ms);
}

void ObjectTransfer::PullChunks(const std::string& key, const std::string& id, const std::string& hint_node,
                                Opener open, Progress progress, uint32_t wait_ms) {
  PullState& p = pulls_[key];
  p.object = id;
  p.hint = hint_node;
  p.fixed = wait_ms > 0;
  p.wait_ms = wait_ms;
  p.open = std::move(open);
  p.watchers.push_back(std::move(progress));
  ChooseSource(key);
}

void ObjectTransfer::Cancel(const std::string& key) {
  auto it = pulls_.find(key);
  if (it == pulls_.end() || !it->second.open) return;
  PullState p = std::move(it->second);
  pulls_.erase(it);  // replies still on the way find nothing
  if (directory_ != nullptr && !p.source.empty()) directory_->Serving(p.object, p.source, -1);
}

void ObjectTransfer::ChooseSource(const std::string& id) {
  PullState& p = pulls_[id];
  bool resuming = !p.tried.empty();
  auto give_up = [this, id] {
    PullState& q = pulls_[id];
    // A copy from one node only: that node's error says it all (copied: Fail moves q).
    if (q.fixed && !q.last_error.empty()) return Fail(id, std::string(q.last_error), /*copies_gone=*/true);
    std::string tried;
    for (const auto& n : q.tried) tried += (tried.empty() ? "" : ", ") + Short(n);
    Fail(id,
         "no node has a copy left (tried " + (tried.empty() ? std::string("none") : tried) +
             (q.last_error.empty() ? "" : "; last: " + q.last_error) + ")",
         /*copies_gone=*/true);
  };
  if (directory_ == nullptr || p.fixed) {
    if (p.hint.empty() || p.hint == self_ || p.tried.count(p.hint)) return give_up();
    PHALANX_LOG(Debug) << "copying " << ToHex(p.object) << " from node " << Short(p.hint);
    return UseSource(id, p.hint, /*counted=*/false);
  }
  std::vector<std::string> exclude(p.tried.begin(), p.tried.end());
  std::string hint = p.tried.count(p.hint) ? std::string() : p.hint;
  auto chosen = [this, id, object = p.object, give_up](Result<std::string> node) {
    auto it = pulls_.find(id);
    if (it == pulls_.end()) {
      // Finished or failed meanwhile: the directory counted us on that node.
      if (node.ok() && !node.value().empty() && directory_ != nullptr) directory_->Serving(object, node.value(), -1);
      return;
    }
    if (!node.ok()) {
      it->second.last_error = "the object directory: " + node.status().message();
      if (it->second.hint.empty() || it->second.tried.count(it->second.hint)) return give_up();
      return UseSource(id, it->second.hint, /*counted=*/false);
    }
    if (node.value().empty() || node.value() == self_) return give_up();
    PHALANX_LOG(Debug) << "copying " << ToHex(object) << " from node " << Short(node.value());
    UseSource(id, node.value(), /*counted=*/true);
  };
  directory_->Pick(p.object, hint, resuming, /*list=*/!p.open, exclude, chosen);
}

void ObjectTransfer::UseSource(const std::string& id, const std::string& node, bool counted) {
  PullState& p = pulls_[id];
  p.source = node;
  ++p.epoch;
  p.inflight = 0;
  p.cursor = 0;
  for (auto& c : p.chunks) {
    if (c == kRequested) c = kMissing;
  }
  if (directory_ != nullptr && !counted) directory_->Serving(p.object, node, +1);
  if (!transport_) return SourceFailed(id, ": this node has no transport to other nodes");
  RequestMore(id);
}

void ObjectTransfer::RequestMore(const std::string& id) {
  uint64_t epoch = pulls_[id].epoch;
  // A request that fails at once (its node is not alive) is answered inside
  // Request: after each one the pull may be gone or on another source.
  auto current = [&]() -> PullState* {
    auto it = pulls_.find(id);
    return it == pulls_.end() || it->second.epoch != epoch ? nullptr : &it->second;
  };
  auto send = [&](PullState& p, uint64_t chunk) {
    rpc::PullObject m;
    m.set_object_id(p.object);
    m.set_offset(chunk * options_.chunk_bytes);
    m.set_length(options_.chunk_bytes);
    m.set_wait_ms(p.wait_ms);
    if (!p.open && chunk == 0) {  // the refs inside come with the first range
      m.set_with_refs(true);
      m.set_from_node(self_);
    }
    ++p.inflight;
    auto sent = std::chrono::steady_clock::now();
    transport_->Request(p.source, m,
                        [this, id, epoch, chunk, sent, node = p.source](const Status& st, const char* body,
                                                                        size_t len) {
                          if (st.ok()) {
                            auto took = std::chrono::steady_clock::now() - sent;
                            Measure(node, std::chrono::duration<double>(took).count(), 0);
                          }
                          OnReply(id, epoch, chunk, st, body, len, node);
                        });
  };
  PullState* p = current();
  if (!p->sized) {  // the first range tells the size
    if (p->inflight == 0) send(*p, 0);
    return;
  }
  while ((p = current()) != nullptr && p->inflight < options_.window) {
    while (p->cursor < p->chunks.size() && p->chunks[p->cursor] != kMissing) ++p->cursor;
    if (p->cursor >= p->chunks.size()) return;
    p->chunks[p->cursor] = kRequested;
    send(*p, p->cursor);
  }
}

void ObjectTransfer::OnReply(const std::string& id, uint64_t epoch, uint64_t chunk, const Status& st,
                             const char* body, size_t len, const std::string& node) {
  rpc::PullObjectReply r;
  const char* data = nullptr;
  size_t data_size = 0;
  bool parsed = st.ok() && ParseReply(body, len, &r, &data, &data_size);
  // The refs inside the value, which `node` now holds for this one.
  std::vector<std::string> refs(r.contained_ids().begin(), r.contained_ids().end());
  if (parsed && !refs.empty() && !AllObjectIds(r.contained_ids())) {
    refs.clear();
    parsed = false;
  }
  auto it = pulls_.find(id);
  if (it == pulls_.end() || it->second.epoch != epoch) {  // finished, or from a source we left
    if (!refs.empty() && refs_ != nullptr) refs_->Release(node, refs);
    return;
  }
  PullState& p = it->second;
  --p.inflight;
  if (!st.ok()) return SourceFailed(id, ": " + st.message());
  if (!parsed) return SourceFailed(id, " sent a malformed reply");
  if (r.status().code() != 0) return SourceFailed(id, ": " + r.status().message());
  if (r.state() == rpc::OBJ_LOST) return SourceFailed(id, ": " + r.error());
  // Borrowed here: each counts a reference until the value takes its own.
  std::vector<std::string> release = refs.empty() ? std::vector<std::string>{} : objects_->AddBorrowed(refs, node);
  if (!release.empty() && refs_ != nullptr) refs_->Release(node, release);
  struct Unborrow {  // (on every way out)
    ObjectTable* objects;
    const std::vector<std::string>& ids;
    ~Unborrow() {
      for (const auto& c : ids) objects->RemoveRef(c);
    }
  } unborrow{objects_, refs};
  if (r.contains_refs() && refs.empty() && !p.sized && !p.open) {
    return Fail(id, "its value holds ObjectRefs and node " + Short(node) + " did not name them");
  }
  if (r.state() == rpc::OBJ_INLINE) {
    if (p.open) return Fail(id, "it is a small value kept inline, not a store object");
    objects_->PutInline(id, std::string(data, data_size), refs);
    if (directory_ != nullptr) directory_->Unlisted(id);  // small values are not served from here
    return Finish(id);
  }
  if (!p.sized && p.open && !p.writer) {
    Opener open = p.open;
    auto writer = open(r.size());  // (may change pulls_, even cancel this copy: look again)
    auto again = pulls_.find(id);
    if (again == pulls_.end() || again->second.epoch != epoch) return;
    if (!writer.ok()) return Fail(id, writer.status().message());
    again->second.writer = std::move(writer).value();
    ++again->second.inflight;  // this reply again, now with somewhere to go
    return OnReply(id, epoch, chunk, st, body, len, node);
  }
  if (!p.sized) {
    p.size = r.size();
    if (!p.open) {
      auto off = objects_->CreateInStore(id, p.size, refs);
      if (!off.ok() && off.status().code() == StatusCode::kAlreadyExists) return Finish(id);  // revived here
      if (!off.ok() && WaitForRoom(id, p, off.status())) return;
      if (!off.ok()) return Fail(id, "no room here: " + off.status().message());
      p.no_room_since = {};
    }
    p.sized = true;
    size_t n = static_cast<size_t>((p.size + options_.chunk_bytes - 1) / options_.chunk_bytes);
    p.chunks.assign(n, kMissing);
    p.started = std::chrono::steady_clock::now();
    // Readers may come to us now (not for a sink: its bytes become another object).
    if (!p.open) TakeExpected(id, p);
    if (directory_ != nullptr && !p.open) directory_->Located(id, p.size, 0, false);
  } else if (r.size() != p.size) {
    return SourceFailed(id, " has a different size for it");
  }
  uint64_t off = chunk * options_.chunk_bytes;
  uint64_t want = off >= p.size ? 0 : std::min(options_.chunk_bytes, p.size - off);
  if (data_size != want) return SourceFailed(id, " sent a short range");
  if (p.open) {
    Status written = p.writer(off, data, want);
    if (!written.ok()) return Fail(id, written.message());
  } else {
    const auto* e = store_->Find(id);
    if (e == nullptr) return Fail(id, "its store space here is gone");
    std::memcpy(store_->base() + e->offset + off, data, want);
  }
  if (chunk < p.chunks.size()) p.chunks[chunk] = kHave;
  while (p.prefix < p.size) {
    size_t c = static_cast<size_t>(p.prefix / options_.chunk_bytes);
    if (p.chunks[c] != kHave) break;
    p.prefix = std::min(p.size, (c + 1) * options_.chunk_bytes);
  }
  ServeWaiters(p, id);
  if (p.prefix >= p.size) {
    // Throughput from large copies only (a sink is a reduce link: large by choice).
    if (p.open || p.size >= (1 << 20)) {
      Measure(p.source, std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count(), p.size);
    }
    if (p.open) return Finish(id);
    Status st = objects_->SealInStore(id);
    if (!st.ok()) {
      PHALANX_LOG(Warning) << "sealing a copied object: " << st.ToString();
    }
    copies_.insert(id);
    if (directory_ != nullptr) directory_->Located(id, p.size, p.size, true);
    return Finish(id);
  }
  RequestMore(id);
  auto again = pulls_.find(id);  // (RequestMore may have failed it)
  if (again != pulls_.end()) Notify(id, again->second.size, again->second.prefix, Status::OK());
}

void ObjectTransfer::Notify(const std::string& id, uint64_t size, uint64_t bytes, const Status& st) {
  auto it = pulls_.find(id);
  if (it == pulls_.end() || it->second.watchers.empty()) return;
  auto watchers = it->second.watchers;  // a watcher may change pulls_
  for (auto& w : watchers) w(size, bytes, st);
}

void ObjectTransfer::Measure(const std::string& node, double seconds, uint64_t bytes) {
  Link& l = links_[node];
  if (bytes == 0) {  // one chunk's round trip (with others in flight): an upper bound of the latency
    if (!l.measured || seconds < l.rtt_s) l.rtt_s = seconds;
    return;
  }
  double rate = static_cast<double>(bytes) / std::max(seconds, 1e-6);
  l.bytes_per_s = l.measured ? 0.7 * l.bytes_per_s + 0.3 * rate : rate;
  l.measured = true;
}

ObjectTransfer::Link ObjectTransfer::LinkTo(const std::string& node) const {
  auto it = links_.find(node);
  return it == links_.end() ? Link{} : it->second;
}

Result<uint8_t*> ObjectTransfer::Produce(const std::string& id, uint64_t size) {
  if (pulls_.count(id)) return Status::AlreadyExists("object " + ToHex(id) + " is already arriving here");
  auto off = objects_->CreateInStore(id, size, {});
  if (!off.ok()) return off.status();
  objects_->AddRef(id);  // held while it is made (as a pull holds its copy)
  PullState& p = pulls_[id];
  p.produced = true;
  p.sized = true;
  p.size = size;
  auto early = early_.find(id);
  if (early != early_.end()) {  // readers that asked before it existed
    p.waiters = std::move(early->second);
    early_.erase(early);
  }
  TakeExpected(id, p);
  if (directory_ != nullptr) directory_->Located(id, size, 0, false);
  return store_->base() + off.value();
}

void ObjectTransfer::Advance(const std::string& id, uint64_t bytes) {
  auto it = pulls_.find(id);
  if (it == pulls_.end() || !it->second.produced || bytes <= it->second.prefix) return;
  PullState& p = it->second;
  p.prefix = std::min(bytes, p.size);
  ServeWaiters(p, id);
  Notify(id, p.size, p.prefix, Status::OK());
}

void ObjectTransfer::Complete(const std::string& id) {
  auto it = pulls_.find(id);
  if (it == pulls_.end() || !it->second.produced) return;
  it->second.prefix = it->second.size;
  uint64_t size = it->second.size;
  Status st = objects_->SealInStore(id);
  if (!st.ok()) {
    PHALANX_LOG(Warning) << "sealing a produced object: " << st.ToString();
  }
  if (directory_ != nullptr) directory_->Located(id, size, size, true);
  Finish(id);
}

void ObjectTransfer::Abort(const std::string& id, const std::string& why, bool mark_lost) {
  auto it = pulls_.find(id);
  if (it == pulls_.end() || !it->second.produced) return;
  PullState p = std::move(it->second);
  pulls_.erase(it);
  Discard(id, p, LostReply(why), why, mark_lost);
}

void ObjectTransfer::Discard(const std::string& id, PullState& p, const rpc::PullObjectReply& reply,
                             const std::string& why, bool mark_lost, bool copies_gone) {
  TakeExpected(id, p);  // (readers still waiting for it to start learn it will not)
  for (auto& w : p.waiters) w.send(ReplyFrame(w.request_id, reply, nullptr, 0));
  if (directory_ != nullptr) directory_->Unlisted(id);
  objects_->AbortCreate(id);
  if (mark_lost && copies_gone) {
    objects_->LoseCopies(id, why);  // (made again when its task can be run again)
  } else if (mark_lost) {
    objects_->MarkLost(id, StatusCode::kObjectLost, why);
  }
  for (auto& w : p.watchers) w(p.size, p.prefix, Status(StatusCode::kObjectLost, why));
  objects_->RemoveRef(id);
}

void ObjectTransfer::Watch(const std::string& id, Progress cb) {
  auto it = pulls_.find(id);
  if (it != pulls_.end()) {
    it->second.watchers.push_back(cb);
    if (it->second.sized && it->second.prefix > 0) cb(it->second.size, it->second.prefix, Status::OK());
    return;
  }
  objects_->OnReady(id, [this, id, cb = std::move(cb)] {
    auto again = pulls_.find(id);  // became a copy or product meanwhile
    if (again != pulls_.end()) return Watch(id, cb);
    rpc::ObjectValue v;
    objects_->Describe(id, &v, /*pin=*/false);
    if (v.state() == rpc::OBJ_IN_STORE) return cb(v.size(), v.size(), Status::OK());
    if (v.state() == rpc::OBJ_INLINE) {
      return cb(0, 0, Status::InvalidArgument("is a small value kept inline, not a store object"));
    }
    cb(0, 0, Status(StatusCode::kObjectLost, v.state() == rpc::OBJ_LOST ? v.error() : "it is not here"));
  });
}

void ObjectTransfer::SourceFailed(const std::string& id, const std::string& what) {
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  PullState& p = it->second;
  const std::string why = "node " + Short(p.source) + what;
  if (!p.fixed) {
    PHALANX_LOG(Info) << "copy of " << ToHex(p.object) << " goes on from another node: " << why;
  }
  if (directory_ != nullptr && !p.source.empty()) directory_->Serving(p.object, p.source, -1);
  p.tried.insert(p.source);
  p.last_error = why;
  p.source.clear();
  ++p.epoch;  // replies still on the way from the old source are dropped
  ChooseSource(id);
}

bool ObjectTransfer::WaitForRoom(const std::string& id, PullState& p, const Status& why) {
  constexpr auto kNoRoomPatience = std::chrono::seconds(30);
  auto now = std::chrono::steady_clock::now();
  if (why.code() != StatusCode::kOutOfMemory || p.size > store_->Stats().capacity) return false;
  if (p.no_room_since == std::chrono::steady_clock::time_point{}) p.no_room_since = now;
  if (now - p.no_room_since > kNoRoomPatience) return false;
  ++p.epoch;  // (this reply's bytes go: the first range is asked for again)
  p.inflight = 0;
  uint64_t epoch = p.epoch;
  return objects_->RetrySoon([this, id, epoch] {
    auto it = pulls_.find(id);
    if (it != pulls_.end() && it->second.epoch == epoch && !it->second.sized) RequestMore(id);
  });
}

void ObjectTransfer::ForEachSlowCopy(
    std::chrono::steady_clock::time_point now, std::chrono::milliseconds after, std::chrono::milliseconds every,
    const std::function<void(const std::string&, uint64_t, uint64_t, double, const std::string&)>& fn) {
  for (auto& [key, p] : pulls_) {
    if (!p.sized || p.open || p.produced || now - p.started < after || now - p.reported < every) continue;
    p.reported = now;
    fn(p.object, p.prefix, p.size, std::chrono::duration<double>(now - p.started).count(), p.source);
  }
}

void ObjectTransfer::TraceInFlight(std::string* out, size_t max) const {
  if (trace::ProcessRing() == nullptr) return;  // (tracing off: no timeline)
  auto now = std::chrono::steady_clock::now();
  uint64_t wall = trace::NowNs();
  size_t n = 0;
  for (const auto& [key, p] : pulls_) {
    if (!p.sized || p.produced) continue;
    if (n++ >= max) break;
    auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(now - p.started).count();
    uint64_t dur = static_cast<uint64_t>(std::max<int64_t>(0, took));
    trace::AppendRecord(out, trace::kTransfer, wall - dur, dur, p.object, p.open ? "copy (into a buffer)" : "copy",
                        p.size, p.prefix, p.source, trace::kInFlight);
  }
}

void ObjectTransfer::TraceCopy(const PullState& p, uint16_t flags) {
  if (trace::ProcessRing() == nullptr || !p.sized || p.produced) return;
  auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - p.started);
  uint64_t dur = static_cast<uint64_t>(std::max<int64_t>(0, took.count()));
  trace::Emit(trace::kTransfer, trace::NowNs() - dur, dur, p.object, p.open ? "copy (into a buffer)" : "copy", p.size,
              p.chunks.size(), p.source, flags);
}

void ObjectTransfer::Finish(const std::string& id) {
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  PullState p = std::move(it->second);
  pulls_.erase(it);
  if (directory_ != nullptr && !p.source.empty()) directory_->Serving(p.object, p.source, -1);
  TraceCopy(p, 0);
  if (p.open) {
    for (auto& w : p.watchers) w(p.size, p.size, Status::OK());
    return;
  }
  for (auto& w : p.waiters) ServeReady(id, std::move(w));
  for (auto& w : p.watchers) {
    if (p.sized) {
      w(p.size, p.size, Status::OK());
    } else {
      Watch(id, w);  // a small value: Watch says what it is
    }
  }
  objects_->RemoveRef(id);
}

void ObjectTransfer::Fail(const std::string& id, const std::string& why, bool copies_gone) {
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  PullState p = std::move(it->second);
  pulls_.erase(it);
  std::string msg = "cannot copy object " + ToHex(p.object) + " to this node: " + why;
  PHALANX_LOG(Warning) << msg;
  TraceCopy(p, trace::kFailed);
  if (directory_ != nullptr && !p.source.empty()) directory_->Serving(p.object, p.source, -1);
  if (p.open) {
    for (auto& w : p.watchers) w(p.size, p.prefix, Status(StatusCode::kObjectLost, msg));
    return;
  }
  rpc::PullObjectReply r;
  *r.mutable_status() = ToProto(Status::Unavailable("the copy on node " + Short(self_) + " failed: " + why));
  Discard(id, p, r, msg, /*mark_lost=*/true, copies_gone);
}

void ObjectTransfer::ReplyRange(const std::string& id, uint64_t size, uint64_t store_offset, const Waiter& w) {
  rpc::PullObjectReply r;
  r.set_state(rpc::OBJ_IN_STORE);
  r.set_size(size);
  LendRefs(id, w, &r);
  uint64_t from = std::min(w.offset, size);
  uint64_t n = std::min({w.length, size - from, kMaxPullBytes});  // whatever the reader asked
  if ((from > 0 || from + n < size) && objects_->Contains(id)) {
    // Its reader comes back for the next range: keep the object for it even
    // if this node's own holders let go meanwhile. (An object sent whole in
    // one reply needs nothing more: the frame's lease keeps its bytes.)
    auto [l, fresh] = lingering_.try_emplace(id, std::chrono::steady_clock::now());
    if (fresh) {
      objects_->AddRef(id);
    } else {
      l->second = std::chrono::steady_clock::now();
    }
  }
  w.send(ReplyFrame(w.request_id, r, reinterpret_cast<const char*>(store_->base() + store_offset + from), n,
                    n >= kTailBytes ? store_->Lease(id) : nullptr));
}

void ObjectTransfer::ServeWaiters(PullState& p, const std::string& id) {
  if (p.waiters.empty()) return;
  const auto* e = store_->Find(id);
  if (e == nullptr) return;
  std::vector<Waiter> later;
  for (auto& w : p.waiters) {
    uint64_t end = std::min(p.size, w.offset + w.length);
    if (p.prefix >= end) {
      ReplyRange(id, p.size, e->offset, w);
    } else {
      later.push_back(std::move(w));
    }
  }
  p.waiters = std::move(later);
}

void ObjectTransfer::ReleaseIdle(std::chrono::steady_clock::time_point now, std::chrono::milliseconds linger) {
  for (auto it = expected_.begin(); it != expected_.end();) {
    auto& list = it->second;
    for (size_t k = 0; k < list.size();) {
      if (list[k].deadline > now) {
        ++k;
        continue;
      }
      list[k].send(ReplyFrame(list[k].request_id, LostReply("it did not come to that node in time"), nullptr, 0));
      if (k + 1 < list.size()) list[k] = std::move(list.back());
      list.pop_back();
    }
    it = list.empty() ? expected_.erase(it) : std::next(it);
  }
  for (auto it = lingering_.begin(); it != lingering_.end();) {
    if (now - it->second < linger) {
      ++it;
      continue;
    }
    std::string id = it->first;
    it = lingering_.erase(it);
    objects_->RemoveRef(id);
  }
}

void ObjectTransfer::ServeFrom(const std::string& id, uint64_t size, RangeSource read) {
  sources_[id] = Source{size, std::move(read)};
}

void ObjectTransfer::Serve(const rpc::PullObject& m, uint64_t request_id, SendFrame send) {
  auto src = sources_.empty() ? sources_.end() : sources_.find(m.object_id());  // (none on most nodes)
  if (src != sources_.end()) {  // not in the store: read through the source (device memory)
    uint64_t size = src->second.size;
    uint64_t from = std::min<uint64_t>(m.offset(), size);
    uint64_t n = std::min({m.length(), size - from, kMaxPullBytes});
    src->second.read(from, n, [request_id, size, send = std::move(send)](const Status& st, const char* data,
                                                                          size_t got, std::shared_ptr<const void> keep) {
      if (!st.ok()) return send(ReplyFrame(request_id, LostReply(st.message(), st.code()), nullptr, 0));
      rpc::PullObjectReply r;
      r.set_state(rpc::OBJ_IN_STORE);
      r.set_size(size);
      send(ReplyFrame(request_id, r, data, got, std::move(keep)));
    });
    return;
  }
  Waiter w{m.offset(), m.length(), request_id, std::move(send), {}, {}};
  if (m.with_refs() && m.offset() == 0 && !m.from_node().empty() && m.from_node() != self_) w.refs_for = m.from_node();
  auto it = pulls_.find(m.object_id());
  if (it != pulls_.end()) {  // still arriving here: serve what has come, wait for the rest
    PullState& p = it->second;
    const auto* e = p.sized ? store_->Find(m.object_id()) : nullptr;
    if (e != nullptr && p.prefix >= std::min(p.size, w.offset + w.length)) {
      return ReplyRange(m.object_id(), p.size, e->offset, w);
    }
    p.waiters.push_back(std::move(w));
    return;
  }
  if (m.wait_ms() > 0 && !objects_->Contains(m.object_id()) && !objects_->WasFreed(m.object_id())) {
    // Not here yet, but the reader was told it will be (a ring of copies): wait for it a while.
    w.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(m.wait_ms());
    expected_[m.object_id()].push_back(std::move(w));
    return;
  }
  ServeReady(m.object_id(), std::move(w));
}

void ObjectTransfer::LendRefs(const std::string& id, const Waiter& w, rpc::PullObjectReply* r) {
  if (w.refs_for.empty()) return;
  for (const auto& c : objects_->Contained(id)) {
    r->add_contained_ids(c);
    if (refs_ != nullptr) refs_->Lend(w.refs_for, c);
  }
}

void ObjectTransfer::ServeReady(const std::string& id, Waiter w) {
  if (!objects_->Contains(id)) {
    auto r = LostReply(objects_->WasFreed(id) ? "it was freed there" : "that node does not have it");
    return w.send(ReplyFrame(w.request_id, r, nullptr, 0));
  }
  if (!objects_->IsReady(id)) {
    // Not ready, not arriving: it may be made here range by range soon
    // (Produce takes these requests over), else it is served once ready.
    auto& early = early_[id];
    early.push_back(std::move(w));
    if (early.size() > 1) return;
    objects_->AddRef(id);  // kept while we wait for it
    objects_->OnReady(id, [this, id] {
      auto list = std::move(early_[id]);
      early_.erase(id);
      for (auto& e : list) ServeReady(id, std::move(e));
      objects_->RemoveRef(id);
    });
    return;
  }
  objects_->AddRef(id);  // kept while we reply
  objects_->OnResident(id, [this, id, w = std::move(w)] {  // (read back from disk first when spilled)
    rpc::ObjectValue v;
    objects_->Describe(id, &v, /*pin=*/true);
    rpc::PullObjectReply r;
    r.set_state(v.state());
    r.set_contains_refs(objects_->ContainsRefs(id));
    if (v.state() == rpc::OBJ_INLINE) {
      r.set_size(v.data().size());
      LendRefs(id, w, &r);
      w.send(ReplyFrame(w.request_id, r, v.data().data(), v.data().size()));
    } else if (v.state() == rpc::OBJ_IN_STORE) {
      ReplyRange(id, v.size(), v.offset(), w);
      objects_->ReleasePin(id);
    } else {
      w.send(ReplyFrame(w.request_id, LostReply(v.error(), static_cast<StatusCode>(v.error_code())), nullptr, 0));
    }
    objects_->RemoveRef(id);
  });
}

}  // namespace phalanx::objectstore
