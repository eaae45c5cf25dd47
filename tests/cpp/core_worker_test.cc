// The core worker against a fake raylet: a Unix socket served by a
// FramedConnection that registers the worker (with a memfd as the object
// store), logs every frame it reads, and answers what a test tells it to.
// What is checked is what the raylet sees on the wire: reference changes
// before the messages that depend on them, no round trip for values the
// process holds, a silent raylet named after the grace, recalled tasks.
// Also the RefCounter alone.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <thread>

#include "core/framed_connection.h"
#include "core/ids.h"
#include "core/proto/phalanx.pb.h"
#include "core/value_format.h"
#include "tests/cpp/test_util.h"
#include "worker/core_worker.h"

namespace phalanx {
namespace {

namespace asio = boost::asio;

struct Seen {
  uint16_t type;
  std::string body;
};

class FakeRaylet {
 public:
  // Replies: type -> the reply's body (a type not in it gets no answer).
  explicit FakeRaylet(const std::string& path, std::map<uint16_t, std::string> replies = {})
      : replies_(std::move(replies)), acceptor_(io_, asio::local::stream_protocol::endpoint(path)) {
    acceptor_.async_accept([this](auto ec, asio::local::stream_protocol::socket s) {
      if (ec) return;
      FramedConnection::Socket g(io_);
      g.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), s.release());
      conn_ = std::make_shared<FramedConnection>(std::move(g), "test worker");
      conn_->Start([this](const FrameHeader& h, const char* body, size_t len) { OnFrame(h, std::string(body, len)); },
                   [this](const Status&) {
                     std::lock_guard<std::mutex> l(mu_);
                     closed_ = true;
                     cv_.notify_all();
                   });
    });
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeRaylet() {
    io_.stop();
    thread_.join();
  }

  // Frames pushed to the worker, from the raylet's thread.
  void Push(std::vector<std::string> frames) {
    asio::post(io_, [this, frames = std::move(frames)] {
      for (const auto& f : frames) conn_->Send(f);
    });
  }
  // Waits (up to 10 s) until `pred` holds over the frames seen so far.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(10), [&] { return pred(seen_, closed_); });
  }
  std::vector<Seen> seen() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }
  size_t Count(uint16_t type) {
    std::lock_guard<std::mutex> l(mu_);
    size_t n = 0;
    for (const auto& s : seen_) n += s.type == type;
    return n;
  }

 private:
  void OnFrame(const FrameHeader& h, std::string body) {
    if (h.type == rpc::REGISTER_CLIENT) return Register(h);
    {
      std::lock_guard<std::mutex> l(mu_);
      seen_.push_back(Seen{h.type, body});
    }
    cv_.notify_all();
    auto reply = replies_.find(h.type);
    if (reply != replies_.end()) conn_->Send(EncodeRaw(h.type, h.request_id, reply->second));
  }
  void Register(const FrameHeader& h) {
    int fd = ::memfd_create("fake-store", MFD_CLOEXEC);
    ASSERT_EQ(::ftruncate(fd, kStoreBytes), 0);
    rpc::RegisterClientReply r;
    r.set_store_capacity(kStoreBytes);
    r.set_node_id(std::string(16, 'n'));
    r.set_inline_threshold(1024);
    ASSERT_TRUE(conn_->SendWithFd(EncodeFrame(rpc::REGISTER_CLIENT, kReplyFlag, h.request_id, r), fd).ok());
    ::close(fd);
  }
  static std::string EncodeRaw(uint16_t type, uint64_t request_id, const std::string& body) {
    FrameHeader h{};
    h.type = type;
    h.flags = kReplyFlag;
    h.request_id = request_id;
    h.length = static_cast<uint32_t>(body.size());
    std::string out(kFrameHeaderSize, '\0');
    EncodeHeader(h, out.data());
    return out + body;
  }

  static constexpr uint64_t kStoreBytes = 1 << 20;
  std::map<uint16_t, std::string> replies_;
  asio::io_context io_;
  asio::local::stream_protocol::acceptor acceptor_;
  std::shared_ptr<FramedConnection> conn_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Seen> seen_;  // guarded by mu_
  bool closed_ = false;     // guarded by mu_
  std::thread thread_;
};

class CoreWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::TempDir("core-worker-test"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Socket() const { return dir_ + "/raylet.sock"; }
  std::unique_ptr<CoreWorker> Connect(int64_t grace_ms = 10000, bool is_worker = false) {
    CoreWorkerOptions o;
    o.socket_path = Socket();
    o.grace_ms = grace_ms;
    o.is_worker = is_worker;
    auto cw = CoreWorker::Connect(o);
    EXPECT_TRUE(cw.ok()) << cw.status().ToString();
    return cw.ok() ? std::move(cw).value() : nullptr;
  }
  std::string dir_;
};

rpc::UpdateRefs RefsOf(const Seen& s) {
  rpc::UpdateRefs m;
  EXPECT_TRUE(m.ParseFromString(s.body));
  return m;
}

TEST_F(CoreWorkerTest, ARefTakenBeforeASubmitReachesTheRayletBeforeIt) {
  FakeRaylet raylet(Socket());
  auto cw = Connect();
  ASSERT_TRUE(cw);
  std::string arg = MakeObjectId(cw->NextTaskId(), 1);
  cw->AddLocalRef(arg);
  rpc::TaskSpec spec;
  spec.set_task_id(cw->NextTaskId());
  spec.add_args()->set_object_id(arg);
  ASSERT_TRUE(cw->SubmitTask(spec).ok());
  ASSERT_TRUE(raylet.WaitFor([](const auto& seen, bool) {
    for (const auto& s : seen) {
      if (s.type == rpc::SUBMIT_TASK) return true;
    }
    return false;
  }));
  auto seen = raylet.seen();
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen[0].type, rpc::UPDATE_REFS);
  ASSERT_EQ(RefsOf(seen[0]).add_size(), 1);
  EXPECT_EQ(RefsOf(seen[0]).add(0), arg);
  EXPECT_EQ(seen[1].type, rpc::SUBMIT_TASK);
}

TEST_F(CoreWorkerTest, ADroppedRefIsToldWithoutAnotherMessageToCarryIt) {
  FakeRaylet raylet(Socket());
  auto cw = Connect();
  ASSERT_TRUE(cw);
  std::string id = MakeObjectId(cw->NextTaskId(), 1);
  cw->AdoptLocalRef(id);  // (the raylet counts this hold already)
  EXPECT_EQ(cw->LocalRefCount(id), 1);
  cw->RemoveLocalRef(id);
  EXPECT_EQ(cw->LocalRefCount(id), 0);
  ASSERT_TRUE(raylet.WaitFor([&](const auto& seen, bool) {
    for (const auto& s : seen) {
      if (s.type == rpc::UPDATE_REFS && RefsOf(s).remove_size() == 1 && RefsOf(s).remove(0) == id) return true;
    }
    return false;
  }));
}

TEST_F(CoreWorkerTest, AHeldValueIsAnsweredWithoutARoundTripAndAskedForOnceItIsDropped) {
  rpc::GetObjectsReply none;
  none.add_objects()->set_state(rpc::OBJ_PENDING);
  FakeRaylet raylet(Socket(), {{rpc::GET_OBJECTS, none.SerializeAsString()}});
  auto cw = Connect();
  ASSERT_TRUE(cw);
  std::string id = cw->NextPutId();
  ASSERT_TRUE(cw->PutInline(id, "value", {}, /*hold=*/true).ok());
  cw->AdoptLocalRef(id);
  for (int i = 0; i < 3; ++i) {
    auto got = cw->Get({id}, 1000);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got.value()[0].state(), rpc::OBJ_INLINE);
    EXPECT_EQ(got.value()[0].data(), "value");
  }
  ASSERT_TRUE(cw->Flush().ok());
  EXPECT_EQ(raylet.Count(rpc::GET_OBJECTS), 0u);
  cw->RemoveLocalRef(id);
  auto got = cw->Get({id}, 0);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value()[0].state(), rpc::OBJ_PENDING);
  EXPECT_EQ(raylet.Count(rpc::GET_OBJECTS), 1u);
}

TEST_F(CoreWorkerTest, ARayletThatDoesNotAnswerIsNamedAfterTheGrace) {
  FakeRaylet raylet(Socket());  // answers nothing
  auto cw = Connect(/*grace_ms=*/200);
  ASSERT_TRUE(cw);
  auto t0 = Clock::now();
  auto r = cw->Stats(100);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("did not answer within 200 ms"), std::string::npos) << r.status().ToString();
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(300));
}

TEST_F(CoreWorkerTest, AMessageLargerThanTheRayletTakesIsRefusedAndTheRestStillGoes) {
  FakeRaylet raylet(Socket());
  auto cw = Connect();
  ASSERT_TRUE(cw);
  std::string big(MaxFrameBody(rpc::GET_ACTOR, 0) + 1, 'x');
  auto refused = cw->GetActor(big, 1000);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("larger than the"), std::string::npos) << refused.status().ToString();
  std::string small = cw->NextPutId();
  ASSERT_TRUE(cw->PutInline(small, "ok", {}, false).ok());
  ASSERT_TRUE(raylet.WaitFor([](const auto& seen, bool) { return !seen.empty(); }));
  ASSERT_TRUE(cw->Flush().ok());
  auto seen = raylet.seen();
  ASSERT_EQ(seen.size(), 1u);
  rpc::PutInline m;
  ASSERT_TRUE(m.ParseFromString(seen[0].body));
  EXPECT_EQ(m.object_id(), small);
}

TEST_F(CoreWorkerTest, RecalledTasksGoBackToTheRayletAndTheOthersRun) {
  FakeRaylet raylet(Socket());
  auto cw = Connect(10000, /*is_worker=*/true);
  ASSERT_TRUE(cw);
  rpc::PushTask first, second;
  first.mutable_spec()->set_task_id(cw->NextTaskId());
  second.mutable_spec()->set_task_id(cw->NextTaskId());
  rpc::TaskIds recall;
  recall.add_task_ids(second.spec().task_id());
  raylet.Push({EncodeFrame(rpc::PUSH_TASK, 0, 0, first), EncodeFrame(rpc::PUSH_TASK, 0, 0, second),
               EncodeFrame(rpc::RECALL_TASKS, 0, 0, recall)});
  auto t = cw->NextTask(5000);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t.value().spec().task_id(), first.spec().task_id());
  auto next = cw->NextTask(200);  // reads what is left: the recall takes the second back
  EXPECT_EQ(next.status().code(), StatusCode::kTimedOut);
  ASSERT_TRUE(raylet.WaitFor([&](const auto& seen, bool) {
    for (const auto& s : seen) {
      rpc::TaskIds gave;
      if (s.type == rpc::TASKS_RECALLED && gave.ParseFromString(s.body) && gave.task_ids_size() == 1) {
        return gave.task_ids(0) == second.spec().task_id();
      }
    }
    return false;
  }));
  rpc::TaskDone done;
  done.set_task_id(first.spec().task_id());
  ASSERT_TRUE(cw->TaskDone(done).ok());
  ASSERT_TRUE(raylet.WaitFor([](const auto& seen, bool) {
    return !seen.empty() && seen.back().type == rpc::TASK_DONE;
  }));
}

TEST_F(CoreWorkerTest, AfterShutdownCallsFailAndTheRayletSeesTheClose) {
  FakeRaylet raylet(Socket());
  auto cw = Connect();
  ASSERT_TRUE(cw);
  cw->Shutdown();
  EXPECT_EQ(cw->Stats(1000).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(raylet.WaitFor([](const auto&, bool closed) { return closed; }));
}

// ---- the RefCounter alone ----

std::vector<uint16_t> FrameTypes(const std::string& bytes) {
  std::vector<uint16_t> out;
  for (size_t off = 0; off + kFrameHeaderSize <= bytes.size();) {
    FrameHeader h = DecodeHeader(bytes.data() + off);
    out.push_back(h.type);
    off += kFrameHeaderSize + h.length;
  }
  return out;
}

TEST(RefCounterTest, OnlyCountsCrossingZeroAreToldAndABalancedPairIsNot) {
  RefCounter refs;
  EXPECT_EQ(refs.Add("a"), RefCounter::Flush::kSoon);  // the first change since the last drain
  EXPECT_EQ(refs.Add("a"), RefCounter::Flush::kNone);
  EXPECT_EQ(refs.Add("b"), RefCounter::Flush::kNone);
  EXPECT_EQ(refs.Remove("b"), RefCounter::Flush::kNone);  // b: added and dropped before any drain
  std::string out;
  refs.DrainInto(&out);
  ASSERT_EQ(FrameTypes(out), std::vector<uint16_t>{rpc::UPDATE_REFS});
  rpc::UpdateRefs m;
  ASSERT_TRUE(m.ParseFromString(out.substr(kFrameHeaderSize)));
  ASSERT_EQ(m.add_size(), 1);
  EXPECT_EQ(m.add(0), "a");
  EXPECT_EQ(m.remove_size(), 0);
  out.clear();
  refs.DrainInto(&out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(refs.Count("a"), 2);
}

TEST(RefCounterTest, ABurstOfDropsAsksForAFlushAtOnce) {
  RefCounter refs;
  for (int i = 0; i < 5000; ++i) refs.Adopt("id" + std::to_string(i));
  RefCounter::Flush last = RefCounter::Flush::kNone;
  int i = 0;
  for (; i < 5000 && last != RefCounter::Flush::kNow; ++i) last = refs.Remove("id" + std::to_string(i));
  EXPECT_EQ(last, RefCounter::Flush::kNow);
  EXPECT_LT(i, 5000);
}

TEST(RefCounterTest, AStoreValueIsMappedOnceAndItsPinLetGoWhenTheLastViewAndRefAreGone) {
  RefCounter refs;
  refs.Adopt("x");
  std::vector<rpc::ObjectValue> out(1);
  rpc::GetObjects ask;
  std::vector<size_t> asked;
  refs.AnswerLocally({"x"}, &out, &ask, &asked);
  ASSERT_EQ(asked.size(), 1u);  // not mapped yet: the raylet is asked
  rpc::GetObjectsReply reply;
  auto* v = reply.add_objects();
  v->set_object_id("x");
  v->set_state(rpc::OBJ_IN_STORE);
  v->set_offset(64);
  v->set_size(8);
  refs.TakeAnswers(&reply, asked, &out);
  EXPECT_EQ(out[0].offset(), 64u);
  asked.clear();
  refs.AnswerLocally({"x"}, &out, &ask, &asked);  // a second view, answered here
  EXPECT_TRUE(asked.empty());
  EXPECT_EQ(refs.Release("x"), RefCounter::Flush::kNone);
  EXPECT_EQ(refs.Release("x"), RefCounter::Flush::kNone);  // views gone, the ref still holds the mapping
  EXPECT_EQ(refs.ReadyHere({"x", "y"}), std::vector<std::string>{"x"});
  refs.Remove("x");
  std::string drained;
  refs.DrainInto(&drained);
  EXPECT_EQ(FrameTypes(drained), (std::vector<uint16_t>{rpc::UPDATE_REFS, rpc::RELEASE_OBJECTS}));
}

TEST(RefCounterTest, AGetWaitsForADirectResultAndStopsWaitingWhenItComes) {
  RefCounter refs;
  refs.ExpectDirect({"r"});
  std::thread deliver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // (the result arrives while the get waits)
    std::vector<rpc::TaskDone> done(1);
    auto* ret = done[0].add_returns();
    ret->set_object_id("r");
    ret->set_data("42");
    refs.DirectResultsCame(&done, 1024);
  });
  ASSERT_TRUE(refs.AwaitDirect({"r"}, DeadlineAfterMs(10000), nullptr).ok());
  deliver.join();
  std::vector<rpc::ObjectValue> out(1);
  rpc::GetObjects ask;
  std::vector<size_t> asked;
  refs.AnswerLocally({"r"}, &out, &ask, &asked);
  EXPECT_TRUE(asked.empty());
  EXPECT_EQ(out[0].data(), "42");
}

TEST(RefCounterTest, AGetOfSeveralDirectResultsEndsAtTheFirstThatFailed) {
  RefCounter refs;
  refs.ExpectDirect({"slow", "bad"});
  std::string error(32, '\0');  // (a task's error: the value header says so)
  const uint32_t head[2] = {value_format::kMagic, value_format::kKindError};
  std::memcpy(error.data(), head, sizeof(head));
  std::vector<rpc::TaskDone> done(1);
  auto* ret = done[0].add_returns();
  ret->set_object_id("bad");
  ret->set_data(error);
  refs.DirectResultsCame(&done, 1024);
  auto t = std::chrono::steady_clock::now();
  ASSERT_TRUE(refs.AwaitDirect({"slow", "bad"}, DeadlineAfterMs(10000), nullptr, /*until_failure=*/true).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t, std::chrono::seconds(5));
  // Without until_failure (a get that locates), it waits for all: here, to its deadline.
  t = std::chrono::steady_clock::now();
  ASSERT_TRUE(refs.AwaitDirect({"slow", "bad"}, DeadlineAfterMs(100), nullptr).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t, std::chrono::milliseconds(90));
}

TEST(RefCounterTest, ResultsARayletReduceAwaitsAreSaidSoOnce) {
  RefCounter refs;
  refs.ExpectDirect({"a", "b", "c"});
  refs.RayletAwaits({"a", "b", "done-already"});  // (only those still on the way count)
  auto came = [&](const std::string& id) {
    std::vector<rpc::TaskDone> done(1);
    done[0].add_returns()->set_object_id(id);
    return refs.DirectResultsCame(&done, 1024);
  };
  EXPECT_FALSE(came("c"));  // nobody's input: it waits for the next batch to the raylet
  EXPECT_TRUE(came("a"));
  refs.ForgetDirect({"b"});  // (handed to the raylet another way)
  refs.ExpectDirect({"b"});
  EXPECT_FALSE(came("b"));
  EXPECT_FALSE(came("a"));  // said once
}

}  // namespace
}  // namespace phalanx
