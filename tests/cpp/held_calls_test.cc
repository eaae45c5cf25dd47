#include "worker/held_calls.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

namespace phalanx {

// The store, as HeldCalls sees it: objects become ready when the test says so.
class FakeObjects : public HeldCalls::Objects {
 public:
  void MakeReady(const std::string& id) {
    std::lock_guard<std::mutex> l(mu_);
    ready_.insert(id);
    cv_.notify_all();
  }
  Result<std::vector<std::string>> WaitAny(const std::vector<std::string>& ids, int64_t timeout_ms) override {
    std::unique_lock<std::mutex> l(mu_);
    std::vector<std::string> out;
    cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] {
      out.clear();
      for (const auto& id : ids) {
        if (ready_.count(id)) out.push_back(id);
      }
      return !out.empty();
    });
    return out;
  }
  Result<std::vector<rpc::ObjectValue>> GetNow(const std::vector<std::string>& ids) override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<rpc::ObjectValue> out(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      out[i].set_object_id(ids[i]);
      out[i].set_state(ready_.count(ids[i]) ? rpc::OBJ_INLINE : rpc::OBJ_PENDING);
      out[i].set_data("value of " + ids[i]);
    }
    return out;
  }
  void Unpin(const std::string&) override {}
  bool Cancelled(const std::string& task_id) override {
    std::lock_guard<std::mutex> l(mu_);
    return cancelled_.count(task_id) > 0;
  }
  void Cancel(const std::string& task_id) {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_.insert(task_id);
  }
  void Wake() override {
    std::lock_guard<std::mutex> l(mu_);
    ++wakes_;
    cv_.notify_all();
  }
  // Waits (up to 5 s) until HeldCalls woke the taker `n` times in all.
  bool WaitWakes(int n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(5), [&] { return wakes_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> ready_, cancelled_;
  int wakes_ = 0;
};

HeldCalls::Call MakeCall(uint64_t caller, const std::string& task_id, const std::vector<std::string>& refs) {
  HeldCalls::Call c;
  c.caller = caller;
  c.task.mutable_spec()->set_task_id(task_id);
  for (const auto& r : refs) c.task.mutable_spec()->add_args()->set_object_id(r);
  c.task.mutable_spec()->add_args()->set_data("inline");
  return c;
}

// What the taker (NextTask) does with a call that came: goes now, or is held.
std::string Arrive(HeldCalls& held, HeldCalls::Call c) {
  std::string id = c.task.spec().task_id();
  if (!held.MustWait(c.caller)) {
    auto ready = held.TryResolve(&c);
    EXPECT_TRUE(ready.ok());
    if (ready.value()) return id;
  }
  held.Hold(std::move(c));
  return "";
}

TEST(HeldCallsTest, ACallWaitingForItsArgumentHoldsBackOnlyItsOwnCallersLaterCalls) {
  FakeObjects objects;
  HeldCalls held(&objects);
  EXPECT_EQ(Arrive(held, MakeCall(1, "slow", {"x"})), "");
  EXPECT_EQ(Arrive(held, MakeCall(1, "after-slow", {})), "");  // behind its caller's first
  EXPECT_EQ(Arrive(held, MakeCall(2, "other", {})), "other");  // another caller's: at once
  EXPECT_FALSE(held.TakeReady().has_value());
  objects.MakeReady("x");
  ASSERT_TRUE(objects.WaitWakes(1));
  auto first = held.TakeReady();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->task.spec().task_id(), "slow");
  ASSERT_EQ(first->task.ref_args_size(), 1);
  EXPECT_EQ(first->task.ref_args(0).data(), "value of x");
  auto second = held.TakeReady();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->task.spec().task_id(), "after-slow");
  EXPECT_FALSE(held.MustWait(1));  // all taken: its next call goes at once
  EXPECT_EQ(held.num_held(), 0u);
}

TEST(HeldCallsTest, AnUnorderedActorTakesEachCallOnceItsOwnArgumentsAreReady) {
  FakeObjects objects;
  HeldCalls held(&objects);
  held.set_unordered(true);
  EXPECT_EQ(Arrive(held, MakeCall(1, "a", {"x"})), "");
  EXPECT_EQ(Arrive(held, MakeCall(1, "b", {"y"})), "");
  EXPECT_EQ(Arrive(held, MakeCall(1, "c", {})), "c");  // nothing to wait for
  objects.MakeReady("y");
  ASSERT_TRUE(objects.WaitWakes(1));
  auto b = held.TakeReady();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->task.spec().task_id(), "b");
  EXPECT_FALSE(held.TakeReady().has_value());  // a still waits for x
  objects.MakeReady("x");
  ASSERT_TRUE(objects.WaitWakes(2));
  auto a = held.TakeReady();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->task.spec().task_id(), "a");
}

TEST(HeldCallsTest, ACallCancelledWhileItWaitsGoesCancelledAndTheCallsBehindItFollow) {
  FakeObjects objects;
  HeldCalls held(&objects);
  Arrive(held, MakeCall(1, "never", {"z"}));
  Arrive(held, MakeCall(1, "next", {}));
  objects.Cancel("never");
  ASSERT_TRUE(objects.WaitWakes(1));
  auto c = held.TakeReady();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->task.spec().task_id(), "never");
  EXPECT_TRUE(c->task.cancelled());
  ASSERT_EQ(c->task.ref_args_size(), 1);  // (the worker reads one value per ref argument)
  EXPECT_EQ(c->task.ref_args(0).state(), rpc::OBJ_LOST);
  auto next = held.TakeReady();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->task.spec().task_id(), "next");
}

TEST(HeldCallsTest, ACallersCallsGoWhenItsConnectionCloses) {
  FakeObjects objects;
  HeldCalls held(&objects);
  Arrive(held, MakeCall(1, "slow", {"x"}));
  Arrive(held, MakeCall(1, "after", {}));
  Arrive(held, MakeCall(2, "other", {"x"}));
  auto dropped = held.DropCaller(1);
  EXPECT_EQ(dropped.size(), 2u);
  EXPECT_FALSE(held.MustWait(1));
  EXPECT_EQ(held.num_held(), 1u);
  objects.MakeReady("x");
  ASSERT_TRUE(objects.WaitWakes(1));
  auto c = held.TakeReady();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->task.spec().task_id(), "other");
  EXPECT_FALSE(held.TakeReady().has_value());
}

}  // namespace phalanx
