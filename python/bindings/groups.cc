// phalanx._core.Group: one rank of a static group on its rank-to-rank
// connections (worker/group_channel.h) and the collectives over them
// (collectives/group_collectives.h), for python/phalanx/_private/
// collective_group.py. Every call runs with the GIL released; arrays are
// taken through the buffer protocol, in place (C-contiguous).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/group_collectives.h"
#include "python/bindings/py_core.h"

namespace phalanx::py {

namespace {

using collectives::GroupCall;
using collectives::GroupCollectives;

// A message's bytes, kept alive by whatever Python makes of them (a numpy
// array unpickled out of it points into it), then given back to the
// channel's spare bodies. They start on a 16-byte boundary (moved there if
// the message's head left them off one), so arrays of any dtype can lie in
// them.
class Received {
 public:
  Received(GroupLinks::Message m, std::shared_ptr<SpareBodies> spares) : m_(std::move(m)), spares_(std::move(spares)) {
    size_t misaligned = reinterpret_cast<uintptr_t>(m_.data()) % 16;
    if (misaligned != 0 && m_.offset >= misaligned) {
      std::memmove(m_.body.data() + m_.offset - misaligned, m_.data(), m_.size());
      m_.body.resize(m_.body.size() - misaligned);
      m_.offset -= misaligned;
    }
  }
  ~Received() { spares_->Give(std::move(m_.body)); }
  Received(const Received&) = delete;
  Received& operator=(const Received&) = delete;

  pyb::buffer_info Info() {
    return pyb::buffer_info(m_.body.data() + m_.offset, 1, "B", 1, {static_cast<pyb::ssize_t>(m_.size())}, {1},
                            /*readonly=*/false);
  }

 private:
  GroupLinks::Message m_;
  std::shared_ptr<SpareBodies> spares_;
};

constexpr size_t kCopiedBelow = 64 << 10;  // a message this small comes back copied (that costs less)

class Group {
 public:
  explicit Group(std::unique_ptr<GroupChannel> channel)
      : channel_(std::move(channel)), collectives_(channel_.get()) {}

  std::vector<std::string> addresses() const { return channel_->addresses(); }
  int waiting_for() const { return channel_ ? channel_->waiting_for() : -1; }
  int shared_memory_links() const { return channel_ ? channel_->shared_memory_links() : 0; }

  void Connect(const std::vector<std::tuple<pyb::bytes, std::vector<std::string>, std::string>>& peers,
               const std::string& nonce, int64_t timeout_ms) {
    std::vector<GroupChannel::Peer> ps;
    for (const auto& [node, addresses, name] : peers) ps.push_back({std::string(node), addresses, name});
    ThrowIfError(WithoutGil([&] { return channel_->Connect(ps, nonce, timeout_ms); }));
  }

  void Allreduce(uint64_t call, const std::string& what, const pyb::buffer& array, const std::string& dtype,
                 const std::string& op, int64_t timeout_ms) {
    auto [data, nbytes] = Writable(array);
    auto t = Parse(dtype, op);
    GroupCall c = Call(call, what, timeout_ms);
    size_t count = nbytes / collectives::DTypeSize(t.first);
    ThrowIfError(WithoutGil([&] { return collectives_.Allreduce(c, data, count, t.first, t.second); }));
  }

  void ReduceScatter(uint64_t call, const std::string& what, const pyb::buffer& array, const std::string& dtype,
                     const std::string& op, const std::vector<size_t>& cuts, int64_t timeout_ms) {
    auto [data, nbytes] = Writable(array);
    auto t = Parse(dtype, op);
    if (cuts.empty() || cuts.back() * collectives::DTypeSize(t.first) != nbytes) {
      throw pyb::value_error("reducescatter's cuts must end at the array's length");
    }
    GroupCall c = Call(call, what, timeout_ms);
    ThrowIfError(WithoutGil([&] { return collectives_.ReduceScatter(c, data, t.first, t.second, cuts); }));
  }

  void Broadcast(uint64_t call, const std::string& what, const pyb::buffer& array, int root, int64_t timeout_ms) {
    auto [data, nbytes] = Writable(array);
    GroupCall c = Call(call, what, timeout_ms);
    ThrowIfError(WithoutGil([&] { return collectives_.Broadcast(c, data, nbytes, root); }));
  }

  void Allgather(uint64_t call, const std::string& what, const pyb::buffer& blocks, int64_t timeout_ms) {
    auto [data, nbytes] = Writable(blocks);
    if (nbytes % channel_->world() != 0) throw pyb::value_error("allgather takes world blocks of one size");
    GroupCall c = Call(call, what, timeout_ms);
    size_t block = nbytes / channel_->world();
    ThrowIfError(WithoutGil([&] { return collectives_.Allgather(c, data, block); }));
  }

  void Barrier(uint64_t call, const std::string& what, int64_t timeout_ms) {
    GroupCall c = Call(call, what, timeout_ms);
    ThrowIfError(WithoutGil([&] { return collectives_.Barrier(c); }));
  }

  void Send(uint64_t call, const std::string& what, const pyb::buffer& array, int to, int64_t timeout_ms) {
    pyb::buffer_info info = array.request();
    CheckContiguous(info);
    GroupCall c = Call(call, what, timeout_ms);
    size_t nbytes = static_cast<size_t>(info.size) * info.itemsize;
    ThrowIfError(WithoutGil([&] { return collectives_.Send(c, to, info.ptr, nbytes); }));
  }

  void Recv(uint64_t call, const std::string& what, const pyb::buffer& array, int from, int64_t timeout_ms) {
    auto [data, nbytes] = Writable(array);
    GroupCall c = Call(call, what, timeout_ms);
    ThrowIfError(WithoutGil([&] { return collectives_.Recv(c, from, data, nbytes); }));
  }

  // One message to `to` (a compiled graph's edge): `parts`, a buffer or a
  // list of them (sent one after the other without joining them), written
  // out by `timeout_ms`.
  void SendBytes(uint64_t call, const std::string& what, const pyb::object& parts, int to, int64_t timeout_ms) {
    if (to < 0 || to >= channel_->world() || to == channel_->rank()) throw pyb::value_error("send to a rank of its own");
    std::vector<pyb::buffer_info> infos;
    if (pyb::isinstance<pyb::list>(parts)) {
      auto list = pyb::reinterpret_borrow<pyb::list>(parts);
      infos.reserve(list.size());
      for (auto p : list) infos.push_back(pyb::reinterpret_borrow<pyb::buffer>(p).request());
    } else {
      infos.push_back(pyb::reinterpret_borrow<pyb::buffer>(parts).request());
    }
    std::vector<GroupLinks::Part> bytes;
    bytes.reserve(infos.size());
    for (const auto& info : infos) {
      CheckContiguous(info);
      bytes.push_back({info.ptr, static_cast<size_t>(info.size) * info.itemsize});
    }
    GroupCall c = Call(call, what, timeout_ms);
    ThrowIfError(WithoutGil([&] {
      PHALANX_RETURN_IF_ERROR(channel_->SendParts(to, c.id, c.what, bytes));
      return channel_->Flush(c.deadline);
    }));
  }

  // The next message of `call` from `from`: a bytearray when small, else a
  // Received (its bytes, not copied). A timeout leaves the call open (its
  // message is taken by a later recv_bytes); with `whole_group`, any rank
  // gone fails it.
  pyb::object RecvBytes(uint64_t call, const std::string& what, int from, int64_t timeout_ms, bool whole_group) {
    GroupCall c = Call(call, what, timeout_ms);
    if (from < 0 || from >= channel_->world() || from == channel_->rank()) {
      throw pyb::value_error("recv from a rank of its own");
    }
    GroupLinks::Message m;
    ThrowIfError(WithoutGil([&] {
      auto got = channel_->Recv(from, c.id, c.what, c.deadline, whole_group);
      if (!got.ok()) return got.status();
      m = std::move(got.value());
      channel_->Done(c.id);
      return Status::OK();
    }));
    if (m.size() < kCopiedBelow) {
      pyb::bytearray out(m.data(), m.size());  // (writable: arrays unpickled out of it are too)
      WithoutGil([&] {  // (another thread may be in a call of this channel)
        channel_->Recycle(std::move(m.body));
        return 0;
      });
      return std::move(out);
    }
    return pyb::cast(std::make_unique<Received>(std::move(m), channel_->spare_bodies()));
  }

  void Close() {
    WithoutGil([&] {
      channel_.reset();
      return 0;
    });
  }

 private:
  static void CheckContiguous(const pyb::buffer_info& info) {
    pyb::ssize_t expect = info.itemsize;
    for (int d = info.ndim - 1; d >= 0; --d) {
      if (info.shape[d] > 1 && info.strides[d] != expect) throw pyb::value_error("the array must be C-contiguous");
      expect *= info.shape[d];
    }
  }
  std::pair<void*, size_t> Writable(const pyb::buffer& array) {
    if (!channel_) throw pyb::value_error("this group was destroyed");
    pyb::buffer_info info = array.request(/*writable=*/true);
    CheckContiguous(info);
    return {info.ptr, static_cast<size_t>(info.size) * info.itemsize};
  }
  static std::pair<collectives::DType, collectives::ReduceOp> Parse(const std::string& dtype, const std::string& op) {
    auto t = collectives::ParseDType(dtype);
    if (!t.ok()) throw pyb::value_error(t.status().message());
    auto o = collectives::ParseReduceOp(op);
    if (!o.ok()) throw pyb::value_error(o.status().message());
    return {t.value(), o.value()};
  }
  GroupCall Call(uint64_t call, const std::string& what, int64_t timeout_ms) {
    if (!channel_) throw pyb::value_error("this group was destroyed");
    GroupCall c;
    c.id = call;
    c.what = what;
    c.deadline = DeadlineAfterMs(timeout_ms);
    return c;
  }

  std::unique_ptr<GroupChannel> channel_;
  GroupCollectives collectives_;
};

}  // namespace

void BindGroups(pyb::module_& m) {
  pyb::class_<Received>(m, "Received", pyb::buffer_protocol()).def_buffer(&Received::Info);
  pyb::class_<Group>(m, "Group")
      .def_property_readonly("addresses", &Group::addresses)
      .def_property_readonly("waiting_for", &Group::waiting_for, "The rank a call waits for now (-1: none).")
      .def_property_readonly("shared_memory_links", &Group::shared_memory_links,
                             "How many of this rank's connections go through shared memory (ranks on its node).")
      .def("connect", &Group::Connect, pyb::arg("peers"), pyb::arg("nonce"), pyb::arg("timeout_ms"),
           "Joins the other ranks: peers = [(node id, addresses, name)] by rank, this one's included.")
      .def("allreduce", &Group::Allreduce)
      .def("reducescatter", &Group::ReduceScatter)
      .def("broadcast", &Group::Broadcast)
      .def("allgather", &Group::Allgather)
      .def("barrier", &Group::Barrier)
      .def("send", &Group::Send)
      .def("recv", &Group::Recv)
      .def("send_bytes", &Group::SendBytes, pyb::arg("call"), pyb::arg("what"), pyb::arg("parts"), pyb::arg("to"),
           pyb::arg("timeout_ms"))
      .def("recv_bytes", &Group::RecvBytes, pyb::arg("call"), pyb::arg("what"), pyb::arg("src"),
           pyb::arg("timeout_ms"), pyb::arg("whole_group"))
      .def("close", &Group::Close, "Closes every connection (the other ranks see this rank gone).");
  m.def(
      "open_group",
      [](const std::string& group, int rank, int world) {
        auto core = RequireCore();
        auto ch = core->OpenGroupChannel(group, rank, world);
        ThrowIfError(ch.status());
        return std::make_unique<Group>(std::move(ch.value()));
      },
      pyb::arg("group"), pyb::arg("rank"), pyb::arg("world"),
      "This process's connections as `rank` of `world` in static group `group`, listening (Group.connect next).");
}

}  // namespace phalanx::py
