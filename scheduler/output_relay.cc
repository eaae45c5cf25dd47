#include "scheduler/output_relay.h"

#include "core/proto/phalanx.pb.h"
#include "scheduler/clients.h"

namespace phalanx::scheduler {

void OutputRelay::AddRoutes(Router& router) {
  router.OnClient(rpc::WORKER_OUTPUT, "worker output",
                  [this](const std::shared_ptr<Client>& c, uint64_t, const char* b, size_t n) {
                    rpc::WorkerOutput m;
                    if (!ParseBody(&m, b, n) || m.job_id().empty() || m.job_id().size() > kMaxJobId ||
                        m.source().size() > kMaxSource || m.text().size() > kMaxText) {
                      return false;
                    }
                    if (!c->is_worker || m.text().empty()) return true;  // (a driver prints its own)
                    gcs_->AppendOutput(m.job_id(), GcsClient::OutputLines{c->pid, node_ip_, m.source(), m.is_err(),
                                                                          m.text()});
                    return true;
                  });
}

}  // namespace phalanx::scheduler
