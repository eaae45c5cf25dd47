// The non-template half of the C++ API (worker/include/phalanx/api.h): the
// process's core worker, the embedded cluster, and the C++ worker loop.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "core/auth.h"
#include "core/ids.h"
#include "core/process.h"
#include "core/tls.h"
#include "gcs/redis_client.h"
#include "phalanx/api.h"
#include "worker/core_worker.h"
#include "worker/task_spec_builder.h"

namespace phalanx {
namespace {

std::mutex g_mu;
std::shared_ptr<CoreWorker> g_core;
std::vector<pid_t> g_started;  // redis-server and raylet of an embedded cluster

std::shared_ptr<CoreWorker> Core() {
  std::lock_guard<std::mutex> l(g_mu);
  if (!g_core) throw std::runtime_error("phalanx::Init() was not called");
  return g_core;
}

void Check(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this program's path (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

int FreePort() {
  for (int port = 20000 + ::getpid() % 20000, i = 0; i < 200; ++i, ++port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool free = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    if (fd >= 0) ::close(fd);
    if (free) return port;
  }
  return 0;
}

// How this program's raylet starts its C++ workers: the generic worker
// loading `libraries`, or else this program itself in worker mode.
std::string CppWorkerCommand(const std::vector<std::string>& libraries) {
  if (libraries.empty()) return "env PHALANX_CPP_WORKER=1 " + SelfExe();
  std::string libs;
  for (const auto& l : libraries) libs += (libs.empty() ? "" : ":") + l;
  const char* env_bin = std::getenv("PHALANX_CPP_WORKER_BIN");
  return "env PHALANX_CPP_WORKER=1 PHALANX_CPP_LIBS=" + libs + " " +
         (env_bin ? env_bin : PHALANX_DEFAULT_CPP_WORKER_BIN);
}

// A session token of its own (docs/security.md): redis-server's password and
// what peer connections prove; in the environment the raylet inherits, and
// in the session folder (0600) for other processes of this user.
std::string MakeSessionToken(const std::string& dir) {
  std::string token = ToHex(SecureRandomBytes(16));
  Status st = WriteFileWithMode(dir + "/token", token, 0600);
  if (!st.ok()) throw std::runtime_error(st.message());
  ::setenv("PHALANX_CLUSTER_TOKEN", token.c_str(), 1);
  return token;
}

std::string StartEmbedded(const std::vector<std::string>& libraries) {
  std::string dir = "/tmp/phalanx/session_cpp_" + std::to_string(::getpid());
  ::mkdir("/tmp/phalanx", 01777);  // shared by this machine's users, like /tmp
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot make the session folder " + dir + ": " + std::strerror(errno));
  }
  ::chmod(dir.c_str(), 0700);
  ::mkdir((dir + "/logs").c_str(), 0700);
  std::string token = MakeSessionToken(dir);
  int port = FreePort();
  // The password in a 0600 file, not on argv (which ps shows every user).
  std::string conf = dir + "/redis.conf";
  Status wrote = WriteFileWithMode(conf, "requirepass " + token + "\n", 0600);
  if (!wrote.ok()) throw std::runtime_error(wrote.message());
  g_started.push_back(SpawnProcess({"redis-server", conf, "--port", std::to_string(port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no", "--dir", dir},
                                   dir + "/logs/redis.log"));
  for (int i = 0; i < 500; ++i) {
    if (RedisConnection::Open("127.0.0.1", port, token, nullptr, 200).ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const char* env_bin = std::getenv("PHALANX_RAYLET_BIN");
  std::string raylet = env_bin ? env_bin : PHALANX_DEFAULT_RAYLET_BIN;
  std::string sock = dir + "/raylet.sock";
  unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  g_started.push_back(SpawnProcess({raylet, "--socket", sock, "--session-dir", dir, "--redis-address",
                                    "127.0.0.1:" + std::to_string(port), "--worker-command", "/bin/false",
                                    "--cpp-worker-command", CppWorkerCommand(libraries), "--prestart-workers", "0",
                                    "--tls", "0",  // loopback only (and its redis-server is plain)
                                    "--num-cpus", std::to_string(cpus)},
                                   dir + "/logs/raylet.log"));
  return sock;
}

std::string FindRaylet(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("address wants HOST:PORT, got " + address);
  const char* env = std::getenv("PHALANX_CLUSTER_TOKEN");
  std::string token = env ? env : "";
  auto c = RedisConnection::Open(address.substr(0, colon), std::stoi(address.substr(colon + 1)), token,
                                 TlsFromEnvironment(token), 5000);
  if (!c.ok()) throw std::runtime_error(c.status().message());
  auto r = c.value()->Command({"HGETALL", "nodes"});
  if (!r.ok()) throw std::runtime_error(r.status().message());
  std::string found;
  const auto& e = r.value().elements;
  for (size_t i = 1; i < e.size(); i += 2) {
    rpc::NodeInfo n;
    if (n.ParseFromString(e[i].str) && n.alive() && ::access(n.socket_path().c_str(), F_OK) == 0) {
      found = n.socket_path();
      break;
    }
  }
  if (found.empty()) throw std::runtime_error("no live raylet of the cluster at " + address + " on this machine");
  return found;
}

// PHALANX_STUCK_REPORT_S in ms (default 60 s; 0: no report), as the Python API reads it.
int64_t StuckReportMs() {
  const char* env = std::getenv("PHALANX_STUCK_REPORT_S");
  if (env == nullptr || *env == '\0') return 60000;
  char* end = nullptr;
  double s = std::strtod(env, &end);
  if (end == env) return 60000;
  return static_cast<int64_t>(std::max(0.0, s) * 1000);
}

// Where object `id` is, as the GCS knows it: its copies, or that its task has
// not finished (best effort: the GCS may be away).
std::string DescribeWaiting(const CoreWorker& core, const std::string& id) {
  std::string task = ToHex(TaskIdOf(id)).substr(0, 12);
  std::string address = core.gcs_address().substr(0, core.gcs_address().find(','));
  size_t colon = address.rfind(':');
  const char* env = std::getenv("PHALANX_CLUSTER_TOKEN");
  std::string token = env ? env : "";
  auto ask = [&]() -> Result<std::string> {
    if (colon == std::string::npos) return Status::InvalidArgument("no GCS address");
    PHALANX_ASSIGN_OR_RETURN(auto c, RedisConnection::Open(address.substr(0, colon), std::atoi(address.c_str() + colon + 1),
                                                           token, TlsFromEnvironment(token), 2000));
    PHALANX_ASSIGN_OR_RETURN(RedisReply dir, c->Command({"HGETALL", "objdir:" + ToHex(id)}));
    std::string nodes;
    for (size_t i = 0; i < dir.elements.size(); i += 2) {
      const std::string& k = dir.elements[i].str;
      if (k == "size" || k.rfind("srv:", 0) == 0 || k.rfind("cmp:", 0) == 0) continue;
      nodes += (nodes.empty() ? "" : ", ") + k.substr(0, 12);
    }
    if (!nodes.empty()) return "copies on node(s) " + nodes + " (being fetched)";
    PHALANX_ASSIGN_OR_RETURN(RedisReply all, c->Command({"HGETALL", "nodes"}));
    int alive = 0;
    for (size_t i = 1; i < all.elements.size(); i += 2) {
      rpc::NodeInfo n;
      if (n.ParseFromString(all.elements[i].str) && n.alive()) ++alive;
    }
    return "no copy anywhere yet: task " + task + " has not finished (" + std::to_string(alive) + " nodes alive)";
  };
  auto said = ask();
  return said.ok() ? said.value() : "task " + task + "; the GCS could not say more (" + said.status().message() + ")";
}

}  // namespace

// The worker loop: runs registered functions and actor methods until the raylet goes away.
[[noreturn]] void internal::RunWorkerLoop() {
  CoreWorkerOptions o;
  o.socket_path = std::getenv("PHALANX_RAYLET_SOCKET");
  o.worker_token = std::getenv("PHALANX_WORKER_TOKEN");
  o.is_worker = true;
  o.language = "cpp";
  auto cw = CoreWorker::Connect(o);
  if (!cw.ok()) {
    std::cerr << "phalanx C++ worker: " << cw.status().ToString() << "\n";
    std::_Exit(3);
  }
  CoreWorker& core = *cw.value();
  auto& reg = internal::Registry::Get();
  std::map<std::string, std::shared_ptr<void>> actors;
  while (true) {
    auto t = core.NextTask(-1);
    if (!t.ok()) std::_Exit(0);
    const rpc::TaskSpec& s = t.value().spec();
    std::string result, error;
    try {
      std::vector<std::string> args;
      int ref = 0;
      for (const auto& a : s.args()) {
        if (a.object_id().empty()) {
          args.push_back(a.data());
          continue;
        }
        const rpc::ObjectValue& v = t.value().ref_args(ref++);
        if (v.state() == rpc::OBJ_INLINE) {
          args.push_back(v.data());
        } else if (v.state() == rpc::OBJ_IN_STORE) {
          args.emplace_back(reinterpret_cast<const char*>(core.store_base() + v.offset()), v.size());
          core.Release(a.object_id());
        } else {
          throw RemoteError("an argument is unavailable: " + v.error());
        }
      }
      if (s.kind() == rpc::TASK_ACTOR_CREATION) {
        auto f = reg.factories.find(s.function_name());
        if (f == reg.factories.end()) throw RemoteError("no actor factory " + s.function_name() + " in this program");
        actors[s.actor_id()] = f->second(args);
        result = internal::Pack(msgpack::type::nil_t());
      } else {
        auto f = reg.invokers.find(s.function_name());
        if (f == reg.invokers.end()) throw RemoteError("no function " + s.function_name() + " in this program");
        void* self = nullptr;
        if (s.kind() == rpc::TASK_ACTOR_METHOD) {
          auto a = actors.find(s.actor_id());
          if (a == actors.end()) throw RemoteError("this worker hosts no such actor");
          self = a->second.get();
        }
        result = f->second(self, args);
      }
    } catch (const std::exception& e) {
      error = s.function_name() + " threw: " + e.what();
      result = internal::PackError(error);
    }
    rpc::TaskDone d;
    d.set_task_id(s.task_id());
    d.set_error(error);
    for (int i = 1; i <= s.num_returns(); ++i) {
      auto* r = d.add_returns();
      r->set_object_id(MakeObjectId(s.task_id(), static_cast<uint32_t>(i)));
      r->set_data(result);
    }
    if (!core.TaskDone(d).ok()) std::_Exit(0);
  }
}

namespace internal {

std::vector<std::string> SplitNames(const char* names) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = names;; ++p) {
    if (*p == ',' || *p == '\0') {
      size_t b = cur.find_first_not_of(" \t\n&"), e = cur.find_last_not_of(" \t\n");
      out.push_back(b == std::string::npos ? "" : cur.substr(b, e - b + 1));
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

std::string Submit(const std::string& name, const std::vector<Arg>& args, const std::map<std::string, double>& res,
                   int kind, const std::string& actor_id) {
  auto core = Core();
  TaskRequest req;
  req.kind = static_cast<rpc::TaskKind>(kind);
  req.language = rpc::LANGUAGE_CPP;
  req.function_id = "cpp:" + name;
  req.function_name = name;
  req.num_cpus = kind == rpc::TASK_NORMAL ? 1.0 : 0.0;
  for (const auto& [k, v] : res) {
    if (k == "CPU") {
      req.num_cpus = v;
    } else {
      req.resources[k] = v;
    }
  }
  req.max_retries = kind == rpc::TASK_NORMAL ? 3 : 0;
  if (kind == rpc::TASK_ACTOR_METHOD) {
    req.actor_id = actor_id;
    req.method_name = name;
  }
  rpc::TaskSpec spec = BuildTaskSpec(*core, std::move(req));
  for (const auto& a : args) {
    if (a.object_id.empty()) {
      AddValueArg(&spec, std::string(), a.data.data(), a.data.size());
    } else {
      AddRefArg(&spec, std::string(), a.object_id);
    }
  }
  Check(core->SubmitTask(spec));
  std::string ret = MakeObjectId(spec.task_id(), 1);
  core->AdoptLocalRef(ret);  // the raylet counts this process as holding it
  return ret;
}

std::string GetBytes(const std::string& object_id, int64_t timeout_ms) {
  auto core = Core();
  // The stuck-call report (docs/fault-tolerance.md): block up to the
  // threshold, say once what is still missing and where, then block for the rest.
  int64_t report_ms = StuckReportMs();
  bool probe = report_ms > 0 && (timeout_ms < 0 || timeout_ms > report_ms);
  auto r = core->Get({object_id}, probe ? report_ms : timeout_ms);
  Check(r.status());
  if (probe && r.value()[0].state() == rpc::OBJ_PENDING) {
    std::cerr << "phalanx::Get has waited " << report_ms / 1000 << " s for object " << ToHex(object_id)
              << " (still waiting): " << DescribeWaiting(*core, object_id)
              << ". `phalanx stack` shows what every worker is doing." << std::endl;
    r = core->Get({object_id}, timeout_ms < 0 ? timeout_ms : timeout_ms - report_ms);
    Check(r.status());
  }
  rpc::ObjectValue& v = r.value()[0];
  switch (v.state()) {
    case rpc::OBJ_INLINE: return v.data();
    case rpc::OBJ_IN_STORE: {
      std::string out(reinterpret_cast<const char*>(core->store_base() + v.offset()), v.size());
      core->Release(object_id);
      return out;
    }
    case rpc::OBJ_LOST: throw RemoteError(v.error());
    default: throw std::runtime_error("get timed out after " + std::to_string(timeout_ms) + " ms");
  }
}

void RemoveRef(const std::string& id) {
  std::shared_ptr<CoreWorker> c;
  {
    std::lock_guard<std::mutex> l(g_mu);
    c = g_core;
  }
  if (c) c->RemoveLocalRef(id);
}

}  // namespace internal

void Init(const std::string& address) { Init(InitOptions{address, {}}); }

void Init(const InitOptions& options) {
  if (std::getenv("PHALANX_CPP_WORKER") != nullptr && std::getenv("PHALANX_WORKER_TOKEN") != nullptr) {
    internal::RunWorkerLoop();
  }
  const std::string& address = options.address;
  if (!address.empty() && !options.code_libraries.empty()) {
    throw std::invalid_argument("code_libraries are for an embedded cluster: the nodes of a running cluster run "
                                "the C++ workers they were started with (phalanx start --cpp-worker-libs)");
  }
  std::string sock = address.empty() ? StartEmbedded(options.code_libraries) : FindRaylet(address);
  CoreWorkerOptions o;
  o.socket_path = sock;
  o.language = "cpp";
  o.connect_timeout_ms = 20000;
  auto cw = CoreWorker::Connect(o);
  Check(cw.status());
  std::lock_guard<std::mutex> l(g_mu);
  g_core = std::move(cw).value();
}

void Shutdown() {
  std::shared_ptr<CoreWorker> core;
  {
    std::lock_guard<std::mutex> l(g_mu);
    core = std::move(g_core);
  }
  if (core) core->Shutdown();
  for (auto it = g_started.rbegin(); it != g_started.rend(); ++it) StopProcess(*it);
  g_started.clear();
}

}  // namespace phalanx
