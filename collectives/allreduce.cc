#include "collectives/allreduce.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "collectives/reduce_ops.h"
#include "core/ids.h"
#include "core/logging.h"

namespace phalanx::collectives {

namespace asio = boost::asio;

const std::string& Allreduces::self() const { return SelfOf(chain_); }
using Clock = std::chrono::steady_clock;

namespace {
// What a result fails with when a step or assembly on `node` failed with `st`:
// lost inputs and mismatches keep their kind; a node that stopped answering
// fails the collective.
StatusCode Kind(const Status& st) {
  switch (st.code()) {
    case StatusCode::kObjectLost:
    case StatusCode::kTaskFailed:
    case StatusCode::kTimedOut:
      return st.code();
    default:
      return StatusCode::kCollectiveFailed;
  }
}
std::string OnNode(const std::string& node) { return " on node " + ToHex(node).substr(0, 12) + ": "; }
}  // namespace

struct Allreduces::Allreduce {
  std::vector<std::string> inputs, outs;
  std::string op;
  int64_t timeout_ms = 0;
  Clock::time_point started;
  enum class Mode { kUndecided, kCheap, kSliced } mode = Mode::kUndecided;
  uint64_t size = 0;
  int first = -1;                 // the input the others' sizes are compared with
  std::vector<uint64_t> cuts;     // slice s starts at cuts[s]
  std::vector<int> order;         // inputs in the order they became ready
  std::vector<std::string> node;  // of each input, once ready
  struct Chain {                  // slice s's: its links still to place, and the last one placed
    std::deque<int> todo;
    std::string prev_id, prev_node;
  };
  std::vector<Chain> chains;
  size_t links_sent = 0;          // of all chains
  std::vector<std::pair<std::string, std::string>> partials;  // (id, node) of every link
  bool assembling = false;
  std::vector<uint8_t> made;      // result i is made (and recorded here)
  size_t left = 0;                // results not made yet
  bool ended = false;
  std::unique_ptr<asio::steady_timer> timer;
};

Allreduces::Allreduces(asio::io_context& io, objectstore::ObjectTable* objects, objectstore::ObjectStore* store,
                       ReduceManager* reduces, ReduceChain* chain, ReduceManager::StoredHandler on_stored)
    : io_(io),
      objects_(objects),
      store_(store),
      reduces_(reduces),
      chain_(chain),
      on_stored_(std::move(on_stored)) {}

std::vector<uint64_t> Allreduces::Cuts(uint64_t size, size_t n) {
  uint64_t step = std::max<uint64_t>(kSliceAlign, size / n / kSliceAlign * kSliceAlign);
  std::vector<uint64_t> cuts;
  for (size_t s = 0; s < n && s * step < size; ++s) cuts.push_back(s * step);
  return cuts;
}

Status Allreduces::Start(const rpc::ReduceObjects& m) {
  PHALANX_RETURN_IF_ERROR(ParseReduceOp(m.op()).status());
  int n = m.input_ids_size();
  if (n == 0) return Status::InvalidArgument("allreduce of no inputs");
  if (m.out_ids_size() != n) {
    return Status::InvalidArgument("allreduce with " + std::to_string(n) + " inputs and " +
                                   std::to_string(m.out_ids_size()) + " results");
  }
  if (m.num_objects() != 0) return Status::InvalidArgument("allreduce takes every input (no num_objects)");
  if (active_.count(m.out_ids(0))) return Status::AlreadyExists("allreduce result " + ToHex(m.out_ids(0)) + " exists");
  auto r = std::make_shared<Allreduce>();
  r->inputs.assign(m.input_ids().begin(), m.input_ids().end());
  r->outs.assign(m.out_ids().begin(), m.out_ids().end());
  r->op = m.op();
  r->timeout_ms = m.timeout_ms();
  r->started = Clock::now();
  r->node.assign(n, "");
  r->made.assign(n, 0);
  r->left = n;
  active_[r->outs[0]] = r;
  for (const auto& id : r->outs) objects_->AddRef(id);  // ours until the allreduce ends
  for (const auto& id : r->inputs) objects_->AddRef(id);
  if (m.timeout_ms() > 0) {
    r->timer = std::make_unique<asio::steady_timer>(io_, std::chrono::milliseconds(m.timeout_ms()));
    std::weak_ptr<Allreduce> weak = r;
    r->timer->async_wait([this, weak](const boost::system::error_code& ec) {
      auto r = weak.lock();
      if (ec || !r || r->ended) return;
      std::ostringstream why;
      why << "allreduce timed out after " << std::chrono::duration<double>(Clock::now() - r->started).count()
          << " s: ";
      if (r->order.size() < r->inputs.size()) {
        why << r->order.size() << " of " << r->inputs.size() << " inputs ready; still waiting for ";
        size_t named = 0;
        for (size_t i = 0; i < r->inputs.size() && named < 5; ++i) {
          if (!r->node[i].empty()) continue;
          why << (named++ ? ", " : "") << InputName(static_cast<int>(i), r->inputs[i]);
        }
      } else {
        why << "every input was ready; " << r->left << " results were still being made";
      }
      Fail(r, StatusCode::kTimedOut, why.str());
    });
  }
  if (chain_ == nullptr || n < 2) {
    GoCheap(r);
    return Status::OK();
  }
  std::weak_ptr<Allreduce> weak = r;
  WhenLocated(io_, *objects_, r->inputs, [this, weak](int i) {
    if (auto r = weak.lock()) Located(r, i);
  });
  return Status::OK();
}

void Allreduces::GoCheap(const std::shared_ptr<Allreduce>& r) {
  r->mode = Allreduce::Mode::kCheap;
  r->timer.reset();  // the reduce keeps the time
  rpc::ReduceObjects m;
  m.set_out_id(r->outs[0]);
  for (const auto& id : r->inputs) m.add_input_ids(id);
  m.set_op(r->op);
  m.set_timeout_ms(r->timeout_ms);
  Status st = reduces_->Start(m);
  if (!st.ok()) return Fail(r, st.code(), st.message());
  std::weak_ptr<Allreduce> weak = r;
  objects_->OnReady(r->outs[0], [this, weak] {
    asio::post(io_, [this, weak] {
      if (auto r = weak.lock()) CopyResult(r);
    });
  });
}

void Allreduces::CopyResult(const std::shared_ptr<Allreduce>& r) {
  if (r->ended) return;
  rpc::ObjectValue v;
  objects_->Describe(r->outs[0], &v, /*pin=*/true);
  for (size_t i = 1; i < r->outs.size(); ++i) {
    const std::string& id = r->outs[i];
    if (v.state() == rpc::OBJ_INLINE) {
      objects_->PutInline(id, v.data(), {});
    } else if (v.state() == rpc::OBJ_IN_STORE) {
      auto off = objects_->CreateInStore(id, v.size(), {});
      if (!off.ok()) {
        objects_->MarkLost(id, off.status().code(), "no room for the allreduce's result: " + off.status().message());
        continue;
      }
      std::memcpy(store_->base() + off.value(), store_->base() + v.offset(), v.size());
      (void)objects_->SealInStore(id);
      if (on_stored_) on_stored_(id, v.size());
    } else {
      objects_->MarkLost(id, static_cast<StatusCode>(v.error_code()), v.error());
    }
  }
  if (v.state() == rpc::OBJ_IN_STORE) objects_->ReleasePin(r->outs[0]);
  std::fill(r->made.begin(), r->made.end(), 1);
  End(r);
}

void Allreduces::Located(const std::shared_ptr<Allreduce>& r, int i) {
  if (r->ended || r->mode == Allreduce::Mode::kCheap) return;
  const std::string& id = r->inputs[i];
  rpc::ObjectValue v;
  auto [node, size] = Where(*objects_, self(), id, &v);
  size_t n = r->inputs.size();
  if (r->mode == Allreduce::Mode::kUndecided) {
    if (node.empty() || size < n * kMinSlice) return GoCheap(r);
    r->mode = Allreduce::Mode::kSliced;
    r->size = size;
    r->first = i;
    r->cuts = Cuts(size, n);
    r->chains.resize(r->cuts.size());
    ++num_sliced_;
  }
  if (node.empty()) {
    if (v.state() == rpc::OBJ_LOST) {
      auto code = v.error_code() == 0 ? StatusCode::kObjectLost : static_cast<StatusCode>(v.error_code());
      return Fail(r, code, InputName(i, id) + " is lost: " + v.error());
    }
    return Fail(r, StatusCode::kCollectiveFailed,
                "allreduce inputs do not match: " + InputName(i, id) + " is a small value (or holds an error: get "
                "it), " + InputName(r->first, r->inputs[r->first]) + " a store object of " + std::to_string(r->size) +
                    " bytes");
  }
  if (size != r->size) {
    return Fail(r, StatusCode::kCollectiveFailed,
                "allreduce inputs do not match: " + InputName(r->first, r->inputs[r->first]) + " has " +
                    std::to_string(r->size) + " bytes, " + InputName(i, id) + " has " + std::to_string(size));
  }
  Arrive(r, i, node);
}

void Allreduces::Arrive(const std::shared_ptr<Allreduce>& r, int i, const std::string& node) {
  r->node[i] = node;
  size_t j = r->order.size();  // its place in the order of arrival
  PHALANX_LOG(Debug) << "allreduce " << ToHex(r->outs[0]).substr(0, 8) << ": input " << i << " ready (" << j + 1
                     << " of " << r->inputs.size() << ") on node " << ToHex(node).substr(0, 8);
  r->order.push_back(i);
  size_t slices = r->chains.size();
  // Slice s's chain starts at the s-th input to arrive and takes the later
  // ones as they come; once all are here, it wraps around to those before s.
  for (size_t s = 0; s < slices && s <= j; ++s) r->chains[s].todo.push_back(i);
  if (j + 1 == r->inputs.size()) {
    for (size_t s = 1; s < slices; ++s) {
      for (size_t t = 0; t < s; ++t) r->chains[s].todo.push_back(r->order[t]);
    }
  }
  for (size_t s = 0; s < slices && !r->ended; ++s) Place(r, s);
}

void Allreduces::Place(const std::shared_ptr<Allreduce>& r, size_t s) {
  // Every link is placed as soon as its input is ready, without waiting for
  // the link before it to start: a link that reads from another node asks
  // that node to wait for the partial result (ReduceStep.wait_ms), and one
  // that reads from its own node is sent after the link before it on the
  // same connection, so that it exists by then.
  Allreduce::Chain& c = r->chains[s];
  while (!r->ended && !c.todo.empty()) {
    int i = c.todo.front();
    c.todo.pop_front();
    rpc::ReduceStep m;
    m.set_out_id(MakeObjectId(RandomBytes(kTaskIdSize), 0));
    m.set_prev_id(c.prev_id);  // none: the slice's first link
    m.set_prev_node(c.prev_node);
    m.set_prev_name("slice " + std::to_string(s) + " of the partial sum");
    m.set_input_id(r->inputs[i]);
    m.set_input_name(InputName(i, r->inputs[i]));
    m.set_op(r->op);
    m.set_reduce_node(self());
    m.set_lo(r->cuts[s]);
    m.set_hi(s + 1 < r->cuts.size() ? r->cuts[s + 1] : r->size);
    m.set_total_size(r->size);
    m.set_wait_ms(kRingWaitMs);
    const std::string node = r->node[i];
    r->partials.emplace_back(m.out_id(), node);
    c.prev_id = m.out_id();
    c.prev_node = node;
    ++r->links_sent;
    std::weak_ptr<Allreduce> weak = r;
    chain_->SendStep(node, m, [this, weak, s, i, node](const Status& st) {
      auto r = weak.lock();
      if (!r || r->ended) return;  // (its partial result is dropped with the others)
      if (!st.ok()) {
        return Fail(r, Kind(st), "allreduce failed at the link of " + InputName(i, r->inputs[i]) + " in slice " +
                                     std::to_string(s) + OnNode(node) + st.message());
      }
      PHALANX_LOG(Debug) << "allreduce " << ToHex(r->outs[0]).substr(0, 8) << ": a link of slice " << s
                         << " started on node " << ToHex(node).substr(0, 8);
    });
  }
  if (r->links_sent == r->inputs.size() * r->chains.size()) AssembleAll(r);
}

void Allreduces::AssembleAll(const std::shared_ptr<Allreduce>& r) {
  if (r->assembling) return;
  r->assembling = true;
  PHALANX_LOG(Debug) << "allreduce " << ToHex(r->outs[0]).substr(0, 8) << ": every link placed, assembling";
  rpc::AssembleSlices base;
  base.set_size(r->size);
  for (size_t s = 0; s < r->chains.size(); ++s) {
    base.add_slice_ids(r->chains[s].prev_id);
    base.add_slice_nodes(r->chains[s].prev_node);
    base.add_slice_lo(r->cuts[s]);
  }
  base.set_reduce_node(self());
  base.set_wait_ms(kRingWaitMs);
  // The ring: the inputs' nodes in the order the inputs became ready (a
  // node once). Every node copies each slice made elsewhere from the node
  // before it, so each link carries the slices one way, as in a ring
  // allreduce's allgather, and each node reads from one node only.
  std::vector<std::string> ring;
  std::unordered_map<std::string, size_t> place;
  for (int i : r->order) {
    if (place.emplace(r->node[i], ring.size()).second) ring.push_back(r->node[i]);
  }
  for (const auto& c : r->chains) {  // the copies, dropped with the partials at the end
    for (const auto& node : ring) {
      if (node != c.prev_node) r->partials.emplace_back(c.prev_id, node);
    }
  }
  std::weak_ptr<Allreduce> weak = r;
  for (size_t j = 0; j < r->order.size() && !r->ended; ++j) {
    size_t i = r->order[j];
    rpc::AssembleSlices m = base;
    m.set_ring_prev(ring[(place[r->node[i]] + ring.size() - 1) % ring.size()]);
    m.set_out_id(r->outs[i]);
    m.set_name("the allreduce result for " + InputName(static_cast<int>(i), r->inputs[i]));
    const std::string node = r->node[i];
    chain_->Assemble(node, m, [this, weak, i, node, out = r->outs[i]](const Status& st) {
      auto r = weak.lock();
      if (!r || r->ended) {  // failed meanwhile: nobody records it, so let it go
        if (st.ok() && node != self()) chain_->Release(node, {out});
        return;
      }
      Assembled(r, static_cast<int>(i), st);
    });
  }
}

void Allreduces::Assembled(const std::shared_ptr<Allreduce>& r, int i, const Status& st) {
  if (!st.ok()) return Fail(r, Kind(st), "allreduce failed" + OnNode(r->node[i]) + st.message());
  // Made there, held there for this node: its bytes come here when read here.
  if (r->node[i] != self()) objects_->SetRemote(r->outs[i], r->node[i], r->size);
  r->made[i] = 1;
  PHALANX_LOG(Debug) << "allreduce " << ToHex(r->outs[0]).substr(0, 8) << ": result " << i << " made on node "
                     << ToHex(r->node[i]).substr(0, 8) << ", " << r->left - 1 << " to go";
  if (--r->left == 0) End(r);
}

void Allreduces::Fail(const std::shared_ptr<Allreduce>& r, StatusCode code, const std::string& why) {
  if (r->ended) return;
  PHALANX_LOG(Info) << "allreduce into " << ToHex(r->outs[0]).substr(0, 12) << " failed: " << why;
  // Results being made are dropped first (so that none is handed out), then failed.
  std::vector<std::pair<std::string, std::string>> drop = std::move(r->partials);
  for (size_t i = 0; i < r->outs.size(); ++i) {
    if (r->assembling && !r->made[i]) drop.emplace_back(r->outs[i], r->node[i]);
  }
  if (chain_ != nullptr) chain_->DropAll(drop);
  // A result not made is failed here, and on its input's node too, where a
  // static group's rank waits for it (it holds the result's id already).
  std::unordered_map<std::string, std::vector<std::string>> elsewhere;
  for (size_t i = 0; i < r->outs.size(); ++i) {
    if (r->made[i]) continue;
    if (!objects_->IsReady(r->outs[i])) objects_->MarkLost(r->outs[i], code, why);
    if (!r->node[i].empty() && r->node[i] != self()) elsewhere[r->node[i]].push_back(r->outs[i]);
  }
  if (chain_ != nullptr) {
    for (const auto& [node, ids] : elsewhere) chain_->Lose(node, ids, code, why);
  }
  End(r);
}

void Allreduces::End(const std::shared_ptr<Allreduce>& r) {
  r->ended = true;
  if (r->timer) r->timer->cancel();
  if (!r->partials.empty() && chain_ != nullptr) chain_->DropAll(std::exchange(r->partials, {}));
  active_.erase(r->outs[0]);
  for (const auto& id : r->inputs) objects_->RemoveRef(id);
  for (const auto& id : r->outs) objects_->RemoveRef(id);
}

void Allreduces::Stop(const std::string& why) {
  std::vector<std::shared_ptr<Allreduce>> all;
  for (auto& [id, r] : active_) all.push_back(r);
  for (auto& r : all) Fail(r, StatusCode::kUnavailable, why);
}

}  // namespace phalanx::collectives
