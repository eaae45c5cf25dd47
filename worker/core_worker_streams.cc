// CoreWorker's caller side of generators (docs/architecture.md,
// "Generators"): a caller reads the items and lets go of the stream. (The
// generator task's side, items and credit, is the TaskServer's.)
#include "core/ids.h"
#include "core/status_proto.h"
#include "worker/core_worker.h"

namespace phalanx {

Result<rpc::StreamNextReply> CoreWorker::StreamNext(const std::string& task_id, uint64_t consumed,
                                                   int64_t timeout_ms) {
  io_.Flush();  // (a generator call queued on a direct connection goes out first)
  rpc::StreamNext m;
  m.set_task_id(task_id);
  m.set_consumed(consumed);
  m.set_timeout_ms(timeout_ms);
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::StreamNextReply>(rpc::STREAM_NEXT, m, timeout_ms, "stream read"));
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  return r;
}

Status CoreWorker::StreamDrop(const std::string& task_id) {
  rpc::TaskIds m;
  m.add_task_ids(task_id);
  return channel_.Send(rpc::STREAM_DROP, m);
}

}  // namespace phalanx
