#include "worker/group_channel.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/frame.h"
#include "core/ids.h"
#include "core/proto/phalanx.pb.h"

namespace phalanx {

namespace {

constexpr size_t kKeepFinished = 4096;  // calls remembered as over (their late messages are dropped)
constexpr auto kInterruptSlice = std::chrono::milliseconds(100);

std::string RawFrame(uint16_t type, uint64_t request_id, const std::string& body) {
  std::string out(kFrameHeaderSize + body.size(), '\0');
  FrameHeader h;
  h.length = static_cast<uint32_t>(body.size());
  h.type = type;
  h.request_id = request_id;
  EncodeHeader(h, out.data());
  std::memcpy(out.data() + kFrameHeaderSize, body.data(), body.size());
  return out;
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
      io_(o_.token, o_.tls, [this](uint64_t c, std::vector<Frame>& f) { OnFrames(c, f); },
          [this](uint64_t c, const Status& why) { OnClose(c, why); }),
      conn_of_(o_.world, 0),
      gone_(o_.world) {}

GroupChannel::~GroupChannel() {
  io_.Stop();
  if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
}

std::string GroupChannel::Name(int r) const {
  std::lock_guard<std::mutex> l(mu_);
  return NameLocked(r);
}

std::string GroupChannel::NameLocked(int r) const {
  if (r >= 0 && static_cast<size_t>(r) < peers_.size() && !peers_[r].name.empty()) return peers_[r].name;
  return "rank " + std::to_string(r);
}

Status GroupChannel::Connect(const std::vector<Peer>& peers, const std::string& nonce, int64_t timeout_ms) {
  if (peers.size() != static_cast<size_t>(o_.world)) {
    return Status::InvalidArgument("Connect takes every rank's addresses (" + std::to_string(o_.world) + ")");
  }
  Deadline deadline = DeadlineAfterMs(timeout_ms);
  std::vector<std::pair<uint64_t, std::string>> early;
  {
    std::lock_guard<std::mutex> l(mu_);
    nonce_ = nonce;
    peers_ = peers;
    early.swap(early_hellos_);
    for (auto& [conn, body] : early) CheckHello(conn, body);
  }
  rpc::GroupHello hello;
  hello.set_group(o_.group);
  hello.set_nonce(nonce);
  hello.set_rank(o_.rank);
  const std::string hello_frame = RawFrame(rpc::GROUP_HELLO, 0, hello.SerializeAsString());
  for (int r = 0; r < o_.rank; ++r) {
    // A rank on this node by its Unix socket, any other by TCP.
    Status last = Status::Unavailable(Name(r) + " gave no address this process can reach");
    uint64_t conn = 0;
    for (const auto& a : peers[r].addresses) {
      int64_t left = std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(
                                              deadline - Clock::now()).count());
      bool same_node = peers[r].node_id == o_.node_id;
      Result<uint64_t> got = Status::Unavailable("");
      if (a.rfind("unix:", 0) == 0) {
        if (!same_node) continue;
        got = io_.ConnectUnix(a.substr(5), left);
      } else if (a.rfind("tcp:", 0) == 0) {
        auto colon = a.rfind(':');
        got = io_.ConnectTcp(a.substr(4, colon - 4), std::atoi(a.c_str() + colon + 1), left);
      } else {
        continue;
      }
      if (got.ok()) {
        conn = got.value();
        break;
      }
      last = Status(got.status().code(), "cannot connect to " + Name(r) + " at " + a + ": " + got.status().message());
    }
    if (conn == 0) return last;
    {
      std::lock_guard<std::mutex> l(mu_);
      conn_of_[r] = conn;
      rank_of_[conn] = r;
    }
    PHALANX_RETURN_IF_ERROR(io_.Send(conn, hello_frame));
  }
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    std::vector<int> missing;
    for (int r = o_.rank + 1; r < o_.world; ++r) {
      if (conn_of_[r] == 0) missing.push_back(r);
    }
    if (missing.empty()) return Status::OK();
    if (Clock::now() >= deadline) {
      std::string names;
      for (int r : missing) names += (names.empty() ? "" : ", ") + NameLocked(r);
      return Status::TimedOut("these ranks did not connect within " + std::to_string(timeout_ms) + " ms: " + names);
    }
    cv_.wait_until(l, std::min(deadline, Clock::now() + kInterruptSlice));
  }
}

void GroupChannel::OnFrames(uint64_t conn, std::vector<Frame>& frames) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& f : frames) {
    auto it = rank_of_.find(conn);
    if (it == rank_of_.end()) {
      if (f.header.type != rpc::GROUP_HELLO) {
        io_.Close(conn);  // nothing but a hello before the rank is known
        return;
      }
      CheckHello(conn, f.body);
      continue;
    }
    const int from = it->second;
    if (f.header.type == rpc::GROUP_DATA) {
      File(from, f.header.request_id, std::move(f.body));
    } else if (f.header.type == rpc::GROUP_ABORT) {
      if (!Finished(f.header.request_id)) FailCall(f.header.request_id, f.body);
    } else {
      io_.Close(conn);
      return;
    }
  }
  cv_.notify_all();
}

void GroupChannel::CheckHello(uint64_t conn, const std::string& body) {
  if (nonce_.empty()) {
    early_hellos_.emplace_back(conn, body);
    return;
  }
  rpc::GroupHello h;
  if (!h.ParseFromString(body) || h.group() != o_.group || h.nonce() != nonce_ || h.rank() <= o_.rank ||
      h.rank() >= o_.world || conn_of_[h.rank()] != 0) {
    io_.Close(conn);  // another group, an older forming of this one, or a rank that is connected already
    return;
  }
  conn_of_[h.rank()] = conn;
  rank_of_[conn] = h.rank();
  cv_.notify_all();
}

void GroupChannel::OnClose(uint64_t conn, const Status& why) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = rank_of_.find(conn);
  if (it == rank_of_.end()) {
    early_hellos_.erase(std::remove_if(early_hellos_.begin(), early_hellos_.end(),
                                       [conn](const auto& e) { return e.first == conn; }),
                        early_hellos_.end());
    return;
  }
  int r = it->second;
  rank_of_.erase(it);
  conn_of_[r] = 0;
  gone_[r] = NameLocked(r) + " is gone: its connection closed (its process exited, left the group, or its node is "
                    "unreachable: " + why.message() + ")";
  cv_.notify_all();
}

std::string GroupChannel::Mismatch(int from, const std::string& theirs, const std::string& ours) const {
  return NameLocked(from) + " called " + theirs + " where " + NameLocked(o_.rank) + " called " + ours +
         ": every rank must make the same calls in the same order, with arrays of one dtype and shape";
}

bool GroupChannel::Finished(uint64_t call) const { return finished_.count(call) > 0; }

void GroupChannel::FailCall(uint64_t call, const std::string& why) {
  failed_.emplace(call, why);  // (the first reason stays)
  cv_.notify_all();
}

void GroupChannel::File(int from, uint64_t call, std::string body) {
  if (Finished(call)) return;  // a call that failed here: what its peers still send goes
  std::string what;
  size_t offset = 0;
  if (!GroupLinks::Unpack(body, &what, &offset)) {
    FailCall(call, NameLocked(from) + " sent a malformed message");
    return;
  }
  auto e = expected_.find(call);
  if (e != expected_.end() && e->second != what) {
    FailCall(call, Mismatch(from, what, e->second));
    return;
  }
  inbox_[{from, call}].push_back(std::move(body));
}

Status GroupChannel::Send(int to, uint64_t call, const std::string& what, const void* data, size_t n) {
  uint64_t conn;
  {
    std::lock_guard<std::mutex> l(mu_);
    conn = conn_of_[to];
    if (conn == 0) {
      return Status(StatusCode::kCollectiveFailed,
                    gone_[to].empty() ? NameLocked(to) + " is not connected" : gone_[to]);
    }
  }
  // One string for the frame: header, then the message as GroupLinks packs it.
  const size_t body = 4 + what.size() + n;
  std::string frame(kFrameHeaderSize + body, '\0');
  FrameHeader h;
  h.length = static_cast<uint32_t>(body);
  h.type = rpc::GROUP_DATA;
  h.request_id = call;
  EncodeHeader(h, frame.data());
  uint32_t len = static_cast<uint32_t>(what.size());
  std::memcpy(frame.data() + kFrameHeaderSize, &len, 4);
  std::memcpy(frame.data() + kFrameHeaderSize + 4, what.data(), what.size());
  if (n > 0) std::memcpy(frame.data() + kFrameHeaderSize + 4 + what.size(), data, n);
  Status st = io_.Send(conn, frame);
  if (!st.ok()) return Status(StatusCode::kCollectiveFailed, "cannot send to " + Name(to) + ": " + st.message());
  return Status::OK();
}

Result<GroupChannel::Message> GroupChannel::Recv(int from, uint64_t call, const std::string& what,
                                                 Deadline deadline, bool whole_group) {
  std::unique_lock<std::mutex> l(mu_);
  if (expected_.emplace(call, what).second) {
    // Messages that came before this rank reached the call: checked now.
    for (int r = 0; r < o_.world; ++r) {
      auto it = inbox_.find({r, call});
      if (it == inbox_.end() || it->second.empty()) continue;
      std::string theirs;
      size_t offset;
      if (GroupLinks::Unpack(it->second.front(), &theirs, &offset) && theirs != what) {
        FailCall(call, Mismatch(r, theirs, what));
      }
    }
  }
  waiting_for_ = from;
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
      GroupLinks::Unpack(m.body, &theirs, &m.offset);
      return m;
    }
    if (!gone_[from].empty()) return Status(StatusCode::kCollectiveFailed, gone_[from]);
    if (whole_group) {
      for (const auto& g : gone_) {
        if (!g.empty()) return Status(StatusCode::kCollectiveFailed, g);
      }
    }
    auto now = Clock::now();
    if (now >= deadline) {
      return Status::TimedOut(NameLocked(o_.rank) + " waited for " + NameLocked(from) + " until the call's deadline");
    }
    cv_.wait_until(l, std::min(deadline, now + kInterruptSlice));
    if (o_.interrupted && Clock::now() < deadline) {
      l.unlock();
      Status st = o_.interrupted();
      l.lock();
      if (!st.ok()) return st;
    }
  }
}

void GroupChannel::Abort(uint64_t call, const std::string& why) {
  std::string body = why.substr(0, kSmallBody / 2);
  std::vector<uint64_t> conns;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (Finished(call)) return;
    for (uint64_t c : conn_of_) {
      if (c != 0) conns.push_back(c);
    }
  }
  const std::string frame = RawFrame(rpc::GROUP_ABORT, call, body);
  for (uint64_t c : conns) (void)io_.Send(c, frame);  // (a rank that is gone needs no telling)
}

void GroupChannel::Done(uint64_t call) {
  std::lock_guard<std::mutex> l(mu_);
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
