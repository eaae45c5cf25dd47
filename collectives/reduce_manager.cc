#include "collectives/reduce_manager.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <tuple>
#include <utility>

#include "collectives/reduce_step.h"
#include "core/ids.h"
#include "core/logging.h"
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
  uint32_t nbuf = head[2];
  uint64_t descriptor_bytes = 0;  // a GPU object's descriptor, after the array (value_format.h)
  if (nbuf == 2 && size >= value_format::HeaderSize(2)) std::memcpy(&descriptor_bytes, data + 32, 8);
  if (!DTypeFromCode(head[3], &l.dtype) ||
      !(nbuf == 1 || (nbuf == 2 && descriptor_bytes == value_format::kDeviceDescriptorBytes))) {
    return Status::InvalidArgument(
        "is not a C-contiguous numpy array or CPU torch tensor of a numeric dtype (float16/32/64, bfloat16, "
        "int8/16/32/64, uint8/16/32/64); numpy.ascontiguousarray makes one");
  }
  if (size < value_format::HeaderSize(nbuf)) return Status::InvalidArgument("is corrupt (truncated header)");
  std::memcpy(&l.data_bytes, data + value_format::HeaderSize(0), 8);
  l.data_offset = value_format::AlignBuffer(value_format::HeaderSize(nbuf) + meta_len);
  if (meta_len > size || l.data_offset + l.data_bytes > size || l.data_bytes % DTypeSize(l.dtype) != 0) {
    return Status::InvalidArgument("is corrupt (its array runs past its " + std::to_string(size) + " bytes)");
  }
  return l;
}

std::string MismatchMessage(const std::string& a, const ArrayLayout& la, const std::string& b,
                            const ArrayLayout& lb) {
  std::ostringstream why;
  why << "reduce inputs do not match: " << a << " is " << DTypeName(la.dtype) << " with " << la.data_bytes
      << " bytes of data, " << b;
  if (la.dtype == lb.dtype && la.data_bytes == lb.data_bytes) {
    why << " has the same dtype and size but a different shape";
  } else {
    why << " is " << DTypeName(lb.dtype) << " with " << lb.data_bytes << " bytes of data";
  }
  return why.str();
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
  // The chain (see the header).
  enum class Mode { kUndecided, kLocal, kChain } mode = Mode::kUndecided;
  std::deque<std::pair<int, std::string>> located;  // (input, its node), not placed yet
  bool placing = false;                             // a step was sent; its answer is awaited
  bool final_running = false;                       // this node copies the last partial into out
  std::string prev_id, prev_node, prev_name;        // what the next step reads
  std::vector<std::pair<std::string, std::string>> partials;  // (id, node) of the steps so far
  std::string start_node;                           // where the chain's first input is
  int rewinds = 0;
  int local_last = -1;  // an input on this node, kept for the chain's last link (the result is made here)
  std::vector<uint8_t> refetched;  // input i's step failed once: it was fetched to this node (Refetch)
};

namespace {
std::string PartialName(const std::vector<int>& used) {
  std::string s = "the partial result of inputs ";
  for (size_t k = 0; k < used.size(); ++k) {
    if (k == 8) return s + ", ... (" + std::to_string(used.size()) + " inputs)";
    s += (k ? ", " : "") + std::to_string(used[k]);
  }
  return s;
}
}  // namespace

bool ReduceManager::ChainPays(uint64_t size, size_t n, double bytes_per_s, double hop_s, uint64_t chunk_bytes) {
  if (n < 2 || bytes_per_s <= 0) return false;
  double one = static_cast<double>(size) / bytes_per_s;
  double fan_in = static_cast<double>(n - 1) * one;  // every other input through this node's link
  double per_hop = hop_s + static_cast<double>(std::min<uint64_t>(size, chunk_bytes)) / bytes_per_s;
  double chain = one + static_cast<double>(n) * per_hop;
  return chain < fan_in;
}

ReduceManager::ReduceManager(asio::io_context& io, objectstore::ObjectTable* objects,
                             objectstore::ObjectStore* store, uint64_t inline_threshold, ReduceChain* chain,
                             StoredHandler on_stored)
    : io_(io),
      objects_(objects),
      store_(store),
      inline_threshold_(inline_threshold),
      chain_(chain),
      on_stored_(std::move(on_stored)) {}

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
  r->refetched.assign(n, 0);
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
        if (!r->held[i] || std::count(r->used.begin(), r->used.end(), static_cast<int>(i))) continue;
        if (named++ == kMissingNamed) {
          why << ", ...";
          break;
        }
        why << (named > 1 ? ", " : "") << Name(*r, static_cast<int>(i));
      }
      Fail(r, StatusCode::kTimedOut, why.str());
    });
  }
  if (chain_ == nullptr) {
    GoLocal(r);
    return Status::OK();
  }
  std::weak_ptr<Reduce> weak = r;
  WhenLocated(io_, *objects_, r->inputs, [this, weak](int i) {
    if (auto r = weak.lock()) Located(r, i);
  });
  return Status::OK();
}

void ReduceManager::GoLocal(const std::shared_ptr<Reduce>& r) {
  r->mode = Reduce::Mode::kLocal;
  r->located.clear();
  r->local_last = -1;
  std::weak_ptr<Reduce> weak = r;
  for (size_t i = 0; i < r->inputs.size() && !r->ended; ++i) {
    if (!r->held[i]) continue;
    objects_->OnReady(r->inputs[i], [this, weak, i] {  // (copies remote inputs here)
      asio::post(io_, [this, weak, i] {
        if (auto r = weak.lock()) Arrived(r, static_cast<int>(i));
      });
    });
  }
}

void ReduceManager::Located(const std::shared_ptr<Reduce>& r, int i) {
  if (r->ended || !r->held[i] || r->mode == Reduce::Mode::kLocal) return;
  const std::string& id = r->inputs[i];
  rpc::ObjectValue v;
  auto [node, size] = Where(*objects_, self(), id, &v);
  if (r->mode == Reduce::Mode::kUndecided) {
    if (node.empty() || size <= inline_threshold_) return GoLocal(r);
    if (node != self()) {  // (large, and here: the first input on another node decides)
      auto [rate, hop] = chain_->Link(node);
      if (!ChainPays(size, r->inputs.size(), rate, hop, chain_->chunk_bytes())) return GoLocal(r);
      r->mode = Reduce::Mode::kChain;
      ++num_chains_;
    }
  }
  if (node.empty()) {  // small, failed or lost: no link of a chain of store objects
    if (v.state() == rpc::OBJ_INLINE) {
      auto layout = ParseArray(reinterpret_cast<const uint8_t*>(v.data().data()), v.data().size());
      if (!layout.ok() && layout.status().code() == StatusCode::kTaskFailed) {
        return InputFailed(r, i, layout.status().message() + " (get it for the error)");
      }
      return Fail(r, StatusCode::kCollectiveFailed,
                  "reduce inputs do not match: " + Name(*r, i) + " is a value of " + std::to_string(v.data().size()) +
                      " bytes, the others are store objects of more than " + std::to_string(inline_threshold_));
    }
    return InputFailed(r, i, v.state() == rpc::OBJ_LOST ? v.error() : "it is not ready");
  }
  if (node == self() && r->local_last < 0) {
    // Its link goes last: the final copy into the result is then a local one,
    // and this node's link carries the object once, not twice (in, then the
    // last partial result in again).
    r->local_last = i;
  } else {
    r->located.emplace_back(i, node);
  }
  if (r->mode == Reduce::Mode::kUndecided) {  // only inputs here so far
    if (r->located.size() + 1 == r->inputs.size()) GoLocal(r);  // all here
    return;
  }
  PlaceNext(r);
}

void ReduceManager::PlaceNext(const std::shared_ptr<Reduce>& r) {
  for (;;) {
    if (r->ended || r->placing) return;
    int room = r->want - static_cast<int>(r->used.size()) - (r->local_last >= 0 ? 1 : 0);
    int i;
    std::string node;
    if (room > 0 && !r->located.empty()) {
      std::tie(i, node) = r->located.front();
      r->located.pop_front();
    } else if (room == 0 && r->local_last >= 0) {
      i = r->local_last;  // the last link, on this node
      node = self();
      r->local_last = -1;
    } else {
      break;
    }
    if (!r->held[i]) continue;
    // Where it is now, not where it was when located: a task's result made on
    // another node is copied back to its caller's node, which then lets the
    // other node drop its copy.
    node = Relocate(*r, i, node);
    if (r->used.empty()) {  // the first input is the chain's start as it is
      r->prev_id = r->inputs[i];
      r->prev_node = node;
      r->start_node = node;
      r->prev_name = Name(*r, i);
      r->used.push_back(i);
      continue;
    }
    if (r->partials.empty()) {  // (prev is the first input: the same holds for it)
      r->prev_node = r->start_node = Relocate(*r, r->used[0], r->prev_node);
    }
    rpc::ReduceStep m = NextStep(*r, MakeObjectId(RandomBytes(kTaskIdSize), 0));
    m.set_input_id(r->inputs[i]);
    m.set_input_name(Name(*r, i));
    r->placing = true;
    std::weak_ptr<Reduce> weak = r;
    auto started = [this, weak, i, node = node, out = m.out_id()](const Status& st) {
      auto r = weak.lock();
      if (!r || r->ended || r->mode != Reduce::Mode::kChain) {  // over meanwhile: drop what it made
        if (st.ok()) chain_->Drop(node, {out});
        return;
      }
      r->placing = false;
      if (st.ok()) {
        r->partials.emplace_back(out, node);
        r->used.push_back(i);
        r->prev_id = out;
        r->prev_node = node;
        r->prev_name = PartialName(r->used);
      } else if (st.code() == StatusCode::kCollectiveFailed) {
        return Fail(r, StatusCode::kCollectiveFailed, st.message());
      } else {
        Refetch(r, i, st.message());
      }
      PlaceNext(r);
    };
    chain_->SendStep(node, m, started);
    return;
  }
  if (!r->ended && !r->placing && !r->final_running && r->mode == Reduce::Mode::kChain &&
      static_cast<int>(r->used.size()) == r->want) {
    RunFinal(r);
  }
}

std::string ReduceManager::Relocate(const Reduce& r, int index, const std::string& node) const {
  rpc::ObjectValue v;
  std::string now = Where(*objects_, self(), r.inputs[index], &v).first;
  return now.empty() ? node : now;  // (lost meanwhile: the step says so)
}

void ReduceManager::RunFinal(const std::shared_ptr<Reduce>& r) {
  r->final_running = true;
  rpc::ReduceStep m = NextStep(*r, r->out);  // no input: a copy of the last link into the result
  std::weak_ptr<Reduce> weak = r;
  auto finished = [this, weak](const Status& st) {
    auto r = weak.lock();
    if (!r || !r->final_running) return;
    r->final_running = false;
    if (st.ok()) return End(r, Status::OK());
    ChainFailed(r, st);
  };
  chain_->steps()->Run(m, [finished](const Status& st) {
    if (!st.ok()) finished(st);
  }, finished);
}

void ReduceManager::ChainFailed(const std::shared_ptr<Reduce>& r, const Status& why) {
  if (r->ended) return;
  if (chain_ == nullptr || r->rewinds > 0 || r->partials.empty()) return FallBack(r, why);
  // Which of the chain's nodes still answer decides where it can go on from.
  r->placing = true;  // nothing is placed meanwhile
  std::vector<std::string> nodes = {r->start_node};
  for (const auto& [id, node] : r->partials) {
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  }
  auto alive = std::make_shared<std::unordered_map<std::string, bool>>();
  auto left = std::make_shared<size_t>(nodes.size());
  std::weak_ptr<Reduce> weak = r;
  for (const auto& node : nodes) {
    chain_->Probe(node, [this, weak, why, alive, left, node](bool up) {
      (*alive)[node] = up;
      if (--*left > 0) return;
      if (auto r = weak.lock()) Rewind(r, why, *alive);
    });
  }
}

void ReduceManager::Rewind(const std::shared_ptr<Reduce>& r, const Status& why,
                           const std::unordered_map<std::string, bool>& alive) {
  if (r->ended) return;
  r->placing = false;
  size_t m = r->partials.size();  // the first partial result on a dead node
  for (size_t k = 0; k < r->partials.size(); ++k) {
    if (!alive.at(r->partials[k].second)) {
      m = k;
      break;
    }
  }
  if (!alive.at(r->start_node) || m == r->partials.size()) return FallBack(r, why);
  ++r->rewinds;
  ++num_rewinds_;
  const std::string dead = r->partials[m].second;
  PHALANX_LOG(Info) << "reduce " << ToHex(r->out).substr(0, 12) << ": node " << ToHex(dead).substr(0, 12)
                    << " died mid-chain; going on from the " << m << " link(s) before it";
  // The links from the dead one on go; their inputs are placed again, in
  // their order, ahead of those not placed yet, but for the dead nodes' own.
  std::vector<std::pair<std::string, std::string>> dropped(r->partials.begin() + static_cast<long>(m),
                                                           r->partials.end());
  r->partials.resize(m);
  if (chain_ != nullptr) chain_->DropAll(dropped);  // (a drop to a dead node fails quietly)
  std::vector<int> again(r->used.begin() + static_cast<long>(m) + 1, r->used.end());
  r->used.resize(m + 1);
  if (m == 0) {
    r->prev_id = r->inputs[r->used[0]];
    r->prev_node = r->start_node;
    r->prev_name = Name(*r, r->used[0]);
  } else {
    r->prev_id = r->partials[m - 1].first;
    r->prev_node = r->partials[m - 1].second;
    r->prev_name = PartialName(r->used);
  }
  for (size_t k = again.size(); k-- > 0;) {
    if (alive.at(dropped[k].second)) r->located.emplace_front(again[k], dropped[k].second);
  }
  for (size_t k = 0; k < again.size() && !r->ended; ++k) {
    if (!alive.at(dropped[k].second)) {
      Refetch(r, again[k], "its node " + ToHex(dropped[k].second).substr(0, 12) + " died during the reduce");
    }
  }
  if (!r->ended) PlaceNext(r);
}

void ReduceManager::Refetch(const std::shared_ptr<Reduce>& r, int index, const std::string& why) {
  if (r->ended || !r->held[index]) return;
  if (r->refetched[index]) return InputFailed(r, index, why);
  r->refetched[index] = 1;
  PHALANX_LOG(Info) << "reduce " << ToHex(r->out).substr(0, 12) << ": " << Name(*r, index) << " failed in the chain ("
                    << why << "); fetching it to this node (made again if its task can run again)";
  // The object table copies it here from any copy left, or has its task run
  // again (lineage), or marks it lost with the reason: Located then places
  // it on this node, or names the loss.
  std::weak_ptr<Reduce> weak = r;
  objects_->OnReady(r->inputs[index], [this, weak, index] {
    asio::post(io_, [this, weak, index] {
      if (auto r = weak.lock()) Located(r, index);
    });
  });
}

void ReduceManager::FallBack(const std::shared_ptr<Reduce>& r, const Status& why) {
  PHALANX_LOG(Info) << "reduce " << ToHex(r->out).substr(0, 12) << ": the chain failed (" << why.message()
                    << "); reducing on this node instead";
  ++num_fallbacks_;
  if (chain_ != nullptr) chain_->DropAll(std::exchange(r->partials, {}));
  r->located.clear();
  r->used.clear();
  r->placing = false;
  GoLocal(r);
}

void ReduceChain::DropAll(const std::vector<std::pair<std::string, std::string>>& partials) {
  std::unordered_map<std::string, std::vector<std::string>> by_node;
  for (const auto& [id, node] : partials) by_node[node].push_back(id);
  for (auto& [node, ids] : by_node) Drop(node, ids);
}

const std::string& SelfOf(const ReduceChain* chain) {
  static const std::string kNoChain;
  return chain != nullptr ? chain->self() : kNoChain;
}

const std::string& ReduceManager::self() const { return SelfOf(chain_); }

rpc::ReduceStep ReduceManager::NextStep(const Reduce& r, const std::string& out) const {
  rpc::ReduceStep m;
  m.set_out_id(out);
  m.set_prev_id(r.prev_id);
  m.set_prev_node(r.prev_node);
  m.set_prev_name(r.prev_name);
  m.set_op(ReduceOpName(r.op));
  m.set_reduce_node(self());
  return m;
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
      // Named in input order, whichever came first, so one mistake reads the same every run.
      Fail(r, StatusCode::kCollectiveFailed,
           i < r->first ? MismatchMessage(Name(*r, i), l, Name(*r, r->first), r->layout)
                        : MismatchMessage(Name(*r, r->first), r->layout, Name(*r, i), l));
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
  if (r->final_running) {  // the chain's last copy into out stops (and drops out's space)
    r->final_running = false;
    chain_->steps()->Drop({r->out});
  }
  objects_->MarkLost(r->out, code, why);
  End(r, Status(code, why));
}

void ReduceManager::End(const std::shared_ptr<Reduce>& r, const Status& outcome) {
  r->ended = true;
  if (r->timer) r->timer->cancel();
  if (chain_ != nullptr) chain_->DropAll(std::exchange(r->partials, {}));
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

std::pair<std::string, uint64_t> Where(objectstore::ObjectTable& objects, const std::string& self,
                                       const std::string& id, rpc::ObjectValue* v) {
  std::string node = objects.RemoteNode(id);
  if (!node.empty()) return {node, objects.RemoteSize(id)};
  objects.Describe(id, v, /*pin=*/false);
  if (v->state() == rpc::OBJ_IN_STORE) return {self, v->size()};
  return {"", 0};
}

void WhenLocated(asio::io_context& io, objectstore::ObjectTable& objects, const std::vector<std::string>& ids,
                 std::function<void(int)> located) {
  for (size_t i = 0; i < ids.size(); ++i) {
    // Taken on the next turn of the loop, not inside the table's own callback.
    objects.OnLocated(ids[i], [&io, located, i] { asio::post(io, [located, i] { located(static_cast<int>(i)); }); });
  }
}

std::string InputName(int index, const std::string& id) {
  return "input " + std::to_string(index) + " (ObjectRef(" + ToHex(id) + "))";
}

std::string ReduceManager::Name(const Reduce& r, int index) const { return InputName(index, r.inputs[index]); }

}  // namespace phalanx::collectives
