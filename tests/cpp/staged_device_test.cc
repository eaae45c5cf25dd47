// Device objects moved between nodes through host staging
// (objectstore/staged_device.h), with host memory standing in for the GPUs
// (HostDevice: copies finish late, or fail, on demand): two object managers
// in one process over the in-memory network. What is checked: every byte
// lands in the destination "device" buffer, chunk copies overlap, the host
// memory used is the staging slots and never the whole object, a failed
// device copy fails the fetch naming the device, and bad requests say why.
// The same path on a GPU (CudaDevice) runs in scripts/device_test.sh.
#include "objectstore/staged_device.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <deque>
#include <optional>

#include "memory_network.h"
#include "objectstore/object_manager.h"
#include "fake_directory.h"

namespace phalanx::objectstore {
namespace {

namespace asio = boost::asio;

class NoPeers : public PeerChannel {
 public:
  void Call(const std::string&, rpc::MessageType, const google::protobuf::Message&, int64_t,
            std::function<void(Result<std::string>)> done) override {
    if (done) done(std::string());
  }
};

class StagedDeviceTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kChunk = 256 << 10;

  ObjectManager& Add(const std::string& name, int window = 4) {
    auto region = ShmRegion::Create(16 << 20, ("staged-" + name).c_str());
    EXPECT_TRUE(region.ok());
    TransferOptions o;
    o.chunk_bytes = kChunk;
    o.window = window;
    auto& dir = *directories_.emplace_back(std::make_unique<FakeDirectory>());
    dir.device_located = [this, name](const std::string& id, uint64_t size, const std::string& device) {
      listed_[name] = {id, size, device};
    };
    dir.unlisted = [this, name](const std::string&) { listed_.erase(name); };
    auto om = std::make_unique<ObjectManager>(io_, name, std::make_unique<ObjectStore>(std::move(region).value()),
                                              std::make_unique<MemoryNetwork::Endpoint>(&net_), &peers_, nullptr, o,
                                              &dir);
    net_.Join(name, &om->transfer());
    ObjectManager& ref = *om;
    managers_[name] = std::move(om);
    return ref;
  }
  static std::vector<char> Pattern(uint64_t size) {
    std::vector<char> v(size);
    for (uint64_t i = 0; i < size; ++i) v[i] = static_cast<char>(i * 13 + (i >> 12));
    return v;
  }
  static uint64_t Addr(std::vector<char>& v) { return reinterpret_cast<uint64_t>(v.data()); }
  // Fetches `id` from b into `dest` on `device`; the result once settled.
  Result<uint64_t> Fetch(ObjectManager& a, const std::string& id, HostDevice* device, std::vector<char>& dest,
                         StagingOptions staging = {}) {
    std::optional<Result<uint64_t>> got;
    a.FetchToDevice(id, "b", device, Addr(dest), dest.size(), [&](Result<uint64_t> r) { got = std::move(r); },
                    staging);
    RunUntil(io_, [&] { return got.has_value(); });
    if (!got) return Status::TimedOut("the fetch did not settle in 10 s");
    return *got;
  }

  // A device, and a buffer: they outlive the managers that use them (declared before them).
  HostDevice& Gpu(int polls_to_finish = 0, uint64_t fail_at = 0) {
    return devices_.emplace_back(polls_to_finish, fail_at);
  }
  std::vector<char>& Buffer(std::vector<char> v) { return buffers_.emplace_back(std::move(v)); }

  asio::io_context io_;
  MemoryNetwork net_{io_};
  NoPeers peers_;
  std::deque<HostDevice> devices_;
  std::deque<std::vector<char>> buffers_;
  std::vector<std::unique_ptr<FakeDirectory>> directories_;  // (outlive the managers)
  std::map<std::string, std::unique_ptr<ObjectManager>> managers_;
  struct Listed {
    std::string id;
    uint64_t size;
    std::string device;
  };
  std::map<std::string, Listed> listed_;
  const std::string id_ = std::string(20, 'd');
};

TEST_F(StagedDeviceTest, ADeviceObjectArrivesOnTheOtherDeviceChunkByChunk) {
  ObjectManager& a = Add("a");
  ObjectManager& b = Add("b");
  const uint64_t size = 8 * kChunk + 1234;  // 9 chunks, the last one short
  HostDevice& gpu_a = Gpu(/*polls_to_finish=*/3);
  HostDevice& gpu_b = Gpu(/*polls_to_finish=*/3);
  std::vector<char>& src = Buffer(Pattern(size));
  ASSERT_TRUE(b.AddDeviceObject(id_, &gpu_b, Addr(src), size).ok());
  ASSERT_TRUE(listed_.count("b"));
  EXPECT_EQ(listed_["b"].device, "host") << "the directory says which device holds it";
  EXPECT_EQ(listed_["b"].size, size);
  std::vector<char>& dest = Buffer(std::vector<char>(size + 100, 0));
  auto r = Fetch(a, id_, &gpu_a, dest);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value(), size);
  EXPECT_EQ(std::memcmp(dest.data(), src.data(), size), 0);
  EXPECT_EQ(dest[size], 0) << "nothing written past the object";
  EXPECT_EQ(gpu_b.copies(), 9u) << "one device-to-host copy per chunk";
  EXPECT_EQ(gpu_a.copies(), 9u) << "one host-to-device copy per chunk";
  EXPECT_GT(gpu_b.max_in_flight(), 1u) << "the source's chunk copies overlap";
  EXPECT_GT(gpu_a.max_in_flight(), 1u) << "the sink's chunk copies overlap";
  EXPECT_LT(gpu_b.staging_bytes(), size) << "never the whole object staged";
  EXPECT_EQ(gpu_a.staging_bytes(), 0u) << "the sink's staging is freed once done";
  EXPECT_EQ(net_.served("b"), 9);
  b.RemoveDeviceObject(id_);
  EXPECT_FALSE(listed_.count("b"));
  EXPECT_EQ(gpu_b.staging_bytes(), 0u);
}

TEST_F(StagedDeviceTest, FewerSlotsThanRequestsInFlightStillDeliverEveryByte) {
  ObjectManager& a = Add("a", /*window=*/4);
  ObjectManager& b = Add("b");
  const uint64_t size = 6 * kChunk;
  HostDevice& gpu_a = Gpu(5);
  HostDevice& gpu_b = Gpu(5);
  std::vector<char>& src = Buffer(Pattern(size));
  StagingOptions one;
  one.slots = 1;
  ASSERT_TRUE(b.AddDeviceObject(id_, &gpu_b, Addr(src), size, one).ok());
  std::vector<char>& dest = Buffer(std::vector<char>(size, 0));
  auto r = Fetch(a, id_, &gpu_a, dest, one);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::memcmp(dest.data(), src.data(), size), 0);
  EXPECT_EQ(gpu_b.max_in_flight(), 1u) << "one slot: one copy at a time";
  EXPECT_EQ(gpu_a.max_in_flight(), 1u);
}

TEST_F(StagedDeviceTest, AFailedDeviceCopyFailsTheFetchNamingTheDevice) {
  ObjectManager& a = Add("a");
  ObjectManager& b = Add("b");
  const uint64_t size = 4 * kChunk;
  HostDevice& gpu_a = Gpu();
  HostDevice& gpu_b = Gpu(/*polls_to_finish=*/1, /*fail_at=*/3);  // the source's third chunk fails
  std::vector<char>& src = Buffer(Pattern(size));
  ASSERT_TRUE(b.AddDeviceObject(id_, &gpu_b, Addr(src), size).ok());
  std::vector<char>& dest = Buffer(std::vector<char>(size, 0));
  auto r = Fetch(a, id_, &gpu_a, dest);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("host device: copy 3 failed"), std::string::npos) << r.status().message();
  EXPECT_EQ(gpu_a.staging_bytes(), 0u) << "the sink's staging is freed on failure too";

  // The sink's own device failing: its error, with the device's name.
  HostDevice& bad_sink = Gpu(0, /*fail_at=*/2);
  HostDevice& good = Gpu(1);
  b.RemoveDeviceObject(id_);
  ASSERT_TRUE(b.AddDeviceObject(id_, &good, Addr(src), size).ok());
  auto r2 = Fetch(a, id_, &bad_sink, dest);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("host: host device: copy 2 failed"), std::string::npos)
      << r2.status().message();
}

TEST_F(StagedDeviceTest, BadRequestsSayWhy) {
  ObjectManager& a = Add("a");
  ObjectManager& b = Add("b");
  const uint64_t size = 2 * kChunk;
  HostDevice& gpu_a = Gpu();
  HostDevice& gpu_b = Gpu();
  std::vector<char>& src = Buffer(Pattern(size));
  ASSERT_TRUE(b.AddDeviceObject(id_, &gpu_b, Addr(src), size).ok());
  EXPECT_EQ(b.AddDeviceObject(id_, &gpu_b, Addr(src), size).code(), StatusCode::kAlreadyExists);
  std::vector<char>& small = Buffer(std::vector<char>(kChunk));
  auto r = Fetch(a, id_, &gpu_a, small);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has room for 262144"), std::string::npos) << r.status().message();
  StagingOptions none;
  none.slots = 0;
  EXPECT_EQ(b.AddDeviceObject(std::string(20, 'e'), &gpu_b, Addr(src), size, none).code(),
            StatusCode::kInvalidArgument);
  // A device object dropped: readers are told it is gone, not left waiting.
  b.RemoveDeviceObject(id_);
  std::vector<char>& dest = Buffer(std::vector<char>(size));
  auto gone = Fetch(a, id_, &gpu_a, dest);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("does not have it"), std::string::npos) << gone.status().message();
}

}  // namespace
}  // namespace phalanx::objectstore
