// The TLS engine (core/tls.h) with no sockets: two sessions handing each
// other their bytes. A cluster's key pins its servers, records are
// protected, and a plain peer gets an error that says what is wrong. (The
// handshake's channel binding: auth_test.cc.)
#include "core/tls.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "core/auth.h"  // (a plain peer's hello)

namespace phalanx {
namespace {

std::shared_ptr<TlsContext> Ctx(const std::string& token) {
  auto c = TlsContext::Create(token);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.value();
}

// Moves bytes both ways until neither side has any; the first error.
Status Pump(TlsSession& a, TlsSession& b, std::string* a_got = nullptr, std::string* b_got = nullptr) {
  for (int round = 0; round < 20; ++round) {
    std::string ab, ba;
    a.TakeOutput(&ab);
    b.TakeOutput(&ba);
    if (ab.empty() && ba.empty() && round > 0) return Status::OK();
    b.Feed(ab.data(), ab.size());
    a.Feed(ba.data(), ba.size());
    char buf[4096];
    for (auto [s, got] : {std::pair{&a, a_got}, std::pair{&b, b_got}}) {
      while (true) {
        auto n = s->Read(buf, sizeof(buf));
        if (!n.ok()) return n.status();
        if (n.value() == 0) break;
        if (got) got->append(buf, n.value());
      }
    }
  }
  return Status::Internal("the sessions never settled");
}

TEST(TlsTest, HoldersOfOneTokenTalkPrivately) {
  auto ctx = Ctx("secret");
  TlsSession client(ctx, false, "server"), server(ctx, true, "client");
  ASSERT_TRUE(client.Advance().ok());
  ASSERT_TRUE(Pump(client, server).ok());
  ASSERT_TRUE(client.established());
  ASSERT_TRUE(server.established());
  EXPECT_EQ(client.ChannelBinding(), server.ChannelBinding());
  EXPECT_EQ(client.ChannelBinding().size(), 32u);

  std::string big(1 << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(client.Write(big.data(), big.size()).ok());
  std::string wire;
  client.TakeOutput(&wire);
  EXPECT_EQ(wire.find(big.substr(1000, 64)), std::string::npos) << "plaintext on the wire";
  server.Feed(wire.data(), wire.size());
  std::string got;
  ASSERT_TRUE(Pump(client, server, nullptr, &got).ok());
  EXPECT_EQ(got, big);
}

TEST(TlsTest, AnotherClustersServerIsRefusedByItsKey) {
  TlsSession client(Ctx("ours"), false, "server"), server(Ctx("theirs"), true, "client");
  ASSERT_TRUE(client.Advance().ok());
  Status st = Pump(client, server);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not this cluster's"), std::string::npos) << st.message();
  EXPECT_FALSE(client.established());
}

TEST(TlsTest, ATamperedRecordIsAnError) {
  auto ctx = Ctx("secret");
  TlsSession client(ctx, false, "server"), server(ctx, true, "client");
  ASSERT_TRUE(client.Advance().ok());
  ASSERT_TRUE(Pump(client, server).ok());
  ASSERT_TRUE(client.Write("hello, server", 13).ok());
  std::string wire;
  client.TakeOutput(&wire);
  wire[wire.size() - 3] ^= 1;
  server.Feed(wire.data(), wire.size());
  char buf[64];
  auto n = server.Read(buf, sizeof(buf));
  EXPECT_FALSE(n.ok());
}

TEST(TlsTest, APlainPeerIsToldToUseTls) {
  TlsSession server(Ctx("secret"), true, "client");
  Handshake plain(Handshake::Role::kClient, "secret", "server");
  std::string hello = plain.Begin();
  server.Feed(hello.data(), hello.size());
  char buf[64];
  auto n = server.Read(buf, sizeof(buf));
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("--tls"), std::string::npos) << n.status().message();
}

TEST(TlsTest, EveryProcessOfAClusterMakesTheSameCertificate) {
  std::string dir = ::testing::TempDir();
  ASSERT_TRUE(Ctx("secret")->WritePem(dir + "/c1.pem", dir + "/k1.pem").ok());
  ASSERT_TRUE(Ctx("secret")->WritePem(dir + "/c2.pem", dir + "/k2.pem").ok());
  ASSERT_TRUE(Ctx("other")->WritePem(dir + "/c3.pem", dir + "/k3.pem").ok());
  auto read = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(read(dir + "/c1.pem"), read(dir + "/c2.pem"));
  EXPECT_NE(read(dir + "/c1.pem"), read(dir + "/c3.pem"));
}

TEST(TlsTest, PemFilesAreWrittenWithAPrivateKey) {
  auto ctx = Ctx("secret");
  std::string dir = ::testing::TempDir();
  ASSERT_TRUE(ctx->WritePem(dir + "/c.pem", dir + "/k.pem").ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/k.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace phalanx
