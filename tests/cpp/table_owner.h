// An ObjectTable::Owner for tests of parts that run on an object table
// without an ObjectManager: it records what the table tells its owner.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "objectstore/object_table.h"

namespace phalanx::objectstore {

class RecordingOwner : public ObjectTable::Owner {
 public:
  void Demand(const std::string& id, const std::string& node) override { demanded.emplace_back(id, node); }
  void Drop(const std::string& id, const std::string& node, uint32_t holds) override {
    dropped.emplace_back(id, node, holds);
  }
  void Freed(const std::string& id, bool) override { freed.push_back(id); }
  void StoreFull() override { ++store_full; }

  std::vector<std::pair<std::string, std::string>> demanded;          // (id, lender asked for it)
  std::vector<std::tuple<std::string, std::string, uint32_t>> dropped;  // (id, lender, holds released)
  std::vector<std::string> freed;
  int store_full = 0;  // times the store was full of mapped objects
};

}  // namespace phalanx::objectstore
