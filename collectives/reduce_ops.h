// Element-wise reduce kernels (sum, prod, min, max) over the numeric dtypes
// phalanx objects carry; the raylet's ReduceManager combines objects with
// them. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace phalanx::collectives {

enum class ReduceOp { kSum, kProd, kMin, kMax };
// The numbering is the object header's (code = DType + 1): new types go last.
enum class DType {
  kFloat16, kFloat32, kFloat64, kInt8, kInt16, kInt32, kInt64, kUInt8, kUInt16, kUInt32, kUInt64, kBFloat16
};

Result<ReduceOp> ParseReduceOp(const std::string& name);
const char* ReduceOpName(ReduceOp op);
// Names as numpy writes them ("float32", "int64", ...; "bfloat16" as torch does).
Result<DType> ParseDType(const std::string& name);
const char* DTypeName(DType t);
size_t DTypeSize(DType t);
// The element type numbered `code` in the object header (DType + 1; 0: none).
inline bool DTypeFromCode(uint32_t code, DType* out) {
  if (code == 0 || code > static_cast<uint32_t>(DType::kBFloat16) + 1) return false;
  *out = static_cast<DType>(code - 1);
  return true;
}

// acc[i] = op(acc[i], in[i]) for i < count. REQUIRES: both hold `count`
// elements of `type`; they may not overlap unless equal.
Status ReduceInto(ReduceOp op, DType type, void* acc, const void* in, size_t count);
// The same with the portable loops only (no CPU-specific instructions, such
// as F16C for float16): the reference the fast paths are tested against.
Status ReduceIntoPortable(ReduceOp op, DType type, void* acc, const void* in, size_t count);

}  // namespace phalanx::collectives
