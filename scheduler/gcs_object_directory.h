// GcsObjectDirectory: the object directory in the GCS, as this node's
// transfers see it (objectstore::ObjectDirectory): which copy to read,
// readers counted per copy, and this node's copies listed and unlisted.
// Not thread-safe; the raylet's loop.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gcs/gcs_client.h"
#include "objectstore/object_transfer.h"

namespace phalanx::scheduler {

class GcsObjectDirectory final : public objectstore::ObjectDirectory {
 public:
  // `gcs` is owned by the raylet and outlives this; not used before the first copy.
  GcsObjectDirectory(GcsClient* gcs, std::string node_id) : gcs_(gcs), node_id_(std::move(node_id)) {}

  void Pick(const std::string& id, const std::string& hint, bool resuming, bool list,
            const std::vector<std::string>& exclude, std::function<void(Result<std::string>)> done) override {
    gcs_->PickSource(id, node_id_, hint, resuming, list, exclude, std::move(done));
  }
  void Serving(const std::string& id, const std::string& node, int delta) override {
    gcs_->AdjustServing(id, node, delta);
  }
  void Located(const std::string& id, uint64_t size, uint64_t bytes, bool complete) override {
    rpc::ObjectLocation loc;
    loc.set_node_id(node_id_);
    loc.set_complete(complete);
    loc.set_bytes_present(bytes);
    gcs_->AddObjectLocation(id, size, loc);
  }
  void Unlisted(const std::string& id) override { gcs_->RemoveObjectLocation(id, node_id_); }
  void DeviceLocated(const std::string& id, uint64_t size, const std::string& device) override {
    rpc::ObjectLocation loc;
    loc.set_node_id(node_id_);
    loc.set_complete(true);
    loc.set_bytes_present(size);
    loc.set_device(device);
    gcs_->AddObjectLocation(id, size, loc);
  }

 private:
  GcsClient* gcs_;
  std::string node_id_;
};

}  // namespace phalanx::scheduler
