#include "collectives/group_collectives.h"

#include <algorithm>
#include <cstring>

namespace phalanx::collectives {

namespace {

int Mod(int64_t k, int n) { return static_cast<int>(((k % n) + n) % n); }

}  // namespace

std::vector<size_t> GroupCollectives::EvenCuts(size_t count, int parts) {
  std::vector<size_t> cuts(parts + 1, 0);
  size_t base = count / parts, extra = count % parts;
  for (int k = 0; k < parts; ++k) cuts[k + 1] = cuts[k] + base + (static_cast<size_t>(k) < extra ? 1 : 0);
  return cuts;
}

Status GroupCollectives::Finish(const GroupCall& c, Status st) {
  if (st.ok()) st = links_->Flush(c.deadline);
  if (!st.ok()) links_->Abort(c.id, links_->Name(links_->rank()) + ": " + st.message());
  links_->Done(c.id);
  return st;
}

Status GroupCollectives::Take(const GroupCall& c, int from, char* into, size_t nbytes, bool whole_group,
                              const ReduceOp* op, DType type) {
  PHALANX_ASSIGN_OR_RETURN(auto m, links_->Recv(from, c.id, c.what, c.deadline, whole_group));
  if (m.size() != nbytes) {
    return Status(StatusCode::kCollectiveFailed, links_->Name(from) + " sent " + std::to_string(m.size()) +
                                                     " bytes where this rank expected " + std::to_string(nbytes));
  }
  Status st = op != nullptr ? ReduceInto(*op, type, into, m.data(), nbytes / DTypeSize(type)) : Status::OK();
  if (op == nullptr && nbytes > 0) std::memcpy(into, m.data(), nbytes);
  links_->Recycle(std::move(m.body));
  return st;
}

Status GroupCollectives::PutAll(const GroupCall& c, int to, const char* data, size_t nbytes) {
  size_t at = 0;
  do {
    size_t n = std::min(kChunkBytes, nbytes - at);
    PHALANX_RETURN_IF_ERROR(links_->Send(to, c.id, c.what, data + at, n));
    at += n;
  } while (at < nbytes);
  return Status::OK();
}

Status GroupCollectives::TakeAll(const GroupCall& c, int from, char* into, size_t nbytes, bool whole_group) {
  size_t at = 0;
  do {
    size_t n = std::min(kChunkBytes, nbytes - at);
    PHALANX_RETURN_IF_ERROR(Take(c, from, into + at, n, whole_group));
    at += n;
  } while (at < nbytes);
  return Status::OK();
}

Status GroupCollectives::Allreduce(const GroupCall& c, void* data, size_t count, DType type, ReduceOp op) {
  const int n = links_->world();
  if (n == 1) return Finish(c, Status::OK());
  char* p = static_cast<char*>(data);
  if (count * DTypeSize(type) < kSmallBytes || count < static_cast<size_t>(n)) {
    return Finish(c, RecursiveDoubling(c, p, count, type, op));
  }
  return Finish(c, Ring(c, p, type, op, EvenCuts(count, n), /*gather=*/true));
}

Status GroupCollectives::ReduceScatter(const GroupCall& c, void* data, DType type, ReduceOp op,
                                       const std::vector<size_t>& cuts) {
  const int n = links_->world();
  if (cuts.size() != static_cast<size_t>(n) + 1 || !std::is_sorted(cuts.begin(), cuts.end()) || cuts[0] != 0) {
    return Status::InvalidArgument("reducescatter takes world + 1 ascending cuts from 0");
  }
  if (n == 1) return Finish(c, Status::OK());
  return Finish(c, Ring(c, static_cast<char*>(data), type, op, cuts, /*gather=*/false));
}

Status GroupCollectives::Barrier(const GroupCall& c) {
  if (links_->world() == 1) return Finish(c, Status::OK());
  return Finish(c, RecursiveDoubling(c, nullptr, 0, DType::kUInt8, ReduceOp::kSum));
}

Status GroupCollectives::RecursiveDoubling(const GroupCall& c, char* data, size_t count, DType type, ReduceOp op) {
  const int n = links_->world(), r = links_->rank();
  const size_t nbytes = count * DTypeSize(type);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;  // ranks 0 .. 2*rem-1 pair up first: the even one folds into the odd one
  int vr;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      PHALANX_RETURN_IF_ERROR(links_->Send(r + 1, c.id, c.what, data, nbytes));
      return Take(c, r + 1, data, nbytes, true);  // the result, from its partner
    }
    PHALANX_RETURN_IF_ERROR(Take(c, r - 1, data, nbytes, true, &op, type));
    vr = r / 2;
  } else {
    vr = r - rem;
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    int pv = vr ^ mask;
    int partner = pv < rem ? pv * 2 + 1 : pv + rem;
    PHALANX_RETURN_IF_ERROR(links_->Send(partner, c.id, c.what, data, nbytes));
    PHALANX_RETURN_IF_ERROR(Take(c, partner, data, nbytes, true, &op, type));
  }
  if (r < 2 * rem) return links_->Send(r - 1, c.id, c.what, data, nbytes);
  return Status::OK();
}

// Slice k (mod n) is elements cuts[k] .. cuts[k+1]. Reduce-scatter step s
// (0 .. n-2): rank r sends slice r-s-1 to the next rank and combines slice
// r-s-2 from the previous one into its own, so after n-1 steps slice r holds
// every rank's part. Allgather step s: r sends slice r-s, receives r-s-1.
// What a rank receives at one step is what it sends at the next, so each
// piece goes on as soon as it is combined: the steps overlap.
Status GroupCollectives::Ring(const GroupCall& c, char* data, DType type, ReduceOp op, const std::vector<size_t>& cuts,
                              bool gather) {
  const int n = links_->world(), r = links_->rank();
  const size_t es = DTypeSize(type);
  const size_t piece = std::max<size_t>(es, kChunkBytes / es * es);
  const int next = Mod(r + 1, n), prev = Mod(r - 1, n);
  auto each_piece = [&](int slice, auto&& fn) -> Status {
    int k = Mod(slice, n);
    size_t begin = cuts[k] * es, end = cuts[k + 1] * es;
    for (size_t at = begin; at < end; at += piece) {
      PHALANX_RETURN_IF_ERROR(fn(data + at, std::min(piece, end - at)));
    }
    return Status::OK();
  };
  auto send = [&](char* at, size_t len) { return links_->Send(next, c.id, c.what, at, len); };
  PHALANX_RETURN_IF_ERROR(each_piece(r - 1, send));
  const int steps = gather ? 2 * (n - 1) : n - 1;
  for (int s = 0; s < steps; ++s) {
    const bool reducing = s < n - 1;
    const int slice = reducing ? r - s - 2 : r - (s - (n - 1)) - 1;
    PHALANX_RETURN_IF_ERROR(each_piece(slice, [&](char* at, size_t len) -> Status {
      PHALANX_RETURN_IF_ERROR(Take(c, prev, at, len, true, reducing ? &op : nullptr, type));
      return s + 1 < steps ? send(at, len) : Status::OK();
    }));
  }
  return Status::OK();
}

Status GroupCollectives::Broadcast(const GroupCall& c, void* data, size_t nbytes, int root) {
  const int n = links_->world();
  if (root < 0 || root >= n) return Status::InvalidArgument("broadcast from rank " + std::to_string(root));
  if (n == 1) return Finish(c, Status::OK());
  char* p = static_cast<char*>(data);
  return Finish(c, nbytes < kSmallBytes ? Tree(c, p, nbytes, root) : Chain(c, p, nbytes, root));
}

Status GroupCollectives::Tree(const GroupCall& c, char* data, size_t nbytes, int root) {
  const int n = links_->world();
  const int vr = Mod(links_->rank() - root, n);  // rank relative to the root
  int mask = 1;
  while (mask < n && vr >= mask) mask <<= 1;  // the round this rank receives in: vr < 2*mask
  if (vr > 0) PHALANX_RETURN_IF_ERROR(Take(c, Mod(vr - mask / 2 + root, n), data, nbytes, true));
  for (; mask < n; mask <<= 1) {
    if (vr + mask < n) PHALANX_RETURN_IF_ERROR(links_->Send(Mod(vr + mask + root, n), c.id, c.what, data, nbytes));
  }
  return Status::OK();
}

Status GroupCollectives::Chain(const GroupCall& c, char* data, size_t nbytes, int root) {
  const int n = links_->world();
  const int vr = Mod(links_->rank() - root, n);
  const int next = vr + 1 < n ? Mod(vr + 1 + root, n) : -1, prev = Mod(vr - 1 + root, n);
  for (size_t at = 0; at < nbytes; at += kChunkBytes) {
    size_t len = std::min(kChunkBytes, nbytes - at);
    if (vr > 0) PHALANX_RETURN_IF_ERROR(Take(c, prev, data + at, len, true));
    if (next >= 0) PHALANX_RETURN_IF_ERROR(links_->Send(next, c.id, c.what, data + at, len));
  }
  return Status::OK();
}

Status GroupCollectives::Allgather(const GroupCall& c, void* out, size_t nbytes) {
  const int n = links_->world(), r = links_->rank();
  if (n == 1) return Finish(c, Status::OK());
  char* p = static_cast<char*>(out);
  auto block = [&](int k) { return p + static_cast<size_t>(Mod(k, n)) * nbytes; };
  Status st = PutAll(c, Mod(r + 1, n), block(r), nbytes);
  for (int s = 0; st.ok() && s < n - 1; ++s) {
    st = TakeAll(c, Mod(r - 1, n), block(r - s - 1), nbytes, true);
    if (st.ok() && s + 1 < n - 1) st = PutAll(c, Mod(r + 1, n), block(r - s - 1), nbytes);
  }
  return Finish(c, st);
}

Status GroupCollectives::Send(const GroupCall& c, int to, const void* data, size_t nbytes) {
  if (to < 0 || to >= links_->world() || to == links_->rank()) {
    return Status::InvalidArgument("send to rank " + std::to_string(to));
  }
  return Finish(c, PutAll(c, to, static_cast<const char*>(data), nbytes));
}

Status GroupCollectives::Recv(const GroupCall& c, int from, void* data, size_t nbytes) {
  if (from < 0 || from >= links_->world() || from == links_->rank()) {
    return Status::InvalidArgument("recv from rank " + std::to_string(from));
  }
  return Finish(c, TakeAll(c, from, static_cast<char*>(data), nbytes, /*whole_group=*/false));
}

}  // namespace phalanx::collectives
