// Trace: each process's recent events for the timeline (docs/observability.md).
//
// A process (raylet, worker) keeps a fixed-size ring of fixed-size records
// in a file, TraceDir(SESSION)/NODE-PID.ring (in memory: /dev/shm), mapped
// into its memory: writing an event is a clock read, an atomic
// increment and a 128-byte copy, with no system call and no lock, cheap
// enough to leave on (PHALANX_TRACE=0 turns it off). The ring outlives its
// process (the file stays), so the timeline still shows what a crashed
// worker did last. Collection reads the files: the raylet of each node reads
// its node's rings when asked (scheduler/node_trace.cc), and nothing is sent
// anywhere until someone asks.
//
// A reader may find a record being written: each record's `seq` is written
// last (release) with its slot's position + 1, and a reader keeps a record
// only when `seq` is the same before and after copying it. A writer
// preempted between taking its position and writing its record, while
// others go once round the whole ring, may leave its older record over a
// newer one in that slot: the reader drops it (its `seq` is older than the
// ring), so a ring read holds the newest records less at most one per
// writer that lagged that far.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace phalanx::trace {

enum Kind : uint16_t {
  kNone = 0,
  // raylet: a task's time on this node. ts: queued here; a: dispatched to a
  // worker (ns, 0: never); dur: to its end. id: task id; b: the worker's pid
  // (0: sent to another node, whose id is in `peer`). flags: kFailed.
  kTask = 1,
  // worker: one task or actor call run. id: task id; dur: run time.
  kExec = 2,
  // raylet: an object copied here. id: object id; peer: the node it came
  // from; a: bytes; b: chunks (in flight: the bytes here so far). flags: kFailed.
  kTransfer = 3,
  // raylet: a reduce link placed here. id: the reduce's output id; a: bytes;
  // b: inputs combined here (1, or 0 for the final copy). name: the op.
  kReduceStep = 4,
  // raylet: an allreduce's result put together here from its slices. id: output id; a: bytes; b: slices.
  kAllreduceSlice = 5,
  // (6: none. A broadcast hop is the kTransfer of an object copied to several nodes.)
  // raylet: a task handed to a worker takes an object as an argument. id:
  // the object id; a and b: the task's id (its 16 bytes as two words, as
  // they lie in memory). For the timeline's arrows from producer to consumer.
  kArgument = 7,
};

enum Flags : uint16_t {
  kFailed = 1,
  kActorCall = 2,
  // Not in any ring: the raylet makes such a record when asked, for a task,
  // copy or collective step still running (dur: so far). See AppendRecord.
  kInFlight = 4,
};

struct Record {
  std::atomic<uint64_t> seq;  // position + 1 once written (0: never written)
  uint64_t ts_ns;             // wall clock (CLOCK_REALTIME), ns
  uint64_t dur_ns;
  uint64_t a;
  uint64_t b;
  uint16_t kind;
  uint16_t flags;
  uint32_t tid;               // the writing thread (Linux tid)
  char id[20];                // task or object id (bytes, zero-padded)
  char peer[8];               // another node's id, first 8 bytes
  char name[52];              // function or op name, NUL-padded (a longer one: ".." and its end)
};
static_assert(sizeof(Record) == 128, "one record is 128 bytes");

struct Header {
  char magic[8];          // "PHXTRACE"
  uint32_t version;       // 1
  uint32_t record_size;   // sizeof(Record)
  uint64_t capacity;      // records
  std::atomic<uint64_t> next;  // the next position to write (monotonic)
  int32_t pid;
  uint32_t reserved;
  char node[16];          // node id (bytes)
  char label[64];         // "raylet", "worker", "driver" ... (NUL-padded)
  uint64_t start_ns;      // when the process opened the ring
  char pad[256 - 8 - 4 - 4 - 8 - 8 - 4 - 4 - 16 - 64 - 8];
};
static_assert(sizeof(Header) == 256, "the header is 256 bytes");

class Ring {
 public:
  // Creates (or replaces) the ring file at `path` with room for `capacity` records.
  static Result<std::unique_ptr<Ring>> Create(const std::string& path, uint64_t capacity, const std::string& node_id,
                                              const std::string& label);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Thread-safe; never blocks.
  void Emit(Kind kind, uint64_t ts_ns, uint64_t dur_ns, const std::string& id, const std::string& name, uint64_t a = 0,
            uint64_t b = 0, const std::string& peer = std::string(), uint16_t flags = 0);
  const std::string& path() const { return path_; }

 private:
  Ring(std::string path, void* base, size_t bytes);
  std::string path_;
  void* base_;
  size_t bytes_;
  Header* header_;
  Record* records_;
};

// The wall clock in ns.
uint64_t NowNs();

// This process's ring, opened once (later calls keep the first): under
// session_dir/trace. Does nothing when PHALANX_TRACE=0 or it cannot be made
// (a warning says why). `capacity` 0: the default (16384 records, 2 MiB).
void OpenProcessRing(const std::string& session_dir, const std::string& node_id, const std::string& label,
                     uint64_t capacity = 0);
// Stops writing into this process's ring (the file stays).
void CloseProcessRing();
// The process's ring, or null (tracing off, or not opened).
Ring* ProcessRing();
inline void Emit(Kind kind, uint64_t ts_ns, uint64_t dur_ns, const std::string& id, const std::string& name,
                 uint64_t a = 0, uint64_t b = 0, const std::string& peer = std::string(), uint16_t flags = 0) {
  if (Ring* r = ProcessRing()) r->Emit(kind, ts_ns, dur_ns, id, name, a, b, peer, flags);
}

// A record in its 128-byte form appended to `out`, as Emit writes it (seq
// 1): what the raylet sends for work still in flight when asked.
void AppendRecord(std::string* out, Kind kind, uint64_t ts_ns, uint64_t dur_ns, const std::string& id,
                  const std::string& name, uint64_t a = 0, uint64_t b = 0, const std::string& peer = std::string(),
                  uint16_t flags = 0);

// Reading rings (collection). One ring file's records written at or after
// `since_ns`, oldest first, in their raw 128-byte form, and its header.
struct RingDump {
  std::string path;
  int32_t pid = 0;
  std::string node;      // node id (bytes)
  std::string label;
  uint64_t start_ns = 0;
  uint64_t written = 0;  // records written since the ring was made (older ones were overwritten)
  uint64_t capacity = 0;  // records the ring holds
  std::string records;   // n * sizeof(Record) bytes
};
Result<RingDump> ReadRing(const std::string& path, uint64_t since_ns);
// Where the session's rings live: in memory (/dev/shm/phalanx-SESSION-trace,
// tmpfs) where there is one, so that writing an event never faults into a
// disk file system's block allocation or writeback; else session_dir/trace.
// PHALANX_TRACE_DIR=DIR puts them under DIR instead.
std::string TraceDir(const std::string& session_dir);
// Every ring file of the session of `node_id` (all nodes: empty).
std::vector<std::string> RingFiles(const std::string& session_dir, const std::string& node_id);
// Deletes the ring files of `node_id`'s processes that have exited, but the
// `keep` most recently written (what crashed workers did stays a while).
// Returns how many went.
size_t PruneExitedRings(const std::string& session_dir, const std::string& node_id, size_t keep);

}  // namespace phalanx::trace
