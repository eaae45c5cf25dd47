// ActorService alone (tests/cpp/service_fixture.h), over a fake of the
// node's actors and a real redis-server: a lookup is answered from here, or
// else from the GCS, or NotFound naming the name; a route says whether the
// calls it names are done; a kill is answered with its outcome; a checkpoint
// is kept in the GCS and read back, a too large one refused naming the
// limit, and one from a process that is not the actor's worker closes its
// connection; a client's exit reaches the actors.
#include "scheduler/actor_service.h"

#include <map>

#include "core/status_proto.h"
#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

class FakeActors final : public ActorRegistry {
 public:
  void WhenNamed(const std::string&, std::function<void()> then) override { then(); }
  Result<rpc::GetActorReply> Lookup(const std::string& name) const override {
    auto it = here.find(name);
    if (it == here.end()) return Status::NotFound("no live actor named '" + name + "' here");
    rpc::GetActorReply r;
    r.set_actor_id(it->second);
    r.set_class_name("Learner");
    return r;
  }
  void Route(const std::string& actor_id, std::function<void(rpc::ActorRouteReply)> reply) override {
    rpc::ActorRouteReply r;
    r.set_node_id("node-of-" + actor_id);
    r.set_state(rpc::ACTOR_ALIVE);
    reply(r);
  }
  void Kill(const std::string& actor_id, bool no_restart, std::function<void(const Status&)> done) override {
    killed.push_back(actor_id + (no_restart ? " for good" : ""));
    done(Status::NotFound("actor " + actor_id + " is not alive"));
  }
  void OnClientGone(const std::string& client_id) override { gone.push_back(client_id); }
  std::map<std::string, std::string> here;  // name -> actor id
  std::vector<std::string> killed, gone;
};

class ActorServiceTest : public testing::ServiceTest {
 protected:
  static constexpr uint64_t kCheckpointMax = 1 << 20;

  void SetUp() override {
    ServiceTest::SetUp();
    service_ = std::make_unique<ActorService>(&actors_, &specs_, gcs_.get(), kCheckpointMax);
    service_->AddRoutes(router_);
  }
  rpc::GetActorReply Lookup(const std::string& name, uint64_t req) {
    rpc::GetActor m;
    m.set_name(name);
    Send(rpc::GET_ACTOR, req, m);
    return Reply<rpc::GetActorReply>(rpc::GET_ACTOR, req);
  }
  // The test's client as the worker of actor `actor_id`.
  void BeActorWorker(const std::string& actor_id) {
    worker_.pid = 55;
    worker_.actor_id = actor_id;
    client_->worker = &worker_;
    client_->is_worker = true;
  }
  void TearDown() override {
    client_->worker = nullptr;
    ServiceTest::TearDown();
  }

  FakeActors actors_;
  testing::SpecTable specs_;
  Worker worker_;
  std::unique_ptr<ActorService> service_;
};

TEST_F(ActorServiceTest, ALookupIsAnsweredFromHereElseFromTheGcsElseNotFoundNamingIt) {
  const std::string here_id(kTaskIdSize, 'h'), there_id(kTaskIdSize, 't');
  actors_.here["learner"] = here_id;
  rpc::ActorInfo elsewhere;
  elsewhere.set_actor_id(there_id);
  elsewhere.set_name("simulator");
  elsewhere.set_class_name("Simulator");
  elsewhere.set_state(rpc::ACTOR_ALIVE);
  gcs_->PutActor(elsewhere);
  rpc::ActorInfo dead = elsewhere;
  dead.set_actor_id(std::string(kTaskIdSize, 'd'));
  dead.set_name("gone");
  dead.set_state(rpc::ACTOR_DEAD);
  gcs_->PutActor(dead);

  EXPECT_EQ(Lookup("learner", 1).actor_id(), here_id);
  auto r = Lookup("simulator", 2);
  EXPECT_EQ(r.actor_id(), there_id);
  EXPECT_EQ(r.class_name(), "Simulator");
  for (const char* name : {"gone", "never"}) {
    r = Lookup(name, 3);
    Status st = FromProto(r.status());
    EXPECT_EQ(st.code(), StatusCode::kNotFound) << name;
    EXPECT_NE(st.message().find(name), std::string::npos) << st.ToString();
  }
}

TEST_F(ActorServiceTest, ARouteSaysWhetherTheCallsItNamesAreDone) {
  const std::string running(kTaskIdSize, 'r'), over(kTaskIdSize, 'o');
  specs_.specs[running] = rpc::TaskSpec();
  rpc::ActorRoute m;
  m.set_actor_id("a1");
  m.add_task_ids(over);
  Send(rpc::ACTOR_ROUTE, 4, m);
  auto r = Reply<rpc::ActorRouteReply>(rpc::ACTOR_ROUTE, 4);
  EXPECT_EQ(r.node_id(), "node-of-a1");
  EXPECT_TRUE(r.calls_done());
  m.add_task_ids(running);
  Send(rpc::ACTOR_ROUTE, 5, m);
  EXPECT_FALSE(Reply<rpc::ActorRouteReply>(rpc::ACTOR_ROUTE, 5).calls_done());
}

TEST_F(ActorServiceTest, AKillIsAnsweredWithItsOutcome) {
  rpc::KillActor m;
  m.set_actor_id("a2");
  m.set_no_restart(true);
  Send(rpc::KILL_ACTOR, 6, m);
  auto r = Reply<rpc::KillActorReply>(rpc::KILL_ACTOR, 6);
  EXPECT_EQ(actors_.killed, std::vector<std::string>{"a2 for good"});
  EXPECT_EQ(FromProto(r.status()).code(), StatusCode::kNotFound);
}

TEST_F(ActorServiceTest, ACheckpointIsKeptInTheGcsAndReadBackATooLargeOneRefused) {
  const std::string actor(kTaskIdSize, 'a');
  BeActorWorker(actor);
  rpc::ActorCheckpoint load;
  load.set_actor_id(actor);
  Send(rpc::ACTOR_CHECKPOINT, 7, load);
  auto r = Reply<rpc::ActorCheckpointReply>(rpc::ACTOR_CHECKPOINT, 7);
  EXPECT_TRUE(FromProto(r.status()).ok());
  EXPECT_FALSE(r.found()) << "none kept yet";
  rpc::ActorCheckpoint save;
  save.set_actor_id(actor);
  save.set_save(true);
  save.set_state("weights after 100 steps");
  Send(rpc::ACTOR_CHECKPOINT, 8, save);
  EXPECT_TRUE(FromProto(Reply<rpc::ActorCheckpointReply>(rpc::ACTOR_CHECKPOINT, 8).status()).ok());
  Send(rpc::ACTOR_CHECKPOINT, 9, load);
  r = Reply<rpc::ActorCheckpointReply>(rpc::ACTOR_CHECKPOINT, 9);
  EXPECT_TRUE(r.found());
  EXPECT_EQ(r.state(), "weights after 100 steps");
  save.set_state(std::string(kCheckpointMax + 1, 'x'));
  Send(rpc::ACTOR_CHECKPOINT, 10, save);
  Status st = FromProto(Reply<rpc::ActorCheckpointReply>(rpc::ACTOR_CHECKPOINT, 10).status());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--checkpoint-max-bytes"), std::string::npos) << st.ToString();
}

TEST_F(ActorServiceTest, ACheckpointFromAProcessThatIsNotTheActorsWorkerClosesItsConnection) {
  BeActorWorker(std::string(kTaskIdSize, 'a'));
  rpc::ActorCheckpoint m;
  m.set_actor_id(std::string(kTaskIdSize, 'b'));  // another actor's state
  Send(rpc::ACTOR_CHECKPOINT, 11, m);
  EXPECT_TRUE(RunUntil([&] { return client_->conn->closed(); }));
}

TEST_F(ActorServiceTest, AClientsExitReachesTheActors) {
  service_->OnClientGone(*client_, "driver process 4242 exited");
  EXPECT_EQ(actors_.gone, std::vector<std::string>{client_->client_id});
}

}  // namespace
}  // namespace phalanx::scheduler
