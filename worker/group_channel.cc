#include "worker/group_channel.h"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/frame.h"
#include "core/ids.h"
#include "core/proto/phalanx.pb.h"

namespace phalanx {

namespace {

constexpr size_t kKeepFinished = 4096;  // calls remembered as over (their late messages are dropped)
constexpr auto kInterruptSlice = std::chrono::milliseconds(100);
// How long a wait polls without sleeping (yielding the core between polls)
// before it sleeps in poll: a small collective's next message usually comes
// within it, and a wake-up from sleep costs more than the message (8 ranks
// on 2 cores, 1 KiB allreduce: 0.5-0.9 ms with 500 us, 0.6-0.8 with 50 us,
// 1.4 sleeping at once). A ring's pieces come every few ms: it spins 500 us
// of each, which the 32 MiB figure does not notice.
constexpr auto kSpin = std::chrono::microseconds(500);

constexpr size_t kPipesPerRank = 16 << 20;  // shared memory a rank's pipes may take, at most

// PHALANX_GROUP_SHM=0: ranks on one node keep to their Unix sockets (for A/B runs).
const bool kSharedMemory = [] {
  const char* v = std::getenv("PHALANX_GROUP_SHM");
  return v == nullptr || std::string(v) != "0";
}();

FrameHeader Header(uint16_t type, uint64_t request_id) {
  FrameHeader h;
  h.type = type;
  h.request_id = request_id;
  return h;
}

}  // namespace

Result<std::unique_ptr<GroupChannel>> GroupChannel::Open(Options options) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) + " of a group of " +
                                   std::to_string(options.world));
  }
  std::unique_ptr<GroupChannel> ch(new GroupChannel(std::move(options)));
  if (ch->o_.world == 1) return ch;
  if (!ch->o_.session_dir.empty()) {
    std::string path = ch->o_.session_dir + "/group-" + ToHex(SecureRandomBytes(8)) + ".sock";
    if (ch->io_.ListenUnix(path).ok()) {
      ch->unix_path_ = path;
      ch->addresses_.push_back("unix:" + path);
    }
  }
  if (!ch->o_.node_address.empty()) {
    PHALANX_ASSIGN_OR_RETURN(int port, ch->io_.ListenTcp(ch->o_.node_address));
    ch->addresses_.push_back("tcp:" + ch->o_.node_address + ":" + std::to_string(port));
  }
  if (ch->addresses_.empty()) return Status::Unavailable("this process has no address other ranks can reach");
  return ch;
}

GroupChannel::GroupChannel(Options options)
    : o_(std::move(options)),
      io_(o_.token, o_.tls, [this](uint64_t c, bool, std::vector<Frame>& f) { OnFrames(c, f); },
          [this](uint64_t c, const Status& why) { OnClose(c, why); }),
      accepted_(o_.world, 0),
      links_(o_.world),
      hello_from_(o_.world, false),
      gone_(o_.world) {}

GroupChannel::~GroupChannel() {
  io_.Stop();
  std::lock_guard<std::mutex> l(call_mu_);
  links_.clear();
  if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
}

std::string GroupChannel::Name(int r) const {
  std::lock_guard<std::mutex> l(mu_);
  if (r >= 0 && static_cast<size_t>(r) < names_.size() && !names_[r].empty()) return names_[r];
  return "rank " + std::to_string(r);
}

std::string GroupChannel::Mismatch(int from, const std::string& theirs, const std::string& ours) const {
  return Name(from) + " called " + theirs + " where " + Name(o_.rank) + " called " + ours +
         ": every rank must make the same calls in the same order, with arrays of one dtype and shape";
}

int GroupChannel::shared_memory_links() const {
  std::lock_guard<std::mutex> l(call_mu_);
  int n = 0;
  for (const auto& link : links_) n += link && link->shared_memory() ? 1 : 0;
  return n;
}

// ---- Forming ----

Status GroupChannel::Connect(const std::vector<Peer>& peers, const std::string& nonce, int64_t timeout_ms) {
  if (peers.size() != static_cast<size_t>(o_.world)) {
    return Status::InvalidArgument("Connect takes every rank's addresses (" + std::to_string(o_.world) + ")");
  }
  const Deadline deadline = DeadlineAfterMs(timeout_ms);
  {
    std::lock_guard<std::mutex> l(mu_);
    nonce_ = nonce;
    for (const auto& p : peers) names_.push_back(p.name);
    std::vector<std::pair<uint64_t, std::string>> early;
    early.swap(early_hellos_);
    for (auto& [conn, body] : early) CheckHello(conn, body);
  }
  std::lock_guard<std::mutex> call(call_mu_);
  for (int r = 0; r < o_.rank; ++r) PHALANX_RETURN_IF_ERROR(Dial(r, peers[r], deadline));
  // The higher ranks dial this one; each hello binds its connection (OnFrames).
  std::vector<uint64_t> accepted;
  {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      std::string missing;
      for (int r = o_.rank + 1; r < o_.world; ++r) {
        if (accepted_[r] == 0) missing += (missing.empty() ? "" : ", ") + names_[r];
      }
      if (missing.empty()) break;
      if (Clock::now() >= deadline) {
        return Status::TimedOut("these ranks did not connect within " + std::to_string(timeout_ms) + " ms: " +
                                missing);
      }
      cv_.wait_until(l, std::min(deadline, Clock::now() + kInterruptSlice));
    }
    accepted = accepted_;
  }
  for (int r = o_.rank + 1; r < o_.world; ++r) PHALANX_RETURN_IF_ERROR(Accepted(r, accepted[r], deadline));
  // Each lower rank answers this one's hello once it has the connection in hand.
  while (true) {
    std::string missing;
    for (int r = 0; r < o_.rank; ++r) {
      if (!gone_[r].empty()) return Status::Unavailable(gone_[r]);
      if (!hello_from_[r]) missing += (missing.empty() ? "" : ", ") + Name(r);
    }
    if (missing.empty()) break;
    if (Clock::now() >= deadline) {
      return Status::TimedOut("these ranks did not answer within " + std::to_string(timeout_ms) + " ms: " + missing);
    }
    PHALANX_RETURN_IF_ERROR(Poll(deadline));
  }
  return Status::OK();
}

Status GroupChannel::Dial(int r, const Peer& peer, Deadline deadline) {
  // A rank on this node by its Unix socket, any other by TCP.
  Status last = Status::Unavailable(Name(r) + " gave no address this process can reach");
  for (const auto& a : peer.addresses) {
    int64_t left = std::max<int64_t>(1, MsLeft(deadline));
    Result<DirectIo::Socket> got = Status::Unavailable("");
    if (a.rfind("unix:", 0) == 0) {
      if (peer.node_id != o_.node_id) continue;
      got = io_.DialUnix(a.substr(5), left);
    } else if (a.rfind("tcp:", 0) == 0) {
      auto colon = a.rfind(':');
      got = io_.DialTcp(a.substr(4, colon - 4), std::atoi(a.c_str() + colon + 1), left);
    } else {
      continue;
    }
    if (!got.ok()) {
      last = Status(got.status().code(), "cannot connect to " + Name(r) + " at " + a + ": " + got.status().message());
      continue;
    }
    links_[r] = std::make_unique<GroupSocket>(std::move(got.value()));
    if (!links_[r]->tcp()) links_[r]->AwaitPipes();  // (the answer brings shared memory)
    return SendHello(r);
  }
  return last;
}

Status GroupChannel::SendHello(int r) {
  rpc::GroupHello hello;
  hello.set_group(o_.group);
  hello.set_nonce(nonce_);
  hello.set_rank(o_.rank);
  if (r > o_.rank && !links_[r]->tcp() && kSharedMemory) {  // an answer on this node: with the pair's shared memory
    // Each way of a pair holds a message of a few MiB whole while a rank's pipes stay within
    // kPipesPerRank (pages are touched as the bytes come).
    size_t capacity = kPipesPerRank / (2 * static_cast<size_t>(o_.world - 1));
    return links_[r]->OfferPipes(Header(rpc::GROUP_HELLO, 0), hello.SerializeAsString(), capacity);
  }
  return links_[r]->Write(Header(rpc::GROUP_HELLO, 0), hello.SerializeAsString(), nullptr, 0);
}

Status GroupChannel::Accepted(int r, uint64_t conn, Deadline deadline) {
  auto s = io_.Detach(conn, std::max<int64_t>(1, MsLeft(deadline)));
  if (!s.ok()) return Status(s.status().code(), Name(r) + ": " + s.status().message());
  links_[r] = std::make_unique<GroupSocket>(std::move(s.value()));
  return SendHello(r);
}

void GroupChannel::OnFrames(uint64_t conn, std::vector<Frame>& frames) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& f : frames) {
    bool bound = std::find(accepted_.begin(), accepted_.end(), conn) != accepted_.end();
    if (bound || f.header.type != rpc::GROUP_HELLO) {
      io_.Close(conn);  // a hello, then nothing until the connection is handed over
      return;
    }
    CheckHello(conn, f.body);
  }
}

void GroupChannel::CheckHello(uint64_t conn, const std::string& body) {
  if (nonce_.empty()) {
    early_hellos_.emplace_back(conn, body);
    return;
  }
  rpc::GroupHello h;
  if (!h.ParseFromString(body) || h.group() != o_.group || h.nonce() != nonce_ || h.rank() <= o_.rank ||
      h.rank() >= o_.world || accepted_[h.rank()] != 0) {
    io_.Close(conn);  // another group, an older forming of this one, or a rank that is connected already
    return;
  }
  accepted_[h.rank()] = conn;
  cv_.notify_all();
}

void GroupChannel::OnClose(uint64_t conn, const Status&) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& a : accepted_) {
    if (a == conn) a = 0;  // (closed before it was handed over: Connect waits for it again)
  }
  early_hellos_.erase(std::remove_if(early_hellos_.begin(), early_hellos_.end(),
                                     [conn](const auto& e) { return e.first == conn; }),
                      early_hellos_.end());
}

// ---- Calls ----

Status GroupChannel::Poll(Deadline until) {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  bool buffered = false;  // something to do without waiting
  for (int r = 0; r < o_.world; ++r) {
    if (!links_[r]) continue;
    fds.push_back(pollfd{links_[r]->fd(), static_cast<short>(POLLIN | (links_[r]->wants_pollout() ? POLLOUT : 0)), 0});
    ranks.push_back(r);
    buffered = buffered || links_[r]->has_input() || links_[r]->can_flush();
  }
  auto now = Clock::now();
  bool sleep = !buffered && now >= spin_until_;
  for (size_t i = 0; sleep && i < ranks.size(); ++i) sleep = links_[ranks[i]]->PrepareToSleep();
  auto wake = sleep ? std::min(until, now + kInterruptSlice) : now;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(Clock::duration::zero(), wake - now));
  timespec ts{static_cast<time_t>(ns.count() / 1000000000), static_cast<long>(ns.count() % 1000000000)};
  int rc = ::ppoll(fds.data(), fds.size(), &ts, nullptr);
  if (rc < 0 && errno != EINTR) return Status::Internal(std::string("poll failed: ") + std::strerror(errno));
  for (int r : ranks) links_[r]->Woke();
  for (size_t i = 0; rc >= 0 && i < fds.size(); ++i) {
    const int r = ranks[i];
    GroupSocket* s = links_[r].get();
    if ((fds[i].revents & POLLOUT) || s->can_flush()) {
      Status st = s->Flush();
      if (!st.ok()) {
        Gone(r, st.message());
        continue;
      }
    }
    if ((fds[i].revents & (POLLIN | POLLERR | POLLHUP)) || s->has_input()) {
      std::vector<Frame> frames;
      Status st = s->Read(&frames, spares_.get());
      Dispatch(r, frames);
      if (!st.ok()) Gone(r, st.message());
    }
  }
  if (rc == 0 && !sleep && !buffered) {
    ::sched_yield();  // (spinning: let the ranks that share this core run)
    return Status::OK();
  }
  if (rc == 0 && o_.interrupted && Clock::now() < until) return o_.interrupted();
  return Status::OK();
}

void GroupChannel::Dispatch(int from, std::vector<Frame>& frames) {
  for (auto& f : frames) {
    if (f.header.type == rpc::GROUP_DATA) {
      File(from, f.header.request_id, std::move(f.body));
    } else if (f.header.type == rpc::GROUP_ABORT) {
      if (!finished_.count(f.header.request_id)) FailCall(f.header.request_id, f.body);
    } else if (f.header.type == rpc::GROUP_HELLO && from < o_.rank && !hello_from_[from]) {
      rpc::GroupHello h;
      if (!h.ParseFromString(f.body) || h.group() != o_.group || h.nonce() != nonce_ || h.rank() != from) {
        Gone(from, Name(from) + " answered with the hello of another group or forming");
        return;
      }
      hello_from_[from] = true;
    } else {
      Gone(from, Name(from) + " sent a frame of type " + std::to_string(f.header.type) + " out of turn");
      return;
    }
  }
}

void GroupChannel::Gone(int r, const std::string& why) {
  links_[r].reset();
  if (gone_[r].empty()) {
    gone_[r] = Name(r) + " is gone: its connection closed (its process exited, left the group, or its node is "
                         "unreachable: " + why + ")";
  }
}

void GroupChannel::File(int from, uint64_t call, std::string body) {
  if (finished_.count(call)) return;  // a call that failed here: what its peers still send goes
  std::string what;
  size_t offset = 0;
  if (!Unpack(body, &what, &offset)) {
    FailCall(call, Name(from) + " sent a malformed message");
    return;
  }
  auto e = expected_.find(call);
  if (e != expected_.end() && e->second != what) {
    FailCall(call, Mismatch(from, what, e->second));
    return;
  }
  inbox_[{from, call}].push_back(std::move(body));
}

Status GroupChannel::SendParts(int to, uint64_t call, const std::string& what, const std::vector<Part>& parts) {
  std::lock_guard<std::mutex> l(call_mu_);
  if (!links_[to]) {
    return Status(StatusCode::kCollectiveFailed, gone_[to].empty() ? Name(to) + " is not connected" : gone_[to]);
  }
  std::string head(4 + what.size(), '\0');
  uint32_t len = static_cast<uint32_t>(what.size());
  std::memcpy(head.data(), &len, 4);
  std::memcpy(head.data() + 4, what.data(), what.size());
  Status st = links_[to]->Write(Header(rpc::GROUP_DATA, call), head, parts);
  if (!st.ok()) {
    Gone(to, st.message());
    return Status(StatusCode::kCollectiveFailed, gone_[to]);
  }
  return Status::OK();
}

Status GroupChannel::Flush(Deadline deadline) {
  std::lock_guard<std::mutex> l(call_mu_);
  while (true) {
    int waiting = -1;
    for (int r = 0; r < o_.world && waiting < 0; ++r) {
      if (links_[r] && links_[r]->pending()) waiting = r;
    }
    if (waiting < 0) return Status::OK();
    if (Clock::now() >= deadline) {
      return Status::TimedOut(Name(o_.rank) + " could not send its bytes to " + Name(waiting) +
                              " by the call's deadline (it does not read)");
    }
    PHALANX_RETURN_IF_ERROR(Poll(deadline));
  }
}

Result<GroupChannel::Message> GroupChannel::Recv(int from, uint64_t call, const std::string& what,
                                                 Deadline deadline, bool whole_group) {
  std::lock_guard<std::mutex> l(call_mu_);
  if (expected_.emplace(call, what).second) {
    // Messages that came before this rank reached the call: checked now.
    for (int r = 0; r < o_.world; ++r) {
      auto it = inbox_.find({r, call});
      if (it == inbox_.end() || it->second.empty()) continue;
      std::string theirs;
      size_t offset;
      if (Unpack(it->second.front(), &theirs, &offset) && theirs != what) FailCall(call, Mismatch(r, theirs, what));
    }
  }
  waiting_for_ = from;
  spin_until_ = Clock::now() + kSpin;
  struct Clear {
    std::atomic<int>& w;
    ~Clear() { w = -1; }
  } clear{waiting_for_};
  while (true) {
    auto f = failed_.find(call);
    if (f != failed_.end()) return Status(StatusCode::kCollectiveFailed, f->second);
    auto it = inbox_.find({from, call});
    if (it != inbox_.end() && !it->second.empty()) {
      Message m;
      m.body = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) inbox_.erase(it);
      std::string theirs;
      Unpack(m.body, &theirs, &m.offset);
      return m;
    }
    if (!gone_[from].empty()) return Status(StatusCode::kCollectiveFailed, gone_[from]);
    if (whole_group) {
      for (const auto& g : gone_) {
        if (!g.empty()) return Status(StatusCode::kCollectiveFailed, g);
      }
    }
    if (Clock::now() >= deadline) {
      return Status::TimedOut(Name(o_.rank) + " waited for " + Name(from) + " until the call's deadline");
    }
    PHALANX_RETURN_IF_ERROR(Poll(deadline));
  }
}

void GroupChannel::Recycle(std::string body) {
  spares_->Give(std::move(body));
}

void GroupChannel::Abort(uint64_t call, const std::string& why) {
  std::lock_guard<std::mutex> l(call_mu_);
  if (finished_.count(call)) return;
  const std::string body = why.substr(0, kSmallBody / 2);
  for (int r = 0; r < o_.world; ++r) {
    if (links_[r]) (void)links_[r]->Write(Header(rpc::GROUP_ABORT, call), body, nullptr, 0);
  }
}

void GroupChannel::Done(uint64_t call) {
  std::lock_guard<std::mutex> l(call_mu_);
  expected_.erase(call);
  failed_.erase(call);
  for (int r = 0; r < o_.world; ++r) inbox_.erase({r, call});
  if (finished_.insert(call).second) finished_order_.push_back(call);
  while (finished_order_.size() > kKeepFinished) {
    finished_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

}  // namespace phalanx
