// The handshake's state machine (core/auth.h), with no sockets: both sides
// of the cluster token, the wrong token either way, replays and reflection.
#include "core/auth.h"

#include <gtest/gtest.h>

#include "core/proto/phalanx.pb.h"

namespace phalanx {
namespace {

// Delivers one encoded frame to `to`; returns its reply (or the error).
Result<std::string> Deliver(Handshake& to, const std::string& frame) {
  FrameHeader h = DecodeHeader(frame.data());
  return to.OnFrame(h, frame.data() + kFrameHeaderSize, h.length);
}

// The AuthChallenge in an encoded frame.
rpc::AuthChallenge ChallengeIn(const std::string& frame) {
  rpc::AuthChallenge c;
  EXPECT_TRUE(c.ParseFromArray(frame.data() + kFrameHeaderSize, static_cast<int>(frame.size() - kFrameHeaderSize)));
  return c;
}

TEST(HandshakeTest, TwoHoldersOfTheTokenAuthenticateEachOther) {
  Handshake client(Handshake::Role::kClient, "secret", "server");
  Handshake server(Handshake::Role::kServer, "secret", "client");
  auto challenge = Deliver(server, client.Begin());
  ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
  auto proof = Deliver(client, challenge.value());
  ASSERT_TRUE(proof.ok()) << proof.status().ToString();
  EXPECT_TRUE(client.done());
  auto last = Deliver(server, proof.value());
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_TRUE(last.value().empty());
  EXPECT_TRUE(server.done());
}

TEST(HandshakeTest, ProofsBoundToOneChannelFailOnAnother) {
  // A man in the middle with two TLS channels relays the handshake: the
  // proofs, bound to different channels (core/tls.h), fail; the same binding works.
  Handshake client(Handshake::Role::kClient, "secret", "server");
  Handshake server(Handshake::Role::kServer, "secret", "client");
  client.set_channel_binding(std::string(32, 'a'));
  server.set_channel_binding(std::string(32, 'b'));
  auto challenge = Deliver(server, client.Begin());
  ASSERT_TRUE(challenge.ok());
  EXPECT_FALSE(Deliver(client, challenge.value()).ok());

  Handshake client2(Handshake::Role::kClient, "secret", "server");
  Handshake server2(Handshake::Role::kServer, "secret", "client");
  client2.set_channel_binding(std::string(32, 'a'));
  server2.set_channel_binding(std::string(32, 'a'));
  auto challenge2 = Deliver(server2, client2.Begin());
  ASSERT_TRUE(challenge2.ok());
  auto proof2 = Deliver(client2, challenge2.value());
  ASSERT_TRUE(proof2.ok());
  ASSERT_TRUE(Deliver(server2, proof2.value()).ok());
  EXPECT_TRUE(server2.done());
}

TEST(HandshakeTest, TheTokenNeverCrossesTheWire) {
  Handshake client(Handshake::Role::kClient, "a-very-recognizable-token", "server");
  Handshake server(Handshake::Role::kServer, "a-very-recognizable-token", "client");
  std::string wire = client.Begin();
  auto c = Deliver(server, wire);
  wire += c.value();
  auto p = Deliver(client, c.value());
  wire += p.value();
  EXPECT_EQ(wire.find("recognizable"), std::string::npos);
}

TEST(HandshakeTest, AServerWithAnotherTokenIsCaughtByTheClientBeforeItSendsAnything) {
  Handshake client(Handshake::Role::kClient, "ours", "server");
  Handshake server(Handshake::Role::kServer, "theirs", "client");
  auto challenge = Deliver(server, client.Begin());
  ASSERT_TRUE(challenge.ok());
  auto proof = Deliver(client, challenge.value());
  EXPECT_FALSE(proof.ok());
  EXPECT_FALSE(client.done());
  EXPECT_NE(proof.status().message().find("token"), std::string::npos);
}

TEST(HandshakeTest, AClientWithAnotherTokenIsRefused) {
  Handshake client(Handshake::Role::kClient, "theirs", "server");
  Handshake server(Handshake::Role::kServer, "ours", "client");
  // The client cannot verify us, but an attacker would send its proof anyway:
  // compute what it would send with its own token.
  auto challenge = Deliver(server, client.Begin());
  ASSERT_TRUE(challenge.ok());
  rpc::AuthProof forged;
  forged.set_proof(std::string(32, '\x5a'));
  auto r = Deliver(server, EncodeFrame(rpc::AUTH_PROOF, 0, 0, forged));
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(server.done());
}

TEST(HandshakeTest, ARecordedHandshakeCannotBeReplayed) {
  // Record a good client's frames against one server ...
  Handshake client(Handshake::Role::kClient, "secret", "server");
  Handshake first(Handshake::Role::kServer, "secret", "client");
  std::string hello = client.Begin();
  auto challenge = Deliver(first, hello);
  auto proof = Deliver(client, challenge.value());
  ASSERT_TRUE(proof.ok());
  // ... and play them to a fresh one: its nonce is new, the old proof is not for it.
  Handshake second(Handshake::Role::kServer, "secret", "attacker");
  ASSERT_TRUE(Deliver(second, hello).ok());
  auto replayed = Deliver(second, proof.value());
  EXPECT_FALSE(replayed.ok());
  EXPECT_FALSE(second.done());
}

TEST(HandshakeTest, AServersProofCannotBeReflectedAsAClientsProof) {
  Handshake server(Handshake::Role::kServer, "secret", "attacker");
  // The attacker opens with a hello and echoes the server's own proof back.
  rpc::AuthHello hello;
  hello.set_version(kAuthVersion);
  hello.set_nonce(std::string(kAuthNonceBytes, '\x01'));
  auto challenge = Deliver(server, EncodeFrame(rpc::AUTH_HELLO, 0, 0, hello));
  ASSERT_TRUE(challenge.ok());
  rpc::AuthProof echo;
  echo.set_proof(ChallengeIn(challenge.value()).proof());
  EXPECT_FALSE(Deliver(server, EncodeFrame(rpc::AUTH_PROOF, 0, 0, echo)).ok());
}

TEST(HandshakeTest, AnythingButTheHandshakeFirstIsRefused) {
  Handshake server(Handshake::Role::kServer, "secret", "attacker");
  EXPECT_FALSE(Deliver(server, EncodeFrame(rpc::FORWARD_TASK, 0, 1, rpc::ForwardTask())).ok());
  Handshake other(Handshake::Role::kServer, "secret", "attacker");
  rpc::AuthHello short_nonce;
  short_nonce.set_version(kAuthVersion);
  short_nonce.set_nonce("x");
  EXPECT_FALSE(Deliver(other, EncodeFrame(rpc::AUTH_HELLO, 0, 0, short_nonce)).ok());
  Handshake old(Handshake::Role::kServer, "secret", "attacker");
  rpc::AuthHello version;
  version.set_version(99);
  version.set_nonce(std::string(kAuthNonceBytes, 'n'));
  auto r = Deliver(old, EncodeFrame(rpc::AUTH_HELLO, 0, 0, version));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("version"), std::string::npos);
}

TEST(HandshakeTest, HmacMatchesTheRfc4231TestVector) {
  // RFC 4231, test case 2.
  std::string mac = HmacSha256("Jefe", "what do ya want for nothing?");
  const unsigned char want[] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
                                0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
                                0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  EXPECT_EQ(mac, std::string(reinterpret_cast<const char*>(want), sizeof(want)));
}

}  // namespace
}  // namespace phalanx
