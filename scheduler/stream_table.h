// StreamTable: the generators called from this node. A task or actor method
// that yields hands in each item as it makes it (TaskDone with `item`, by
// whichever way its results travel); the caller's raylet keeps the items
// here for the caller, who reads them in order (STREAM_NEXT) and takes each
// over with its own ref. An item is held for the caller from its arrival
// until the caller has read it or let go of the stream (STREAM_DROP, or its
// process exits): nothing is freed that the caller may still read, and
// nothing it will never read outlives the stream.
//
// Backpressure: a producer told to stay at most N items ahead asks for
// credit (STREAM_CREDIT), answered once the caller has read enough, or at
// once with `dropped` when the caller let go (the producer then stops).
//
// Item k of task T is object MakeObjectId(T, 2 + k); the task's one return
// (index 1) says how the stream ended. The producer's last word (how many
// it made) and its items may come after the return (a task spilled to
// another node sends them by another connection than its result): a stream
// is over when that count is reached, or its return is lost (the producer
// died). Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio.hpp>

#include "core/proto/phalanx.pb.h"
#include "objectstore/object_table.h"

namespace phalanx::scheduler {

// The object id of item `k` of generator task `task_id`.
std::string StreamItemId(const std::string& task_id, uint64_t k);
// The most items one generator may make (object indexes are 32 bits).
inline constexpr uint64_t kMaxStreamItems = (1ull << 32) - 3;

class StreamTable {
 public:
  using NextReply = std::function<void(const rpc::StreamNextReply&)>;
  using CreditReply = std::function<void(const rpc::StreamCreditReply&)>;

  StreamTable(boost::asio::io_context& io, objectstore::ObjectTable* objects) : io_(io), objects_(objects) {}
  ~StreamTable();

  // `consumer` (a client id of this node) called generator `task_id`; its
  // items will arrive here. Dynamic: the return holds the items' refs, so
  // they are held here only until it is ready.
  void Open(const std::string& task_id, const std::string& consumer, bool dynamic);
  // Item `k` arrives (before its value is stored here, which the caller does
  // next whatever this says): held for the consumer while it may read it.
  void OnItem(const std::string& task_id, uint64_t k);
  // The producer's last word: it made `count` items.
  void OnEnd(const std::string& task_id, uint64_t count);
  // The consumer (`by`) has read `consumed` items (the ones before are its
  // own now); `reply` once more are here, the stream ended, or at the timeout.
  void Next(const std::string& task_id, const std::string& by, uint64_t consumed, int64_t timeout_ms,
            NextReply reply);
  // The consumer let go: unread items are freed, the producer is told to
  // stop. `by`: the client asking (only the stream's own consumer may).
  void Drop(const std::string& task_id, const std::string& by);
  // Its process exited: every stream it called is dropped.
  void DropAllOf(const std::string& consumer);
  // The producer waits until `need` items were read (or the consumer let go).
  void Credit(const std::string& task_id, uint64_t need, int64_t timeout_ms, CreditReply reply);

  size_t size() const { return streams_.size(); }
  // Items held for consumers now (for stats and tests).
  size_t held() const;

 private:
  struct Stream;
  // A parked read (need: items read so far) or credit request (need: items
  // the producer waits to see read), answered with the stream as it stands.
  struct Waiter {
    uint64_t need = 0;
    std::shared_ptr<boost::asio::steady_timer> timer;
    std::function<void(const Stream&)> answer;
  };
  using WaiterList = std::vector<std::shared_ptr<Waiter>>;
  struct Stream {
    std::string task_id;
    std::string consumer;
    bool dynamic = false;
    uint64_t available = 0;             // items 0 .. available-1 arrived
    std::set<uint64_t> ahead;           // arrived past a gap (a retry's items)
    std::set<uint64_t> held;            // items held for the consumer
    uint64_t consumed = 0;
    bool dropped = false;
    bool end_known = false;             // the producer said how many it made
    uint64_t end_count = 0;
    bool returned = false;              // the task's return is ready or lost here
    bool lost = false;                  // ... lost: the producer died (it said no last word)
    WaiterList readers;
    WaiterList producers;
  };
  void Release(Stream& s, uint64_t below);
  // No more items will come: the producer said how many and all are here,
  // or it died without saying.
  bool Ended(const Stream& s) const { return (s.end_known && s.available >= s.end_count) || s.lost; }
  // What a reader or a producer is told now, and whether it is told already.
  rpc::StreamNextReply ReadState(const Stream& s) const;
  rpc::StreamCreditReply CreditState(const Stream& s) const;
  bool ReaderDue(const Stream& s, uint64_t consumed) const { return s.available > consumed || Ended(s) || s.dropped; }
  static bool ProducerDue(const Stream& s, uint64_t need) { return s.dropped || s.consumed >= need; }
  // Answers the waiters of `list` that are due (all of them: `all`).
  void Wake(Stream& s, WaiterList Stream::*list, bool all);
  void WakeReaders(Stream& s, bool all) { Wake(s, &Stream::readers, all); }
  void WakeProducers(Stream& s, bool all) { Wake(s, &Stream::producers, all); }
  void OnReturned(const std::string& task_id);
  void MaybeErase(const std::string& task_id);
  // Keeps `w` in the stream's `list` until woken or, after `timeout_ms` (< 0: none), answered as things stand.
  void Park(const std::string& task_id, Stream& s, WaiterList Stream::*list, std::shared_ptr<Waiter> w,
            int64_t timeout_ms);
  void Forget(const std::string& task_id);
  void DropStream(const std::string& task_id);

  boost::asio::io_context& io_;
  objectstore::ObjectTable* objects_;
  std::unordered_map<std::string, Stream> streams_;
  std::unordered_map<std::string, std::unordered_set<std::string>> by_consumer_;
  // Streams gone recently: a producer asking for credit after its caller let
  // go and the stream was forgotten is told to stop.
  std::deque<std::string> closed_order_;
  std::unordered_set<std::string> closed_;
};

}  // namespace phalanx::scheduler
