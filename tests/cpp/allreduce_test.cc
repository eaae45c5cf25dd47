// Allreduces alone (collectives/allreduce.h) on one node, the way it goes
// without peers: one reduce here, copied into every result, each result
// listed once stored; a failed input or a stop fails every result with the
// reason; bad requests are refused before anything starts; and the slicing
// of the ring (Cuts) covers the value in aligned slices. The ring across
// nodes is tested end to end in tests/python/test_allreduce.py.
#include "collectives/allreduce.h"

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <cstring>
#include <algorithm>
#include <vector>

#include "tests/cpp/array_values.h"

namespace phalanx::collectives {
namespace {

namespace asio = boost::asio;

class AllreduceTest : public ::testing::Test {
 protected:
  AllreduceTest() {
    auto region = objectstore::ShmRegion::Create(128 << 20, "allreduce-test");
    EXPECT_TRUE(region.ok());
    store_ = std::make_unique<objectstore::ObjectStore>(std::move(region).value());
    table_ = std::make_unique<objectstore::ObjectTable>(store_.get());
    // (The first result is the ReduceManager's own: it lists it.)
    auto stored = [this](const std::string& id, uint64_t) { stored_.push_back(id); };
    reduces_ = std::make_unique<ReduceManager>(io_, table_.get(), store_.get(), 64 << 10, nullptr, stored);
    allreduces_ = std::make_unique<Allreduces>(io_, table_.get(), store_.get(), reduces_.get(), nullptr, stored);
  }

  static std::string In(int k) { return std::string(19, 'i') + static_cast<char>('0' + k); }
  static std::string Out(int k) { return std::string(19, 'o') + static_cast<char>('0' + k); }

  Status Start(int n, const std::string& op = "sum", int outs = -1, int num_objects = 0) {
    rpc::ReduceObjects m;
    for (int k = 0; k < n; ++k) {
      table_->AddRef(In(k));
      m.add_input_ids(In(k));
    }
    for (int k = 0; k < (outs < 0 ? n : outs); ++k) {
      table_->AddRef(Out(k));
      m.add_out_ids(Out(k));
    }
    m.set_op(op);
    m.set_num_objects(num_objects);
    return allreduces_->Start(m);
  }

  void Run(const std::function<bool()>& until, int ms = 5000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!until() && std::chrono::steady_clock::now() < deadline) {
      io_.run_for(std::chrono::milliseconds(2));
      io_.restart();
    }
  }

  rpc::ObjectValue Value(const std::string& id) {
    rpc::ObjectValue v;
    table_->Describe(id, &v, false);
    return v;
  }

  bool AllSettled(int n) {
    for (int k = 0; k < n; ++k) {
      int s = Value(Out(k)).state();
      if (s != rpc::OBJ_IN_STORE && s != rpc::OBJ_LOST) return false;
    }
    return true;
  }

  asio::io_context io_;
  std::unique_ptr<objectstore::ObjectStore> store_;
  std::unique_ptr<objectstore::ObjectTable> table_;
  std::unique_ptr<ReduceManager> reduces_;
  std::unique_ptr<Allreduces> allreduces_;
  std::vector<std::string> stored_;
};

TEST_F(AllreduceTest, EveryResultHoldsTheReducedArray) {
  const size_t n = 300000;  // 1.2 MB: would be sliced with peers; here it goes the cheap way
  ASSERT_TRUE(Start(3, "max").ok());
  Run([] { return false; }, 20);
  EXPECT_FALSE(AllSettled(3));
  for (int k = 0; k < 3; ++k) testing::SealArray(*table_, *store_, In(k), std::vector<float>(n, k * 2.0f), DType::kFloat32);
  Run([&] { return AllSettled(3); });
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(testing::ReadArray<float>(*table_, *store_, Out(k)), std::vector<float>(n, 4.0f)) << "result " << k;
  }
  std::sort(stored_.begin(), stored_.end());
  EXPECT_EQ(stored_, (std::vector<std::string>{Out(0), Out(1), Out(2)})) << "each result listed once";
  EXPECT_EQ(allreduces_->num_sliced(), 0u);
  EXPECT_EQ(allreduces_->num_active(), 0u);
}

TEST_F(AllreduceTest, AFailedInputFailsEveryResultWithTheReason) {
  ASSERT_TRUE(Start(3).ok());
  testing::SealArray(*table_, *store_, In(0), std::vector<float>(1000, 1.0f), DType::kFloat32);
  table_->MarkLost(In(2), StatusCode::kWorkerDied, "simulator 2's worker died");
  Run([&] { return AllSettled(3); });
  for (int k = 0; k < 3; ++k) {
    rpc::ObjectValue v = Value(Out(k));
    ASSERT_EQ(v.state(), rpc::OBJ_LOST) << "result " << k;
    EXPECT_NE(v.error().find("simulator 2's worker died"), std::string::npos) << v.error();
  }
  EXPECT_TRUE(stored_.empty()) << "no partial result is handed out";
}

TEST_F(AllreduceTest, StopFailsWhatIsInProgress) {
  ASSERT_TRUE(Start(2).ok());
  allreduces_->Stop("raylet stopped: test");
  Run([&] { return AllSettled(2); });
  for (int k = 0; k < 2; ++k) EXPECT_NE(Value(Out(k)).error().find("raylet stopped: test"), std::string::npos);
  EXPECT_EQ(allreduces_->num_active(), 0u);
}

TEST_F(AllreduceTest, BadRequestsAreRefusedBeforeAnythingStarts) {
  EXPECT_EQ(Start(2, "mean").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Start(3, "sum", 2).code(), StatusCode::kInvalidArgument);     // a result per input
  EXPECT_EQ(Start(2, "sum", -1, 1).code(), StatusCode::kInvalidArgument);  // every input goes in
  EXPECT_EQ(Start(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(allreduces_->num_active(), 0u);
}

TEST(AllreduceCutsTest, SlicesAreAlignedAndCoverTheValue) {
  for (uint64_t size : {uint64_t{1}, uint64_t{4095}, uint64_t{4096 * 3 + 5}, uint64_t{1} << 20,
                        (uint64_t{32} << 20) + 12345}) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{8}}) {
      auto cuts = Allreduces::Cuts(size, n);
      ASSERT_FALSE(cuts.empty());
      EXPECT_EQ(cuts[0], 0u);
      EXPECT_LE(cuts.size(), n);
      for (size_t s = 1; s < cuts.size(); ++s) {
        EXPECT_GT(cuts[s], cuts[s - 1]);
        EXPECT_EQ(cuts[s] % Allreduces::kSliceAlign, 0u) << "size " << size << " n " << n;
        EXPECT_LT(cuts[s], size);
      }
      if (size >= n * Allreduces::kSliceAlign) {
        EXPECT_EQ(cuts.size(), n) << "size " << size << " n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace phalanx::collectives
