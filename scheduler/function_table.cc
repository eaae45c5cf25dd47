#include "scheduler/function_table.h"

#include "core/status_proto.h"

namespace phalanx::scheduler {

namespace {
// How long a function registered on another node may take to reach the GCS.
constexpr auto kFunctionWait = std::chrono::seconds(5);
constexpr auto kAskAgain = std::chrono::milliseconds(20);
}  // namespace

void FunctionTable::AddRoutes(Router& router) {
  using C = const std::shared_ptr<Client>&;
  router.OnClient(rpc::REGISTER_FUNCTION, "function", [this](C, uint64_t, const char* b, size_t n) {
    rpc::RegisterFunction m;
    if (!ParseBody(&m, b, n)) return false;
    if (!functions_.count(m.function_id())) gcs_->PutFunction(m);  // for the other nodes
    functions_[m.function_id()] = Function{m.name(), std::move(*m.mutable_pickled())};
    return true;
  });
  router.OnClient(rpc::GET_FUNCTION, "function request", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::GetFunction m;
    if (!ParseBody(&m, b, n)) return false;
    auto it = functions_.find(m.function_id());
    if (it == functions_.end()) {
      LookUp(c, req, m.function_id(), std::chrono::steady_clock::now() + kFunctionWait);
      return true;
    }
    rpc::GetFunctionReply r;
    r.set_name(it->second.name);
    r.set_pickled(it->second.pickled);
    Clients::Reply(*c, rpc::GET_FUNCTION, req, r);
    return true;
  });
}

void FunctionTable::LookUp(const std::shared_ptr<Client>& c, uint64_t req, const std::string& function_id,
                           std::chrono::steady_clock::time_point give_up) {
  std::weak_ptr<Client> weak = c;
  gcs_->GetFunction(function_id, [this, weak, req, function_id, give_up](Result<rpc::RegisterFunction> f) {
    auto cl = weak.lock();
    if (!cl) return;
    // The node that registered it may not have written it to the GCS yet
    // (its task can arrive here first): ask again for a few seconds.
    if (!f.ok() && f.status().code() == StatusCode::kNotFound && std::chrono::steady_clock::now() < give_up &&
        !stopped_) {
      auto timer = std::make_shared<boost::asio::steady_timer>(io_, kAskAgain);
      timer->async_wait([this, timer, weak, req, function_id, give_up](auto ec) {
        if (auto again = weak.lock(); again && !ec) LookUp(again, req, function_id, give_up);
      });
      return;
    }
    rpc::GetFunctionReply r;
    if (f.ok()) {
      functions_[f.value().function_id()] = Function{f.value().name(), f.value().pickled()};
      r.set_name(f.value().name());
      r.set_pickled(f.value().pickled());
    } else {
      *r.mutable_status() = ToProto(f.status());
    }
    Clients::Reply(*cl, rpc::GET_FUNCTION, req, r);
  });
}

size_t FunctionTable::Republish() {
  for (const auto& [id, f] : functions_) {
    rpc::RegisterFunction m;
    m.set_function_id(id);
    m.set_name(f.name);
    m.set_pickled(f.pickled);
    gcs_->PutFunction(m);
  }
  return functions_.size();
}

}  // namespace phalanx::scheduler
