#include "collectives/reduce_ops.h"

#include <algorithm>
#include <cmath>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <cstdint>
#include <cstring>

namespace phalanx::collectives {
namespace {

template <typename T, typename F>
void Apply(void* acc, const void* in, size_t n, F f) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i) a[i] = f(a[i], b[i]);
}

template <typename T>
void ApplyOp(ReduceOp op, void* acc, const void* in, size_t n) {
  switch (op) {
    case ReduceOp::kSum: return Apply<T>(acc, in, n, [](T x, T y) { return static_cast<T>(x + y); });
    case ReduceOp::kProd: return Apply<T>(acc, in, n, [](T x, T y) { return static_cast<T>(x * y); });
    case ReduceOp::kMin: return Apply<T>(acc, in, n, [](T x, T y) { return std::min(x, y); });
    case ReduceOp::kMax: return Apply<T>(acc, in, n, [](T x, T y) { return std::max(x, y); });
  }
}

// IEEE half <-> float, for float16 arrays (combined in float precision,
// rounded to nearest even as numpy and torch do).
float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// x >> shift, rounded to nearest, ties to even (IEEE's default, as numpy
// and torch round).
uint32_t RoundShift(uint32_t x, uint32_t shift) {
  uint32_t kept = x >> shift, rest = x & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  return kept + ((rest > halfway || (rest == halfway && (kept & 1))) ? 1 : 0);
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200 : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    return static_cast<uint16_t>(sign | RoundShift(mant, shift));
  }
  // A carry out of the mantissa steps the exponent up (to infinity from the top).
  return static_cast<uint16_t>(sign | ((static_cast<uint32_t>(exp) << 10) + RoundShift(mant, 13)));
}

// bfloat16 is the top half of a float32: widening is a shift, narrowing
// rounds to nearest, ties to even (as torch does); a NaN stays a NaN.
float BFloat16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
  uint32_t quiet_nan = (x >> 16) | 0x40;
  // (a select, not a branch: the loop around it vectorises)
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// A 16-bit float type combined in float precision: `widen` and `narrow`
// convert one element. The op is chosen outside the loop, so the loop is
// one straight line (vectorised for bfloat16).
template <float (*widen)(uint16_t), uint16_t (*narrow)(float), typename F>
__attribute__((always_inline)) inline void ApplyHalfWith(void* acc, const void* in, size_t n, F f) {
  auto* a = static_cast<uint16_t*>(acc);
  const auto* b = static_cast<const uint16_t*>(in);
  for (size_t i = 0; i < n; ++i) a[i] = narrow(f(widen(a[i]), widen(b[i])));
}

template <float (*widen)(uint16_t), uint16_t (*narrow)(float)>
__attribute__((always_inline)) inline void ApplyHalf(ReduceOp op, void* acc, const void* in, size_t n) {
  switch (op) {
    case ReduceOp::kSum: return ApplyHalfWith<widen, narrow>(acc, in, n, [](float x, float y) { return x + y; });
    case ReduceOp::kProd: return ApplyHalfWith<widen, narrow>(acc, in, n, [](float x, float y) { return x * y; });
    case ReduceOp::kMin:
      return ApplyHalfWith<widen, narrow>(acc, in, n, [](float x, float y) { return std::min(x, y); });
    case ReduceOp::kMax:
      return ApplyHalfWith<widen, narrow>(acc, in, n, [](float x, float y) { return std::max(x, y); });
  }
}

// The fast paths, chosen at run time by what the CPU has.
// float16 with the F16C instructions (x86-64 since 2012): eight elements at
// a time, converted by the hardware (exactly, and back to nearest even as
// FloatToHalf rounds), 20x the scalar loop. Only a NaN's payload may differ
// from FloatToHalf's. Chosen at run time where the CPU has F16C.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx,f16c"))) void ApplyHalfF16C(ReduceOp op, void* acc, const void* in, size_t n) {
  auto* a = static_cast<uint16_t*>(acc);
  const auto* b = static_cast<const uint16_t*>(in);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    __m256 r;
    switch (op) {
      case ReduceOp::kSum: r = _mm256_add_ps(x, y); break;
      case ReduceOp::kProd: r = _mm256_mul_ps(x, y); break;
      case ReduceOp::kMin: r = _mm256_min_ps(y, x); break;  // y < x ? y : x, as std::min(x, y)
      default: r = _mm256_max_ps(y, x); break;              // y > x ? y : x, as std::max(x, y)
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  ApplyHalf<HalfToFloat, FloatToHalf>(op, a + i, b + i, n - i);
}

// What this CPU and OS offer (cpuid, and xgetbv for the OS saving the AVX
// registers): read once. (__builtin_cpu_supports does not know "f16c" in
// every compiler.)
struct CpuFeatures {
  bool f16c = false;
  bool avx2 = false;
};

CpuFeatures DetectCpu() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6) != 6) return f;  // the OS does not save the YMM registers
  f.f16c = f16c;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) f.avx2 = b & (1u << 5);
  return f;
}

const CpuFeatures& Cpu() {
  static const CpuFeatures features = DetectCpu();
  return features;
}

bool HaveF16C() { return Cpu().f16c; }

// bfloat16's loop, the same code compiled for AVX2 (twice the lanes).
__attribute__((target("avx2"))) void ApplyBFloat16Avx2(ReduceOp op, void* acc, const void* in, size_t n) {
  ApplyHalf<BFloat16ToFloat, FloatToBFloat16>(op, acc, in, n);
}

bool HaveAvx2() { return Cpu().avx2; }
#endif

void ApplyFloat16(ReduceOp op, void* acc, const void* in, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (HaveF16C()) return ApplyHalfF16C(op, acc, in, n);
#endif
  ApplyHalf<HalfToFloat, FloatToHalf>(op, acc, in, n);
}

void ApplyBFloat16(ReduceOp op, void* acc, const void* in, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (HaveAvx2()) return ApplyBFloat16Avx2(op, acc, in, n);
#endif
  ApplyHalf<BFloat16ToFloat, FloatToBFloat16>(op, acc, in, n);
}

}  // namespace

Result<ReduceOp> ParseReduceOp(const std::string& name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "prod") return ReduceOp::kProd;
  if (name == "min") return ReduceOp::kMin;
  if (name == "max") return ReduceOp::kMax;
  return Status::InvalidArgument("unknown reduce op '" + name + "' (expected sum, prod, min or max)");
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

namespace {
const std::pair<const char*, DType> kDTypeNames[] = {
    {"float16", DType::kFloat16}, {"float32", DType::kFloat32}, {"float64", DType::kFloat64},
    {"int8", DType::kInt8},       {"int16", DType::kInt16},     {"int32", DType::kInt32},
    {"int64", DType::kInt64},     {"uint8", DType::kUInt8},     {"uint16", DType::kUInt16},
    {"uint32", DType::kUInt32},   {"uint64", DType::kUInt64},   {"bfloat16", DType::kBFloat16}};
}  // namespace

Result<DType> ParseDType(const std::string& name) {
  for (const auto& [n, t] : kDTypeNames) {
    if (name == n) return t;
  }
  return Status::InvalidArgument("dtype '" + name + "' cannot be reduced");
}

const char* DTypeName(DType t) {
  for (const auto& [n, type] : kDTypeNames) {
    if (type == t) return n;
  }
  return "?";
}

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kUInt8: return 1;
    case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    default: return 8;
  }
}

namespace {
// `fast`: with the CPU-specific paths where this CPU has them.
Status Reduce(ReduceOp op, DType type, void* acc, const void* in, size_t n, bool fast) {
  switch (type) {
    case DType::kFloat16:
      if (fast) return ApplyFloat16(op, acc, in, n), Status::OK();
      ApplyHalf<HalfToFloat, FloatToHalf>(op, acc, in, n);
      break;
    case DType::kBFloat16:
      if (fast) return ApplyBFloat16(op, acc, in, n), Status::OK();
      ApplyHalf<BFloat16ToFloat, FloatToBFloat16>(op, acc, in, n);
      break;
    case DType::kFloat32: ApplyOp<float>(op, acc, in, n); break;
    case DType::kFloat64: ApplyOp<double>(op, acc, in, n); break;
    case DType::kInt8: ApplyOp<int8_t>(op, acc, in, n); break;
    case DType::kInt16: ApplyOp<int16_t>(op, acc, in, n); break;
    case DType::kInt32: ApplyOp<int32_t>(op, acc, in, n); break;
    case DType::kInt64: ApplyOp<int64_t>(op, acc, in, n); break;
    case DType::kUInt8: ApplyOp<uint8_t>(op, acc, in, n); break;
    case DType::kUInt16: ApplyOp<uint16_t>(op, acc, in, n); break;
    case DType::kUInt32: ApplyOp<uint32_t>(op, acc, in, n); break;
    case DType::kUInt64: ApplyOp<uint64_t>(op, acc, in, n); break;
  }
  return Status::OK();
}
}  // namespace

Status ReduceInto(ReduceOp op, DType type, void* acc, const void* in, size_t n) {
  return Reduce(op, type, acc, in, n, /*fast=*/true);
}

Status ReduceIntoPortable(ReduceOp op, DType type, void* acc, const void* in, size_t n) {
  return Reduce(op, type, acc, in, n, /*fast=*/false);
}

}  // namespace phalanx::collectives
