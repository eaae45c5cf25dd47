// CoreWorker's side of generators (docs/architecture.md, "Generators"): a
// generator task hands in its items one by one and waits for credit; a
// caller reads them and lets go of the stream.
#include "core/core_worker.h"
#include "core/ids.h"
#include "core/status_proto.h"

namespace phalanx {

Status CoreWorker::StreamItem(rpc::TaskDone item) {
  item.set_item(true);
  uint64_t conn = 0;
  bool held = false;
  {
    std::lock_guard<std::mutex> l(server_mu_);
    auto it = running_direct_.find(item.task_id());
    if (it != running_direct_.end()) conn = it->second.conn;
    FillReturnSizesLocked(&item);
  }
  for (const auto& r : item.returns()) held = held || r.in_store();
  if (held) {
    // Held by this worker until the caller's raylet takes them over; the
    // seal must reach this node's raylet before anyone asks it for them.
    item.set_release_holder(client_id_);
    item.set_holder_node(node_id_);
  }
  if (conn == 0) return Send(rpc::TASK_DONE, item);  // (the raylet passes it on to the caller's node)
  if (held) PHALANX_RETURN_IF_ERROR(Flush());
  Status st = Io()->Send(conn, EncodeFrame(rpc::DIRECT_DONE, 0, 0, item));
  if (!st.ok() && held) return ReleaseHeldReturns(item);  // the caller is gone, and whoever would read it
  return Status::OK();
}

Result<rpc::StreamCreditReply> CoreWorker::StreamCredit(const std::string& task_id, uint64_t need,
                                                       int64_t timeout_ms) {
  rpc::StreamCredit m;
  m.set_task_id(task_id);
  m.set_need(need);
  m.set_timeout_ms(timeout_ms);
  {
    std::lock_guard<std::mutex> l(server_mu_);
    auto it = stream_owners_.find(task_id);
    if (it == stream_owners_.end()) return Status::InvalidArgument("no generator task " + ToHex(task_id) + " runs here");
    m.set_owner_node(it->second);
  }
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::StreamCreditReply>(rpc::STREAM_CREDIT, m, timeout_ms + 5000,
                                                                   "stream credit"));
  return r;
}

Result<rpc::StreamNextReply> CoreWorker::StreamNext(const std::string& task_id, uint64_t consumed,
                                                   int64_t timeout_ms) {
  FlushDirect();  // (a generator call queued on a direct connection goes out first)
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
  return Send(rpc::STREAM_DROP, m);
}

}  // namespace phalanx
