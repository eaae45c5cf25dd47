#include "core/frame.h"

#include "core/proto/phalanx.pb.h"

namespace phalanx {

uint32_t MaxFrameBody(uint16_t type, uint16_t flags) {
  bool reply = (flags & kReplyFlag) != 0;
  switch (type) {
    case rpc::AUTH_HELLO:
    case rpc::AUTH_CHALLENGE:
    case rpc::AUTH_PROOF:
      return kHandshakeBody;
    // Fixed fields; their replies are small too, except those that carry values.
    case rpc::REGISTER_CLIENT:
    case rpc::GET_STATS:
    case rpc::GET_ACTOR:
    case rpc::KILL_ACTOR:
    case rpc::SEAL_OBJECT:
    case rpc::ABORT_CREATE:
    case rpc::EXIT_WORKER:
    case rpc::RAYLET_FAILING:
    case rpc::CLIENT_WARNING:
    case rpc::UNMAP_IDLE:
    case rpc::DIRECT_HELLO:
    case rpc::REDUCE_STEP:
    case rpc::STREAM_NEXT:
    case rpc::STREAM_CREDIT:
    case rpc::CANCEL_TASK:
    case rpc::PG_REMOVE:
    case rpc::BUNDLE_PREPARE:
    case rpc::BUNDLE_COMMIT:
    case rpc::BUNDLE_RETURN:
    case rpc::GROUP_HELLO:
    case rpc::GROUP_ABORT:
    case rpc::WORKER_OUTPUT:  // (60 KiB of text at most: scheduler/output_relay.h)
    case rpc::METRICS_REPORT:  // (the client splits a larger report)
    case rpc::WORKER_BLOCKED:
    case rpc::WORKER_UNBLOCKED:
      return kSmallBody;
    case rpc::PG_CREATE:
      return kListBody;  // (up to 10,000 bundles)
    case rpc::PG_GET:
      return reply ? kListBody : kSmallBody;
    case rpc::ACTOR_CHECKPOINT:
      return kValueBody;  // (its own cap is the raylet's --checkpoint-max-bytes)
    case rpc::GET_FUNCTION:
    case rpc::PULL_OBJECT:
      return reply ? kValueBody : kSmallBody;  // a pickled function; a range of an object
    // Lists of ids (and the payloads of a rendezvous).
    case rpc::GET_OBJECTS:
      return reply ? kMaxFrameBody : kListBody;  // the raylet's answer: inline values, to a local client
    case rpc::TRACE_COLLECT:
      return reply ? kMaxFrameBody : kSmallBody;  // a node's trace rings (8 MiB for the raylet, 2 MiB a worker)
    case rpc::MEMORY_SUMMARY:
      return reply ? kMaxFrameBody : kSmallBody;  // up to max_objects per node
    case rpc::WAIT_OBJECTS:
    case rpc::CREATE_OBJECT:
    case rpc::RELEASE_OBJECTS:
    case rpc::UPDATE_REFS:
    case rpc::TASKS_RECALLED:
    case rpc::ACTOR_ROUTE:
    case rpc::EXPECT_RETURNS:
    case rpc::FETCH_OBJECTS:
    case rpc::LEND_REFS:
    case rpc::REDUCE_OBJECTS:
    case rpc::REDUCED_INPUTS:
    case rpc::RELEASE_HELD:
    case rpc::DROP_PARTIALS:
    case rpc::ASSEMBLE_SLICES:
    case rpc::RENDEZVOUS:
    case rpc::LOSE_OBJECTS:
    case rpc::RECALL_TASKS:
    case rpc::STREAM_DROP:
    case rpc::DEVICE_HELD:
    case rpc::DEVICE_OBJECTS_FREED:
    case rpc::GROUP_DATA:  // (a chunk of a call: GroupCollectives::kChunkBytes and a small head)
      return kListBody;
    // Tasks and results with their inline values.
    case rpc::SUBMIT_TASK:
    case rpc::PUT_INLINE:
    case rpc::REGISTER_FUNCTION:
    case rpc::TASK_DONE:
    case rpc::DIRECT_RESULTS:
    case rpc::FORWARD_TASK:
    case rpc::PUSH_TASK:
    case rpc::DIRECT_CALL:
    case rpc::DIRECT_DONE:
    case rpc::STREAM_ITEMS:
      return kValueBody;
    default:
      return 0;
  }
}

Status ValidateHeader(const FrameHeader& h) {
  if (h.flags > kReplyFlag) {
    return Status::InvalidArgument("malformed frame: unknown flags " + std::to_string(h.flags));
  }
  uint32_t limit = MaxFrameBody(h.type, h.flags);
  if (limit == 0) {
    return Status::InvalidArgument("malformed frame: unknown message type " + std::to_string(h.type));
  }
  if (h.length > limit) {
    return Status::InvalidArgument("malformed frame: a message of type " + std::to_string(h.type) + " of " +
                                   std::to_string(h.length) + " bytes exceeds its limit of " +
                                   std::to_string(limit));
  }
  return Status::OK();
}

std::string EncodeFrame(uint16_t type, uint16_t flags, uint64_t request_id,
                        const google::protobuf::MessageLite& body) {
  size_t n = body.ByteSizeLong();
  std::string out(kFrameHeaderSize + n, '\0');
  FrameHeader h{static_cast<uint32_t>(n), type, flags, request_id};
  EncodeHeader(h, out.data());
  body.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out.data() + kFrameHeaderSize));
  return out;
}

}  // namespace phalanx
