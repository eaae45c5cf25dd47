// Test helpers: numpy-style array values in a node's store, laid out as
// python/bindings/serialization.cc writes them (header, one buffer length,
// a pickle stand-in, the elements 64-byte aligned), and read back.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectives/reduce_manager.h"
#include "core/value_format.h"
#include "objectstore/object_store.h"
#include "objectstore/object_table.h"

namespace phalanx::collectives::testing {

// Makes `id` (pending in `table`) a store value holding `data` as an array of
// `dtype`; `kind` value_format::kKindError makes it a task's error instead.
template <typename T>
void SealArray(objectstore::ObjectTable& table, objectstore::ObjectStore& store, const std::string& id,
               const std::vector<T>& data, DType dtype, uint32_t kind = value_format::kKindValue, bool seal = true) {
  const std::string meta = "pickled array header";
  uint64_t bytes = data.size() * sizeof(T);
  uint64_t data_off = value_format::AlignBuffer(value_format::HeaderSize(1) + meta.size());
  auto off = table.CreateInStore(id, data_off + bytes, {});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  uint8_t* p = store.base() + off.value();
  uint32_t head[4] = {value_format::kMagic, kind, 1, static_cast<uint32_t>(dtype) + 1};
  uint64_t meta_len = meta.size();
  std::memcpy(p, head, 16);
  std::memcpy(p + 16, &meta_len, 8);
  std::memcpy(p + 24, &bytes, 8);
  std::memcpy(p + value_format::HeaderSize(1), meta.data(), meta.size());
  std::memcpy(p + data_off, data.data(), bytes);
  if (seal) ASSERT_TRUE(table.SealInStore(id).ok());  // (seal = false: written, left for the caller to seal)
}

// The elements of array value `id` in the store (empty, with a failure, if it is not one).
template <typename T>
std::vector<T> ReadArray(objectstore::ObjectTable& table, objectstore::ObjectStore& store, const std::string& id) {
  rpc::ObjectValue v;
  table.Describe(id, &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_IN_STORE) << v.error();
  if (v.state() != rpc::OBJ_IN_STORE) return {};
  const uint8_t* p = store.base() + v.offset();
  auto layout = ParseArray(p, v.size());
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  if (!layout.ok()) return {};
  std::vector<T> out(layout.value().data_bytes / sizeof(T));
  std::memcpy(out.data(), p + layout.value().data_offset, layout.value().data_bytes);
  return out;
}

}  // namespace phalanx::collectives::testing
