// The ReduceManager alone (collectives/reduce_manager.h), on one node: a
// real store and object table, inputs sealed one by one while the reduce
// waits, no chain (chains across nodes are tested end to end in
// tests/python/test_reduce_chain.py). It combines inputs in arrival order,
// takes the first k, stands a spare in for a failed input, and fails with a
// reason that names the inputs.
#include "collectives/reduce_manager.h"

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <cstring>
#include <vector>

#include "core/ids.h"
#include "core/value_format.h"
#include "tests/cpp/array_values.h"

namespace phalanx::collectives {
namespace {

namespace asio = boost::asio;

constexpr uint64_t kInlineThreshold = 64 << 10;

class ReduceManagerTest : public ::testing::Test {
 protected:
  ReduceManagerTest() {
    auto region = objectstore::ShmRegion::Create(256 << 20, "reduce-manager-test");
    EXPECT_TRUE(region.ok());
    store_ = std::make_unique<objectstore::ObjectStore>(std::move(region).value());
    table_ = std::make_unique<objectstore::ObjectTable>(store_.get());
    reduces_ = std::make_unique<ReduceManager>(io_, table_.get(), store_.get(), kInlineThreshold);
  }

  static std::string Id(int k) {
    std::string id(20, '\0');
    std::memcpy(id.data(), &k, sizeof(k));
    id[19] = 'r';
    return id;
  }

  template <typename T>
  void Seal(const std::string& id, const std::vector<T>& data, DType dtype, uint32_t kind = 0) {
    testing::SealArray(*table_, *store_, id, data, dtype, kind);
  }

  // Starts reduce `out` over inputs 0..n-1 (each held by the test, as a client's refs are).
  Status Start(const std::string& out, int n, const std::string& op = "sum", int num_objects = 0,
               int64_t timeout_ms = 0) {
    rpc::ReduceObjects m;
    m.set_out_id(out);
    for (int k = 0; k < n; ++k) {
      table_->AddRef(Id(k));
      m.add_input_ids(Id(k));
    }
    m.set_op(op);
    m.set_num_objects(num_objects);
    m.set_timeout_ms(timeout_ms);
    table_->AddRef(out);
    return reduces_->Start(m);
  }

  void Run(const std::function<bool()>& until, int ms = 5000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!until() && std::chrono::steady_clock::now() < deadline) {
      io_.run_for(std::chrono::milliseconds(2));
      io_.restart();
    }
  }

  bool Settled(const std::string& id) {
    rpc::ObjectValue v;
    table_->Describe(id, &v, false);
    return v.state() == rpc::OBJ_IN_STORE || v.state() == rpc::OBJ_INLINE || v.state() == rpc::OBJ_LOST;
  }

  template <typename T>
  std::vector<T> Values(const std::string& id) {
    Run([&] { return Settled(id); });
    return testing::ReadArray<T>(*table_, *store_, id);
  }

  std::string Error(const std::string& id) {
    Run([&] { return Settled(id); });
    rpc::ObjectValue v;
    table_->Describe(id, &v, false);
    EXPECT_EQ(v.state(), rpc::OBJ_LOST);
    return v.error();
  }

  std::vector<std::string> InputsOf(const std::string& out) {
    std::vector<std::string> got;
    bool done = false;
    reduces_->InputsOf(out, [&](Result<std::vector<std::string>> r) {
      done = true;
      if (r.ok()) got = r.value();
    });
    Run([&] { return done; });
    return got;
  }

  asio::io_context io_;
  std::unique_ptr<objectstore::ObjectStore> store_;
  std::unique_ptr<objectstore::ObjectTable> table_;
  std::unique_ptr<ReduceManager> reduces_;
  const std::string out_ = std::string(20, 'o');
};

TEST_F(ReduceManagerTest, CombinesInputsInTheOrderTheyArrive) {
  const size_t n = 100000;  // 400 KB: combined on the helper thread
  ASSERT_TRUE(Start(out_, 3).ok());
  Run([] { return false; }, 20);
  EXPECT_FALSE(Settled(out_)) << "no input is ready yet";
  Seal(Id(2), std::vector<float>(n, 3.0f), DType::kFloat32);
  Run([] { return false; }, 20);
  Seal(Id(0), std::vector<float>(n, 1.0f), DType::kFloat32);
  Run([] { return false; }, 20);
  Seal(Id(1), std::vector<float>(n, 2.5f), DType::kFloat32);
  EXPECT_EQ(Values<float>(out_), std::vector<float>(n, 6.5f));
  EXPECT_EQ(InputsOf(out_), (std::vector<std::string>{Id(2), Id(0), Id(1)}));
}

TEST_F(ReduceManagerTest, NumObjectsTakesTheFirstKToArrive) {
  ASSERT_TRUE(Start(out_, 4, "max", 2).ok());
  Seal(Id(3), std::vector<int64_t>(20000, 40), DType::kInt64);
  Seal(Id(1), std::vector<int64_t>(20000, 10), DType::kInt64);
  EXPECT_EQ(Values<int64_t>(out_), std::vector<int64_t>(20000, 40));
  EXPECT_EQ(InputsOf(out_), (std::vector<std::string>{Id(3), Id(1)}));
  Seal(Id(0), std::vector<int64_t>(20000, 99), DType::kInt64);  // late: not taken
  Run([] { return false; }, 20);
  EXPECT_EQ(Values<int64_t>(out_), std::vector<int64_t>(20000, 40));
}

TEST_F(ReduceManagerTest, ASpareStandsInForAFailedInput) {
  ASSERT_TRUE(Start(out_, 3, "sum", 2).ok());
  table_->MarkLost(Id(0), StatusCode::kWorkerDied, "its worker died");
  Seal(Id(1), std::vector<double>(10000, 1.5), DType::kFloat64);
  Seal(Id(2), std::vector<double>(10000, 2.0), DType::kFloat64);
  EXPECT_EQ(Values<double>(out_), std::vector<double>(10000, 3.5));
}

TEST_F(ReduceManagerTest, TooManyFailedInputsFailTheResultNamingThem) {
  ASSERT_TRUE(Start(out_, 3, "sum", 2).ok());
  table_->MarkLost(Id(0), StatusCode::kWorkerDied, "its worker died");  // a spare is left
  Run([] { return false; }, 20);
  EXPECT_FALSE(Settled(out_));
  Seal(Id(1), std::vector<float>(20000, 1.0f), DType::kFloat32, value_format::kKindError);  // none is
  std::string why = Error(out_);
  EXPECT_NE(why.find("needs 2 of its 3 inputs, but 2 failed"), std::string::npos) << why;
  EXPECT_NE(why.find("its worker died"), std::string::npos) << why;
  EXPECT_NE(why.find("holds an error"), std::string::npos) << why;
}

TEST_F(ReduceManagerTest, MismatchedInputsFailTheResultWithBothDtypes) {
  ASSERT_TRUE(Start(out_, 2).ok());
  Seal(Id(0), std::vector<float>(20000, 1.0f), DType::kFloat32);
  Seal(Id(1), std::vector<uint16_t>(40000, 0x3f80), DType::kBFloat16);
  std::string why = Error(out_);
  EXPECT_NE(why.find("do not match"), std::string::npos) << why;
  EXPECT_NE(why.find("float32"), std::string::npos) << why;
  EXPECT_NE(why.find("bfloat16"), std::string::npos) << why;
}

TEST_F(ReduceManagerTest, BFloat16InputsAreCombinedAsBFloat16) {
  ASSERT_TRUE(Start(out_, 3).ok());
  for (int k = 0; k < 3; ++k) Seal(Id(k), std::vector<uint16_t>(50000, 0x3f80), DType::kBFloat16);  // 1.0
  EXPECT_EQ(Values<uint16_t>(out_), std::vector<uint16_t>(50000, 0x4040));                           // 3.0
}

TEST_F(ReduceManagerTest, ATimeoutNamesTheInputsStillMissing) {
  ASSERT_TRUE(Start(out_, 3, "sum", 0, 100).ok());
  Seal(Id(0), std::vector<float>(20000, 1.0f), DType::kFloat32);
  std::string why = Error(out_);
  EXPECT_NE(why.find(ToHex(Id(1))), std::string::npos) << why;
  EXPECT_NE(why.find(ToHex(Id(2))), std::string::npos) << why;
  EXPECT_EQ(why.find(ToHex(Id(0))), std::string::npos) << "input 0 came: " << why;
}

TEST_F(ReduceManagerTest, BadRequestsAreRefusedBeforeAnythingStarts) {
  EXPECT_EQ(Start(out_, 2, "mean").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Start(std::string(20, 'p'), 2, "sum", 3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Start(std::string(20, 'q'), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reduces_->num_active(), 0u);
}

TEST_F(ReduceManagerTest, AnInputIsHeldUntilItIsTaken) {
  ASSERT_TRUE(Start(out_, 2).ok());
  Seal(Id(0), std::vector<float>(20000, 1.0f), DType::kFloat32);
  table_->RemoveRef(Id(1));  // the client drops its ref before the input exists: the reduce still waits for it
  Run([] { return false; }, 20);
  EXPECT_TRUE(table_->Contains(Id(1)));
  Seal(Id(1), std::vector<float>(20000, 2.0f), DType::kFloat32);
  EXPECT_EQ(Values<float>(out_), std::vector<float>(20000, 3.0f));
  EXPECT_FALSE(table_->Contains(Id(1))) << "freed once taken: nobody else holds it";
  EXPECT_TRUE(table_->Contains(Id(0))) << "the client still holds input 0";
  EXPECT_EQ(reduces_->num_active(), 0u);
}

}  // namespace
}  // namespace phalanx::collectives
