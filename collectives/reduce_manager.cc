#include "collectives/reduce_manager.h"

#include <cstring>
#include <sstream>

#include "core/ids.h"
#include "core/value_format.h"

namespace phalanx::collectives {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {
constexpr size_t kMissingNamed = 5;  // a timeout names this many missing inputs
}  // namespace

Result<ArrayLayout> ParseArray(const uint8_t* data, uint64_t size) {
  uint32_t head[4];
  uint64_t meta_len = 0;
  if (size < 24) return Status::InvalidArgument("is not a phalanx value (" + std::to_string(size) + " bytes)");
  std::memcpy(head, data, 16);
  std::memcpy(&meta_len, data + 16, 8);
  if (head[0] != value_format::kMagic) return Status::InvalidArgument("is corrupt (bad magic number)");
  if (head[1] == value_format::kKindError) return Status(StatusCode::kTaskFailed, "holds an error: its task raised");
  ArrayLayout l;
  if (!DTypeFromCode(head[3], &l.dtype) || head[2] != 1) {
    return Status::InvalidArgument(
        "is not a C-contiguous numpy array of a numeric dtype (float16/32/64, int8/16/32/64, uint8/16/32/64); "
        "numpy.ascontiguousarray makes one");
  }
  if (size < value_format::HeaderSize(1)) return Status::InvalidArgument("is corrupt (truncated header)");
  std::memcpy(&l.data_bytes, data + value_format::HeaderSize(0), 8);
  l.data_offset = value_format::AlignBuffer(value_format::HeaderSize(1) + meta_len);
  if (meta_len > size || l.data_offset + l.data_bytes > size || l.data_bytes % DTypeSize(l.dtype) != 0) {
    return Status::InvalidArgument("is corrupt (its array runs past its " + std::to_string(size) + " bytes)");
  }
  return l;
}

struct ReduceManager::Reduce {
  std::string out;
  std::vector<std::string> inputs;
  ReduceOp op = ReduceOp::kSum;
  int want = 0;
  Clock::time_point started;
  std::vector<int> used;          // inputs combined, in that order
  std::vector<uint8_t> held;      // input i is still held by this reduce
  std::vector<uint8_t> pinned;    // input i's store copy is pinned by this reduce
  std::deque<int> queue;          // ready, not taken yet
  std::vector<std::string> failures;  // inputs that failed, with why
  bool combining = false;         // the helper thread is writing the result
  bool ended = false;
  Status deferred;                // a failure that came while combining
  int first = -1;                 // the input the others are compared with
  ArrayLayout layout;
  std::string head;               // its bytes before the array data (header and pickled dtype/shape)
  uint64_t size = 0;
  bool in_store = false;
  uint8_t* acc = nullptr;         // the result's bytes: in the store, or `small`
  std::string small;
  std::string input_bytes;        // an inline input being taken
  std::unique_ptr<asio::steady_timer> timer;
  std::vector<InputsCallback> waiters;
};

ReduceManager::ReduceManager(asio::io_context& io, objectstore::ObjectTable* objects,
                             objectstore::ObjectStore* store, uint64_t inline_threshold)
    : io_(io), objects_(objects), store_(store), inline_threshold_(inline_threshold) {}

ReduceManager::~ReduceManager() { helper_.join(); }

Status ReduceManager::Start(const rpc::ReduceObjects& m) {
  PHALANX_ASSIGN_OR_RETURN(ReduceOp op, ParseReduceOp(m.op()));
  int n = m.input_ids_size();
  if (n == 0) return Status::InvalidArgument("reduce of no inputs");
  int want = m.num_objects() == 0 ? n : m.num_objects();
  if (want < 1 || want > n) {
    return Status::InvalidArgument("reduce num_objects=" + std::to_string(m.num_objects()) + " with " +
                                   std::to_string(n) + " inputs");
  }
  if (active_.count(m.out_id()) || inputs_.count(m.out_id())) {
    return Status::AlreadyExists("reduce result " + ToHex(m.out_id()) + " exists");
  }
  auto r = std::make_shared<Reduce>();
  r->out = m.out_id();
  r->inputs.assign(m.input_ids().begin(), m.input_ids().end());
  r->op = op;
  r->want = want;
  r->started = Clock::now();
  r->held.assign(n, 1);
  r->pinned.assign(n, 0);
  active_[r->out] = r;
  objects_->AddRef(r->out);  // ours until the reduce ends, whatever the caller does
  for (const auto& id : r->inputs) objects_->AddRef(id);
  if (m.timeout_ms() > 0) {
    r->timer = std::make_unique<asio::steady_timer>(io_, std::chrono::milliseconds(m.timeout_ms()));
    std::weak_ptr<Reduce> weak = r;
    r->timer->async_wait([this, weak](const boost::system::error_code& ec) {
      auto r = weak.lock();
      if (ec || !r || r->ended) return;
      std::ostringstream why;
      double secs = std::chrono::duration<double>(Clock::now() - r->started).count();
      why << "reduce timed out after " << secs << " s: " << r->used.size() << " of " << r->want
          << " inputs combined; still waiting for ";
      size_t named = 0;
      for (size_t i = 0; i < r->inputs.size(); ++i) {
        if (!r->held[i]) continue;
        if (named++ == kMissingNamed) {
          why << ", ...";
          break;
        }
        why << (named > 1 ? ", " : "") << Name(*r, static_cast<int>(i));
      }
      Fail(r, StatusCode::kTimedOut, why.str());
    });
  }
  std::weak_ptr<Reduce> weak = r;
  for (int i = 0; i < n && !r->ended; ++i) {
    // Taken on the next turn of the loop, not inside the table's own callback.
    objects_->OnReady(r->inputs[i], [this, weak, i] {
      asio::post(io_, [this, weak, i] {
        if (auto r = weak.lock()) Arrived(r, i);
      });
    });
  }
  return Status::OK();
}

void ReduceManager::Arrived(const std::shared_ptr<Reduce>& r, int index) {
  if (r->ended || !r->held[index]) return;
  r->queue.push_back(index);
  Pump(r);
}

void ReduceManager::Pump(const std::shared_ptr<Reduce>& r) {
  while (!r->ended && !r->combining && !r->queue.empty()) {
    int i = r->queue.front();
    r->queue.pop_front();
    Take(r, i);
  }
}

void ReduceManager::Take(const std::shared_ptr<Reduce>& r, int i) {
  rpc::ObjectValue v;
  objects_->Describe(r->inputs[i], &v, /*pin=*/true);
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  if (v.state() == rpc::OBJ_IN_STORE) {
    r->pinned[i] = 1;
    data = store_->base() + v.offset();
    size = v.size();
  } else if (v.state() == rpc::OBJ_INLINE) {
    r->input_bytes = std::move(*v.mutable_data());
    data = reinterpret_cast<const uint8_t*>(r->input_bytes.data());
    size = r->input_bytes.size();
  } else {
    InputFailed(r, i, v.state() == rpc::OBJ_LOST ? v.error() : "it is not ready");
    return;
  }
  auto layout = ParseArray(data, size);
  if (!layout.ok()) {
    if (layout.status().code() == StatusCode::kTaskFailed) {
      InputFailed(r, i, layout.status().message() + " (get it for the error)");
    } else {
      Fail(r, StatusCode::kCollectiveFailed, Name(*r, i) + " " + layout.status().message());
    }
    return;
  }
  const ArrayLayout& l = layout.value();
  std::function<void()> work;
  if (r->first < 0) {
    r->first = i;
    r->layout = l;
    r->size = size;
    r->head.assign(reinterpret_cast<const char*>(data), l.data_offset);
    if (size > inline_threshold_) {
      auto off = objects_->CreateInStore(r->out, size, {});
      if (!off.ok()) {
        Fail(r, off.status().code(), "no room for the reduce's result: " + off.status().message());
        return;
      }
      r->in_store = true;
      r->acc = store_->base() + off.value();
    } else {
      r->small.resize(size);
      r->acc = reinterpret_cast<uint8_t*>(r->small.data());
    }
    work = [acc = r->acc, data, size] { std::memcpy(acc, data, size); };
  } else {
    bool same_shape = size == r->size && l.dtype == r->layout.dtype &&
                      std::memcmp(data, r->head.data(), r->head.size()) == 0;
    if (!same_shape) {
      std::ostringstream why;
      why << "reduce inputs do not match: " << Name(*r, r->first) << " is " << DTypeName(r->layout.dtype) << " with "
          << r->layout.data_bytes << " bytes of data, " << Name(*r, i);
      if (l.dtype == r->layout.dtype && l.data_bytes == r->layout.data_bytes) {
        why << " has the same dtype and size but a different shape";
      } else {
        why << " is " << DTypeName(l.dtype) << " with " << l.data_bytes << " bytes of data";
      }
      Fail(r, StatusCode::kCollectiveFailed, why.str());
      return;
    }
    work = [acc = r->acc + l.data_offset, in = data + l.data_offset, op = r->op, l] {
      (void)ReduceInto(op, l.dtype, acc, in, l.data_bytes / DTypeSize(l.dtype));
    };
  }
  if (size < kThreadedBytes) {
    work();
    Combined(r, i);
    return;
  }
  r->combining = true;
  asio::post(helper_, [this, r, i, work = std::move(work)] {
    work();
    asio::post(io_, [this, r, i] {
      r->combining = false;
      if (!r->deferred.ok()) return Fail(r, r->deferred.code(), r->deferred.message());
      Combined(r, i);
      Pump(r);
    });
  });
}

void ReduceManager::Combined(const std::shared_ptr<Reduce>& r, int index) {
  Release(*r, index);
  r->used.push_back(index);
  if (static_cast<int>(r->used.size()) == r->want) Finish(r);
}

void ReduceManager::InputFailed(const std::shared_ptr<Reduce>& r, int index, const std::string& why) {
  Release(*r, index);
  r->failures.push_back(Name(*r, index) + ": " + why);
  size_t n = r->inputs.size();
  if (n - r->failures.size() >= static_cast<size_t>(r->want)) return;  // a spare input can stand in
  std::ostringstream msg;
  msg << "reduce needs " << r->want << " of its " << n << " inputs, but " << r->failures.size() << " failed: ";
  for (size_t k = 0; k < r->failures.size(); ++k) msg << (k ? "; " : "") << r->failures[k];
  Fail(r, StatusCode::kCollectiveFailed, msg.str());
}

void ReduceManager::Release(Reduce& r, int index) {
  const std::string& id = r.inputs[index];
  if (r.pinned[index]) {
    r.pinned[index] = 0;
    objects_->ReleasePin(id);
  }
  if (r.held[index]) {
    r.held[index] = 0;
    objects_->RemoveRef(id);
  }
}

void ReduceManager::Finish(const std::shared_ptr<Reduce>& r) {
  Status s;
  if (r->in_store) {
    s = objects_->SealInStore(r->out);
    if (s.ok() && on_stored_) on_stored_(r->out, r->size);
  } else {
    objects_->PutInline(r->out, std::move(r->small), {});
  }
  r->in_store = false;
  End(r, s);
}

void ReduceManager::Fail(const std::shared_ptr<Reduce>& r, StatusCode code, const std::string& why) {
  if (r->ended) return;
  if (r->combining) {  // the helper thread still writes the result: fail once it is done
    if (r->deferred.ok()) r->deferred = Status(code, why);
    return;
  }
  if (r->in_store) objects_->AbortCreate(r->out);
  r->in_store = false;
  objects_->MarkLost(r->out, code, why);
  End(r, Status(code, why));
}

void ReduceManager::End(const std::shared_ptr<Reduce>& r, const Status& outcome) {
  r->ended = true;
  if (r->timer) r->timer->cancel();
  for (size_t i = 0; i < r->inputs.size(); ++i) Release(*r, static_cast<int>(i));
  r->queue.clear();
  std::vector<std::string> used;
  for (int i : r->used) used.push_back(r->inputs[i]);
  if (outcome.ok()) inputs_[r->out] = used;
  for (auto& cb : r->waiters) {
    if (outcome.ok()) {
      cb(used);
    } else {
      cb(outcome);
    }
  }
  r->waiters.clear();
  active_.erase(r->out);
  objects_->RemoveRef(r->out);  // may free it at once (its caller let go): see Forget
}

void ReduceManager::InputsOf(const std::string& out, InputsCallback cb) {
  auto done = inputs_.find(out);
  if (done != inputs_.end()) return cb(done->second);
  auto it = active_.find(out);
  if (it != active_.end()) {
    it->second->waiters.push_back(std::move(cb));
    return;
  }
  cb(Status::NotFound("object " + ToHex(out) + " is not a reduce's result known to this node (reduced_inputs "
                      "answers on the node where reduce was called, until the result is freed; a failed reduce's "
                      "error is raised by get)"));
}

void ReduceManager::Forget(const std::string& id) { inputs_.erase(id); }

void ReduceManager::Stop(const std::string& why) {
  std::vector<std::shared_ptr<Reduce>> all;
  for (auto& [id, r] : active_) all.push_back(r);
  for (auto& r : all) Fail(r, StatusCode::kUnavailable, why);
}

std::string ReduceManager::Name(const Reduce& r, int index) const {
  return "input " + std::to_string(index) + " (ObjectRef(" + ToHex(r.inputs[index]) + "))";
}

}  // namespace phalanx::collectives
