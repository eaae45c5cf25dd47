// The staged device path on a real GPU (objectstore/cuda_device.h): a device
// object in GPU memory on "node" b is copied, chunk by chunk through pinned
// staging, into GPU memory on "node" a (two object managers in one process,
// the in-memory network between them, one GPU for both). Skips, saying why,
// where phalanx was built without CUDA or no GPU is here; runs on the
// device machine through scripts/device_test.sh.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#ifdef PHALANX_HAVE_CUDA
#include <cuda_runtime.h>

#include "memory_network.h"
#include "objectstore/cuda_device.h"
#include "objectstore/object_manager.h"
#endif

namespace phalanx::objectstore {
namespace {

#ifdef PHALANX_HAVE_CUDA

class NoPeers : public PeerChannel {
 public:
  void Call(const std::string&, rpc::MessageType, const google::protobuf::Message&, int64_t,
            std::function<void(Result<std::string>)> done) override {
    if (done) done(std::string());
  }
};

TEST(CudaStagedTest, AGpuObjectArrivesOnTheGpuOfAnotherNode) {
  auto dev_a = CudaDevice::Open(0);
  if (!dev_a.ok()) GTEST_SKIP() << dev_a.status().message();
  auto dev_b = CudaDevice::Open(0);
  ASSERT_TRUE(dev_b.ok()) << dev_b.status().ToString();
  boost::asio::io_context io;
  MemoryNetwork net(io);
  NoPeers peers;
  TransferOptions o;
  o.chunk_bytes = 1 << 20;
  auto make = [&](const std::string& name) {
    auto region = ShmRegion::Create(8 << 20, ("cuda-staged-" + name).c_str());
    EXPECT_TRUE(region.ok());
    auto om = std::make_unique<ObjectManager>(io, name, std::make_unique<ObjectStore>(std::move(region).value()),
                                              std::make_unique<MemoryNetwork::Endpoint>(&net), &peers, nullptr, o);
    net.Join(name, &om->transfer());
    return om;
  };
  auto a = make("a");
  auto b = make("b");
  const size_t size = (64 << 20) + 12345;
  std::vector<char> host(size);
  for (size_t i = 0; i < size; ++i) host[i] = static_cast<char>(i * 31 + (i >> 16));
  void* src = nullptr;
  void* dst = nullptr;
  ASSERT_EQ(cudaMalloc(&src, size), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, size), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src, host.data(), size, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst, 0, size), cudaSuccess);
  const std::string id(20, 'g');
  ASSERT_TRUE(b->AddDeviceObject(id, dev_b.value().get(), reinterpret_cast<uint64_t>(src), size).ok());
  std::optional<Result<uint64_t>> got;
  auto t0 = std::chrono::steady_clock::now();
  a->FetchToDevice(id, "b", dev_a.value().get(), reinterpret_cast<uint64_t>(dst), size,
                   [&](Result<uint64_t> r) { got = std::move(r); });
  RunUntil(io, [&] { return got.has_value(); }, std::chrono::seconds(60));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->status().ToString();
  std::vector<char> back(size);
  ASSERT_EQ(cudaMemcpy(back.data(), dst, size, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(back.data(), host.data(), size), 0);
  std::printf("staged GPU -> GPU over the in-memory network: %.1f MiB in %.3f s (%.2f GB/s)\n", size / 1048576.0, s,
              size / s / 1e9);
  b->RemoveDeviceObject(id);
  cudaFree(src);
  cudaFree(dst);
}

#else

TEST(CudaStagedTest, AGpuObjectArrivesOnTheGpuOfAnotherNode) {
  GTEST_SKIP() << "phalanx was built without CUDA (no nvcc at configure time)";
}

#endif

}  // namespace
}  // namespace phalanx::objectstore
