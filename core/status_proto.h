// Status <-> its wire form (rpc::Status), for replies between processes.
#pragma once

#include "core/proto/phalanx.pb.h"
#include "core/status.h"

namespace phalanx {

inline rpc::Status ToProto(const Status& s) {
  rpc::Status out;
  out.set_code(static_cast<int>(s.code()));
  out.set_message(s.message());
  return out;
}

inline Status FromProto(const rpc::Status& s) {
  if (s.code() == 0) return Status::OK();
  return Status(static_cast<StatusCode>(s.code()), s.message());
}

}  // namespace phalanx
