#include "collectives/reduce_step.h"

#include <algorithm>
#include <cstring>

#include "collectives/reduce_manager.h"
#include "core/ids.h"
#include "core/logging.h"
#include "core/value_format.h"

namespace phalanx::collectives {

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
  uint64_t size = 0;
  uint64_t made = 0;               // out's bytes [0, made) are final
};

namespace {
std::string SizeMismatch(const rpc::ReduceStep& m, uint64_t prev_size, uint64_t input_size) {
  return "reduce inputs do not match: " + m.prev_name() + " has " + std::to_string(prev_size) + " bytes, " +
         m.input_name() + " has " + std::to_string(input_size);
}
}  // namespace

ReduceSteps::ReduceSteps(objectstore::ObjectTable* objects, objectstore::ObjectStore* store,
                         objectstore::ObjectTransfer* transfer, std::string self_node)
    : objects_(objects), store_(store), transfer_(transfer), self_(std::move(self_node)) {}

void ReduceSteps::Run(const rpc::ReduceStep& m, Done started, Done done) {
  auto op = ParseReduceOp(m.op());
  if (!op.ok()) return started(op.status());
  if (steps_.count(m.out_id())) return started(Status::AlreadyExists("reduce step " + ToHex(m.out_id()) + " exists"));
  auto s = std::make_shared<Step>();
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
    objects_->AddRef(m.input_id());  // (and pinned) until End
  }
  steps_[m.out_id()] = s;
  s->direct = m.prev_node() != self_;
  if (!s->direct) objects_->AddRef(m.prev_id());  // read here while it grows, until End
  if (s->has_input && !Begin(s, s->input_size)) return started(Status(StatusCode::kCollectiveFailed, "step failed"));
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
                        if (!s->begun && !Begin(s, size)) return Status::Unavailable("the reduce step failed");
                        if (size != s->size) {
                          std::string why = SizeMismatch(s->m, size, s->size);
                          Fail(s, why);
                          return Status(StatusCode::kCollectiveFailed, why);
                        }
                        return s->out;
                      },
                      progress);
}

std::string ReduceSteps::CopyKey(const std::string& out) { return "reduce-step-input:" + out; }

bool ReduceSteps::Begin(const std::shared_ptr<Step>& s, uint64_t size) {
  auto out = transfer_->Produce(s->m.out_id(), size);
  if (!out.ok()) {
    Fail(s, "no room for the reduce's partial result here: " + out.status().message());
    return false;
  }
  s->out = out.value();
  s->size = size;
  s->begun = true;
  if (s->has_input) objects_->AddRef(s->m.out_id());  // a partial result: kept until Drop
  return true;
}

void ReduceSteps::Progress(const std::shared_ptr<Step>& s, uint64_t size, uint64_t bytes, const Status& st) {
  if (s->ended) return;
  const rpc::ReduceStep& m = s->m;
  if (!st.ok()) return Fail(s, m.prev_name() + ": " + st.message());
  if (!s->begun && !Begin(s, size)) return;
  if (size != s->size) return Fail(s, SizeMismatch(m, size, s->size));
  uint64_t hi = bytes >= size ? size : bytes & ~uint64_t{7};  // whole elements only
  if (hi <= s->made) return;
  const uint8_t* prev = s->out;  // direct: prev's bytes are in out already
  if (!s->direct) {
    const auto* e = store_->Find(m.prev_id());
    if (e == nullptr) return Fail(s, m.prev_name() + " is gone from this node's store");
    prev = store_->base() + e->offset;
  }
  if (!s->head_checked && hi >= std::min(size, value_format::HeaderSize(1))) {
    // prev must be a numeric array like the input (a copy step checks the last link).
    auto pl = ParseArray(prev, size);
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
  if (s->has_input) {
    uint64_t begin = std::max(lo, s->layout.data_offset);
    uint64_t end = std::min(hi, s->layout.data_offset + s->layout.data_bytes);
    if (begin < end) {
      size_t width = DTypeSize(s->layout.dtype);
      (void)ReduceInto(s->op, s->layout.dtype, s->out + begin, s->input + begin, (end - begin) / width);
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
  if (s->has_input) {
    objects_->ReleasePin(m.input_id());
    objects_->RemoveRef(m.input_id());
  }
  if (!s->direct) objects_->RemoveRef(m.prev_id());
  if (!s->has_input) steps_.erase(m.out_id());  // the final copy: its out is its holders'
  Done done = std::move(s->done);
  if (done) done(outcome);
}

void ReduceSteps::Drop(const std::vector<std::string>& outs) {
  for (const auto& id : outs) {
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
  Drop(orphans);
}

}  // namespace phalanx::collectives
