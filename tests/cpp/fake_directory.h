// An ObjectDirectory whose answers a test gives as functions, each optional:
// without `pick` a reader is pointed at its hint; the others do nothing.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "objectstore/object_transfer.h"

namespace phalanx::objectstore {

struct FakeDirectory final : ObjectDirectory {
  std::function<void(const std::string& id, const std::string& hint, bool resuming, bool list,
                     const std::vector<std::string>& exclude, std::function<void(Result<std::string>)>)>
      pick;
  std::function<void(const std::string& id, const std::string& node, int delta)> serving;
  std::function<void(const std::string& id, uint64_t size, uint64_t bytes, bool complete)> located;
  std::function<void(const std::string& id)> unlisted;
  std::function<void(const std::string& id, uint64_t size, const std::string& device)> device_located;

  void Pick(const std::string& id, const std::string& hint, bool resuming, bool list,
            const std::vector<std::string>& exclude, std::function<void(Result<std::string>)> done) override {
    if (pick) return pick(id, hint, resuming, list, exclude, std::move(done));
    done(hint);
  }
  void Serving(const std::string& id, const std::string& node, int delta) override {
    if (serving) serving(id, node, delta);
  }
  void Located(const std::string& id, uint64_t size, uint64_t bytes, bool complete) override {
    if (located) located(id, size, bytes, complete);
  }
  void Unlisted(const std::string& id) override {
    if (unlisted) unlisted(id);
  }
  void DeviceLocated(const std::string& id, uint64_t size, const std::string& device) override {
    if (device_located) device_located(id, size, device);
  }
};

// A RefLender that records what it lends.
struct RecordingLender final : RefLender {
  std::function<void(const std::string& node, const std::string& id)> lend;
  void Lend(const std::string& node, const std::string& id) override {
    if (lend) lend(node, id);
  }
  void Release(const std::string&, const std::vector<std::string>&) override {}
};

}  // namespace phalanx::objectstore
