#include "collectives/reduce_step.h"

#include <algorithm>
#include <cstring>

#include <boost/asio/post.hpp>

#include "collectives/reduce_manager.h"
#include "core/ids.h"
#include "core/logging.h"
#include "core/trace.h"
#include "core/value_format.h"

namespace phalanx::collectives {

namespace asio = boost::asio;

struct ReduceSteps::Step {
  rpc::ReduceStep m;
  ReduceOp op = ReduceOp::kSum;
  Done done;
  bool has_input = false;
  const uint8_t* input = nullptr;  // pinned in the store while the step runs
  uint64_t input_size = 0;
  ArrayLayout layout;              // the input's
  bool direct = false;             // prev comes from another node straight into out
  bool begun = false;              // out exists (Produce)
  bool ended = false;
  bool head_checked = false;
  uint8_t* out = nullptr;
  uint64_t lo = 0;                 // out[0] is the value's byte lo (a slice, see rpc::ReduceStep)
  uint64_t size = 0;
  uint64_t made = 0;               // out's bytes [0, made) are final
  uint64_t started_ns = 0;         // the timeline (core/trace.h; 0: tracing off)
};

struct ReduceSteps::Assembly {
  rpc::AssembleSlices m;
  Done done;
  uint8_t* out = nullptr;
  std::vector<uint64_t> got;  // bytes of slice s in place
  size_t left = 0;            // slices not whole yet
  bool ended = false;
  uint64_t started_ns = 0;    // the timeline (core/trace.h; 0: tracing off)
  uint64_t Lo(size_t k) const { return m.slice_lo(static_cast<int>(k)); }
  uint64_t Len(size_t k) const { return (k + 1 < got.size() ? Lo(k + 1) : m.size()) - Lo(k); }
};

namespace {
// The timeline's names (core/trace.h) of a step and of an assembly.
std::string StepLabel(const rpc::ReduceStep& m, bool has_input) {
  return m.op() + (has_input ? " with one input" : " (its final copy)");
}
std::string AssemblyLabel(const rpc::AssembleSlices& m) {
  return "assemble " + std::to_string(m.slice_ids_size()) + " slices";
}

std::string SizeMismatch(const rpc::ReduceStep& m, uint64_t prev_size, uint64_t input_size) {
  return "reduce inputs do not match: " + m.prev_name() + " has " + std::to_string(prev_size) + " bytes, " +
         m.input_name() + " has " + std::to_string(input_size);
}
}  // namespace

ReduceSteps::ReduceSteps(boost::asio::io_context& io, objectstore::ObjectTable* objects,
                         objectstore::ObjectStore* store, objectstore::ObjectTransfer* transfer, std::string self_node)
    : io_(io), objects_(objects), store_(store), transfer_(transfer), self_(std::move(self_node)) {}

void ReduceSteps::Run(const rpc::ReduceStep& m, Done started, Done done) {
  auto op = ParseReduceOp(m.op());
  if (!op.ok()) return started(op.status());
  if (steps_.count(m.out_id()) || waiting_.count(m.out_id())) {
    return started(Status::AlreadyExists("reduce step " + ToHex(m.out_id()) + " exists"));
  }
  if (!m.input_id().empty() && m.wait_ms() > 0 && BeingMadeHere(m.input_id())) {
    // A direct actor call's result reaches its caller (who places this step)
    // on one connection while its worker's seal reaches this node on another.
    waiting_[m.out_id()] = m.reduce_node();
    objects_->OnLocated(m.input_id(), [this, m, started = std::move(started), done = std::move(done)]() mutable {
      asio::post(io_, [this, m, started = std::move(started), done = std::move(done)]() mutable {
        if (waiting_.erase(m.out_id()) == 0) return started(Status(StatusCode::kCollectiveFailed, "the reduce is over"));
        Run(m, std::move(started), std::move(done));
      });
    });
    return;
  }
  if (!m.prev_id().empty() && m.prev_node() == self_ && m.wait_ms() == 0 && !HasHere(m.prev_id())) {
    // Nothing will make prev here: this node let go of its copy after the
    // caller located it (it was copied to the caller's node meanwhile).
    return started(Status(StatusCode::kObjectLost,
                          m.prev_name() + " is no longer on node " + ToHex(self_).substr(0, 12)));
  }
  auto s = std::make_shared<Step>();
  if (trace::ProcessRing() != nullptr) s->started_ns = trace::NowNs();
  s->m = m;
  s->op = op.value();
  s->done = std::move(done);
  s->has_input = !m.input_id().empty();
  if (s->has_input) {
    rpc::ObjectValue v;
    objects_->Describe(m.input_id(), &v, /*pin=*/true);
    if (v.state() != rpc::OBJ_IN_STORE) {
      return started(Status(v.state() == rpc::OBJ_LOST ? StatusCode::kObjectLost : StatusCode::kNotFound,
                            m.input_name() + " is not in the store of node " + ToHex(self_).substr(0, 12) +
                                (v.state() == rpc::OBJ_LOST ? ": " + v.error() : "")));
    }
    s->input = store_->base() + v.offset();
    s->input_size = v.size();
    auto layout = ParseArray(s->input, s->input_size);
    if (!layout.ok()) {
      objects_->ReleasePin(m.input_id());
      StatusCode code = layout.status().code() == StatusCode::kTaskFailed ? StatusCode::kTaskFailed
                                                                           : StatusCode::kCollectiveFailed;
      return started(Status(code, m.input_name() + " " + layout.status().message()));
    }
    s->layout = layout.value();
    if (m.hi() > 0 && (s->input_size != m.total_size() || m.hi() > m.total_size() || m.lo() >= m.hi())) {
      objects_->ReleasePin(m.input_id());
      return started(Status(StatusCode::kCollectiveFailed,
                            "allreduce inputs do not match: " + m.input_name() + " has " +
                                std::to_string(s->input_size) + " bytes, the first has " +
                                std::to_string(m.total_size())));
    }
    objects_->AddRef(m.input_id());  // (and pinned) until End
  }
  s->lo = m.hi() > 0 ? m.lo() : 0;
  if (s->lo > 0) s->head_checked = true;  // a slice past the header: the input was checked above
  steps_[m.out_id()] = s;
  if (m.prev_id().empty()) return Seed(s, std::move(started));
  s->direct = m.prev_node() != self_;
  if (!s->direct) objects_->AddRef(m.prev_id());  // read here while it grows, until End
  uint64_t out_size = m.hi() > 0 ? m.hi() - m.lo() : s->input_size;
  if (s->has_input) {
    Status begun = Begin(s, out_size);
    if (!begun.ok()) return started(begun);
  }
  started(Status::OK());
  std::weak_ptr<Step> weak = s;
  auto progress = [this, weak](uint64_t size, uint64_t bytes, const Status& st) {
    if (auto s = weak.lock()) Progress(s, size, bytes, st);
  };
  if (!s->direct) return transfer_->Watch(m.prev_id(), progress);
  // prev's bytes land in out, where the input is added to them in place.
  transfer_->PullInto(CopyKey(m.out_id()), m.prev_id(), m.prev_node(),
                      [this, weak](uint64_t size) -> Result<uint8_t*> {
                        auto s = weak.lock();
                        if (!s || s->ended) return Status::Unavailable("the reduce step ended");
                        if (!s->begun) PHALANX_RETURN_IF_ERROR(Begin(s, size));
                        if (size != s->size) {
                          std::string why = SizeMismatch(s->m, size, s->size);
                          Fail(s, why);
                          return Status(StatusCode::kCollectiveFailed, why);
                        }
                        return s->out;
                      },
                      progress, m.wait_ms());
}

bool ReduceSteps::BeingMadeHere(const std::string& id) {
  if (!objects_->Contains(id) || !objects_->RemoteNode(id).empty()) return false;
  rpc::ObjectValue v;
  objects_->Describe(id, &v, /*pin=*/false);
  return v.state() == rpc::OBJ_PENDING;
}

bool ReduceSteps::HasHere(const std::string& id) {
  if (transfer_->Arriving(id) || objects_->IsSpilled(id)) return true;  // (being made or copied, or on disk)
  rpc::ObjectValue v;
  objects_->Describe(id, &v, /*pin=*/false);
  return v.state() == rpc::OBJ_IN_STORE;
}

std::string ReduceSteps::CopyKey(const std::string& out) { return "reduce-step-input:" + out; }

void ReduceSteps::Seed(const std::shared_ptr<Step>& s, Done started) {
  // The first link of a slice's chain: out is the input's slice as it is.
  if (!s->has_input) {
    steps_.erase(s->m.out_id());
    return started(Status::InvalidArgument("a reduce step needs an input or a prev"));
  }
  Status begun = Begin(s, s->m.hi() - s->lo);
  if (!begun.ok()) return started(begun);
  std::memcpy(s->out, s->input + s->lo, s->size);
  s->made = s->size;
  transfer_->Complete(s->m.out_id());
  started(Status::OK());
  End(s, Status::OK());
}

Status ReduceSteps::Begin(const std::shared_ptr<Step>& s, uint64_t size) {
  auto out = transfer_->Produce(s->m.out_id(), size);
  if (!out.ok()) {
    std::string why = "no room for the reduce's partial result on node " + ToHex(self_).substr(0, 12) + ": " +
                      out.status().message();
    Fail(s, why);
    return Status(StatusCode::kCollectiveFailed, why);
  }
  s->out = out.value();
  s->size = size;
  s->begun = true;
  if (s->has_input) objects_->AddRef(s->m.out_id());  // a partial result: kept until Drop
  return Status::OK();
}

void ReduceSteps::Progress(const std::shared_ptr<Step>& s, uint64_t size, uint64_t bytes, const Status& st) {
  if (s->ended) return;
  const rpc::ReduceStep& m = s->m;
  if (!st.ok()) return Fail(s, m.prev_name() + ": " + st.message());
  if (!s->begun && !Begin(s, size).ok()) return;
  if (size != s->size) return Fail(s, SizeMismatch(m, size, s->size));
  uint64_t hi = bytes >= size ? size : bytes & ~uint64_t{7};  // whole elements only
  if (hi <= s->made) return;
  const uint8_t* prev = s->out;  // direct: prev's bytes are in out already
  if (!s->direct) {
    const auto* e = store_->Find(m.prev_id());
    if (e == nullptr) return Fail(s, m.prev_name() + " is gone from this node's store");
    prev = store_->base() + e->offset;
  }
  if (!s->head_checked && hi >= std::min(size, value_format::HeaderSize(2))) {
    // prev must be a numeric array like the input (a copy step checks the last link).
    auto pl = ParseArray(prev, m.hi() > 0 ? m.total_size() : size);
    if (!pl.ok()) return Fail(s, m.prev_name() + " " + pl.status().message());
    if (!s->has_input) {
      s->head_checked = true;
    } else if (hi >= s->layout.data_offset) {
      if (std::memcmp(prev, s->input, s->layout.data_offset) != 0) {
        return Fail(s, MismatchMessage(m.prev_name(), pl.value(), m.input_name(), s->layout));
      }
      s->head_checked = true;
    }
  }
  uint64_t lo = s->made;
  if (!s->direct) std::memcpy(s->out + lo, prev + lo, hi - lo);
  if (s->has_input) {  // (in the value's offsets: out[x] is the value's byte s->lo + x)
    uint64_t begin = std::max(s->lo + lo, s->layout.data_offset);
    uint64_t end = std::min(s->lo + hi, s->layout.data_offset + s->layout.data_bytes);
    if (begin < end) {
      size_t width = DTypeSize(s->layout.dtype);
      (void)ReduceInto(s->op, s->layout.dtype, s->out + (begin - s->lo), s->input + begin, (end - begin) / width);
    }
  }
  s->made = hi;
  if (hi < size) return transfer_->Advance(m.out_id(), hi);
  transfer_->Complete(m.out_id());
  End(s, Status::OK());
}

void ReduceSteps::Fail(const std::shared_ptr<Step>& s, const std::string& why) {
  if (s->ended) return;
  PHALANX_LOG(Info) << "reduce step " << ToHex(s->m.out_id()).substr(0, 12) << " failed: " << why;
  if (s->direct) transfer_->Cancel(CopyKey(s->m.out_id()));  // before out's space goes
  if (s->begun) transfer_->Abort(s->m.out_id(), why, /*mark_lost=*/s->has_input);
  End(s, Status(StatusCode::kCollectiveFailed, why));
}

void ReduceSteps::End(const std::shared_ptr<Step>& s, const Status& outcome) {
  // Once: completing out may end the reduce at once (a reader on this node
  // finishes, the caller drops the partials, failing this step) before the
  // step's own End runs.
  if (s->ended) return;
  s->ended = true;
  const rpc::ReduceStep& m = s->m;
  PHALANX_LOG(Debug) << "reduce step " << ToHex(m.out_id()).substr(0, 8) << " [" << m.lo() << ", " << m.hi()
                     << ") ended: " << outcome.ToString();
  if (s->has_input) {
    objects_->ReleasePin(m.input_id());
    objects_->RemoveRef(m.input_id());
  }
  if (!s->direct && !m.prev_id().empty()) objects_->RemoveRef(m.prev_id());
  if (!s->has_input) steps_.erase(m.out_id());  // the final copy: its out is its holders'
  if (s->started_ns != 0) {  // the timeline: this link of the chain, what it combined and how many bytes
    uint64_t now = trace::NowNs();
    trace::Emit(trace::kReduceStep, s->started_ns, now - s->started_ns, m.out_id(), StepLabel(m, s->has_input),
                s->size, s->has_input ? 1 : 0, std::string(), outcome.ok() ? 0 : trace::kFailed);
  }
  Done done = std::move(s->done);
  if (done) done(outcome);
}

void ReduceSteps::TraceInFlight(std::string* out, size_t max) const {
  uint64_t now = trace::NowNs();
  size_t n = 0;
  for (const auto& [id, s] : steps_) {
    if (s->ended || s->started_ns == 0) continue;
    if (n++ >= max) return;
    const rpc::ReduceStep& m = s->m;
    trace::AppendRecord(out, trace::kReduceStep, s->started_ns, now - std::min(now, s->started_ns), m.out_id(),
                        StepLabel(m, s->has_input), s->size, s->has_input ? 1 : 0, std::string(), trace::kInFlight);
  }
  for (const auto& [id, a] : assemblies_) {
    if (a->ended || a->started_ns == 0) continue;
    if (n++ >= max) return;
    const rpc::AssembleSlices& m = a->m;
    trace::AppendRecord(out, trace::kAllreduceSlice, a->started_ns, now - std::min(now, a->started_ns), m.out_id(),
                        AssemblyLabel(m), m.size(), static_cast<uint64_t>(m.slice_ids_size()), std::string(),
                        trace::kInFlight);
  }
}

void ReduceSteps::HoldCopy(const std::string& id, const std::string& from, const rpc::AssembleSlices& m) {
  if (!copies_.try_emplace(id, m.reduce_node()).second) return;  // (another input's result here copies it)
  objects_->AddRef(id);
  transfer_->CopyFrom(id, from, m.wait_ms());
}

void ReduceSteps::Drop(const std::vector<std::string>& outs, const std::string& why) {
  for (const auto& id : outs) {
    if (waiting_.erase(id)) continue;  // (its input's callback finds it gone)
    auto c = copies_.find(id);
    if (c != copies_.end()) {
      copies_.erase(c);
      transfer_->StopCopy(id, "the allreduce is over");
      objects_->RemoveRef(id);
      continue;
    }
    auto as = assemblies_.find(id);
    if (as != assemblies_.end()) {
      EndAssembly(as->second, Status(StatusCode::kCollectiveFailed, why.empty() ? "the allreduce is over" : why));
      // Whoever still holds the result here (a static group's rank) hears why.
      if (!why.empty() && objects_->Contains(id)) objects_->MarkLost(id, StatusCode::kCollectiveFailed, why);
    }
    auto it = steps_.find(id);
    if (it == steps_.end()) continue;
    auto s = it->second;
    if (s->begun && s->made >= s->size) {
      End(s, Status::OK());  // complete (its own End is yet to run)
    } else {
      Fail(s, "the reduce it belongs to is over");
    }
    steps_.erase(id);
    if (s->has_input && s->begun) objects_->RemoveRef(id);
  }
}

void ReduceSteps::DropFrom(const std::string& node) {
  std::vector<std::string> orphans;
  for (const auto& [id, s] : steps_) {
    if (s->m.reduce_node() == node) orphans.push_back(id);
  }
  for (const auto& [id, a] : assemblies_) {
    if (a->m.reduce_node() == node) orphans.push_back(id);
  }
  for (const auto& [id, from] : copies_) {
    if (from == node) orphans.push_back(id);
  }
  for (const auto& [id, from] : waiting_) {
    if (from == node) orphans.push_back(id);
  }
  Drop(orphans, "node " + ToHex(node).substr(0, 12) + ", which led this collective, died");
}

void ReduceSteps::Assemble(const rpc::AssembleSlices& m, Done done) {
  size_t n = static_cast<size_t>(m.slice_ids_size());
  bool ok = n > 0 && m.slice_nodes_size() == m.slice_ids_size() && m.slice_lo_size() == m.slice_ids_size() &&
            m.slice_lo(0) == 0;
  for (size_t k = 1; ok && k < n; ++k) ok = m.slice_lo(k) > m.slice_lo(k - 1) && m.slice_lo(k) < m.size();
  bool ring = !m.ring_prev().empty() && m.ring_prev() != self_;
  for (size_t k = 0; ok && k < n; ++k) ok = ring || m.slice_nodes(k) == self_;  // (where else to read it from)
  if (!ok) return done(Status::InvalidArgument("malformed allreduce assembly of " + m.name()));
  if (assemblies_.count(m.out_id()) || steps_.count(m.out_id())) {
    return done(Status::AlreadyExists("allreduce result " + ToHex(m.out_id()) + " is being made here"));
  }
  auto out = transfer_->Produce(m.out_id(), m.size());
  if (!out.ok()) {
    return done(Status(StatusCode::kCollectiveFailed,
                       "no room for " + m.name() + " on node " + ToHex(self_).substr(0, 12) + ": " +
                           out.status().message()));
  }
  objects_->AddRef(m.out_id());  // ours until done has run (it may hold it for the caller)
  auto a = std::make_shared<Assembly>();
  if (trace::ProcessRing() != nullptr) a->started_ns = trace::NowNs();
  a->m = m;
  a->done = std::move(done);
  a->out = out.value();
  a->got.assign(n, 0);
  a->left = n;
  assemblies_[m.out_id()] = a;
  PHALANX_LOG(Debug) << "assembly of " << ToHex(m.out_id()).substr(0, 8) << " started";
  // A slice made elsewhere becomes an object here too, copied from the node
  // before this one in the ring and kept for the node after it; each slice
  // is copied into place as it grows.
  for (size_t k = 0; k < n && !a->ended; ++k) {
    if (m.slice_nodes(k) != self_) HoldCopy(m.slice_ids(k), m.ring_prev(), m);
    objects_->AddRef(m.slice_ids(k));  // (and watched) until the assembly ends
    std::weak_ptr<Assembly> weak = a;
    transfer_->Watch(m.slice_ids(k), [this, weak, k](uint64_t size, uint64_t bytes, const Status& st) {
      if (auto a = weak.lock()) SliceProgress(a, k, size, bytes, st);
    });
  }
}

void ReduceSteps::SliceProgress(const std::shared_ptr<Assembly>& a, size_t k, uint64_t size, uint64_t bytes,
                                Status st) {
  if (a->ended) return;
  const rpc::AssembleSlices& m = a->m;
  uint64_t lo = a->Lo(k);
  uint64_t len = a->Len(k);
  if (st.ok() && size != len) {
    st = Status(StatusCode::kCollectiveFailed, "has " + std::to_string(size) + " bytes, not " + std::to_string(len));
  }
  if (st.ok() && bytes > a->got[k]) {
    const auto* e = store_->Find(m.slice_ids(k));
    if (e == nullptr) {
      st = Status(StatusCode::kObjectLost, "is gone from this node's store");
    } else {
      std::memcpy(a->out + lo + a->got[k], store_->base() + e->offset + a->got[k], bytes - a->got[k]);
    }
  }
  if (!st.ok()) {
    return EndAssembly(a, Status(StatusCode::kCollectiveFailed, m.name() + ": slice " + std::to_string(k) +
                                                                     " of the reduced value: " + st.message()));
  }
  if (bytes <= a->got[k]) return;
  a->got[k] = bytes;
  if (bytes < len) return;
  if (--a->left == 0) EndAssembly(a, Status::OK());
}

void ReduceSteps::EndAssembly(const std::shared_ptr<Assembly>& a, const Status& outcome) {
  if (a->ended) return;
  a->ended = true;
  const rpc::AssembleSlices& m = a->m;
  PHALANX_LOG(Debug) << "assembly of " << ToHex(m.out_id()).substr(0, 8) << " ended: " << outcome.ToString();
  if (a->started_ns != 0) {  // the timeline: an allreduce's slices put together here
    uint64_t now = trace::NowNs();
    trace::Emit(trace::kAllreduceSlice, a->started_ns, now - a->started_ns, m.out_id(), AssemblyLabel(m), m.size(),
                static_cast<uint64_t>(m.slice_ids_size()), std::string(), outcome.ok() ? 0 : trace::kFailed);
  }
  for (const auto& id : m.slice_ids()) objects_->RemoveRef(id);
  if (outcome.ok()) {
    transfer_->Complete(m.out_id());
  } else {
    transfer_->Abort(m.out_id(), outcome.message(), /*mark_lost=*/false);
  }
  assemblies_.erase(m.out_id());
  Done done = std::move(a->done);
  if (done) done(outcome);
  objects_->RemoveRef(m.out_id());
}

}  // namespace phalanx::collectives
