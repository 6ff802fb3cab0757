// The element types of DType and their conversions to and from float, shared by the
// CPU backend, the float64 reference and the tests. Bit-exact and header-only, with no CUDA
// headers, so host and device code convert identically:
//   float -> bfloat16 and float -> float16 round to nearest even; NaN stays NaN (quiet),
//   infinities stay infinite, float16 subnormals are produced and read exactly;
//   float -> float8 e4m3 (OCP e4m3fn) rounds to nearest even and saturates to +-448 (infinities
//   too: the format has none), NaN becomes NaN; as bench/fp8_numerics.py's e4m3() and PTX's
//   cvt.rn.satfinite.e4m3x2.f32.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.hpp"
#include "core/types.hpp"

namespace hopattn {

struct bfloat16 {
  uint16_t bits;
};
struct float16 {
  uint16_t bits;
};
struct float8_e4m3 {
  uint8_t bits;
};

constexpr float kFloat8E4M3Max = 448.f;
constexpr uint8_t kFloat8E4M3NaN = 0x7f;  // 0xff is NaN too

HOPATTN_HOST_DEVICE uint32_t bits_of(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

HOPATTN_HOST_DEVICE float float_of_bits(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

HOPATTN_HOST_DEVICE float to_float(float value) { return value; }

HOPATTN_HOST_DEVICE float to_float(bfloat16 value) {
  return float_of_bits(static_cast<uint32_t>(value.bits) << 16);
}

// Branch-free so that a loop converting a block of K or V vectorises.
HOPATTN_HOST_DEVICE float to_float(float16 value) {
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  const uint32_t magnitude = value.bits & 0x7fffu;
  // Subnormal: mantissa * 2^-24, exact in float (a normal float, so no denormal arithmetic).
  const uint32_t subnormal = bits_of(static_cast<float>(magnitude) * 0x1p-24f);
  // Normal: rebias the exponent from 15 to 127.
  const uint32_t normal = (magnitude << 13) + ((127u - 15u) << 23);
  const uint32_t inf_or_nan = (magnitude << 13) | 0x7f800000u;
  const uint32_t bits = magnitude < 0x0400u    ? subnormal
                        : magnitude >= 0x7c00u ? inf_or_nan
                                               : normal;
  return float_of_bits(sign | bits);
}

// 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal (mantissa * 2^-9),
// exponent 15 with mantissa 7 is NaN (the only non-finite value).
HOPATTN_HOST_DEVICE float to_float(float8_e4m3 value) {
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x80u) << 24;
  const uint32_t exponent = (value.bits >> 3) & 0xfu;
  const uint32_t mantissa = value.bits & 0x7u;
  if (exponent == 15 && mantissa == 7) return float_of_bits(sign | 0x7fc00000u);
  if (exponent == 0) return float_of_bits(sign | bits_of(static_cast<float>(mantissa) * 0x1p-9f));
  return float_of_bits(sign | ((exponent + 127u - 7u) << 23) | (mantissa << 20));
}

template <class Element>
HOPATTN_HOST_DEVICE Element from_float(float value);

template <>
HOPATTN_HOST_DEVICE float from_float<float>(float value) {
  return value;
}

template <>
HOPATTN_HOST_DEVICE bfloat16 from_float<bfloat16>(float value) {
  const uint32_t bits = bits_of(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return {static_cast<uint16_t>((bits + rounding) >> 16)};
}

template <>
HOPATTN_HOST_DEVICE float16 from_float<float16>(float value) {
  const uint32_t bits = bits_of(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return {static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x03ffu))};
  }
  // 65520 = 65504 + half an ulp: from there on, round-to-nearest-even gives infinity.
  if (magnitude >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};
  const uint32_t exponent = magnitude >> 23;
  if (exponent >= 113) {  // a normal float16: drop 13 mantissa bits, rounding to nearest even
    const uint32_t half = ((exponent - 112) << 10) | ((magnitude >> 13) & 0x03ffu);
    const uint32_t rest = magnitude & 0x1fffu;
    const uint32_t round_up = rest > 0x1000u || (rest == 0x1000u && (half & 1u));
    return {static_cast<uint16_t>(sign | (half + round_up))};  // a carry may make it normal-next
  }
  // A float16 subnormal (or zero): the value in units of 2^-24 is mantissa >> (126 - exponent).
  const uint32_t shift = 126 - exponent;
  if (shift > 24) return {sign};  // below 2^-25: rounds to zero
  const uint32_t mantissa = (magnitude & 0x007fffffu) | (exponent ? 0x00800000u : 0u);
  const uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t round_up = rest > halfway || (rest == halfway && (half & 1u));
  return {static_cast<uint16_t>(sign | (half + round_up))};  // 0x400 is the smallest normal
}

template <>
HOPATTN_HOST_DEVICE float8_e4m3 from_float<float8_e4m3>(float value) {
  const uint32_t bits = bits_of(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return {static_cast<uint8_t>(sign | kFloat8E4M3NaN)};
  // 448 (0x43e00000) and up, infinity included, saturates: the codes stop at 0x7e = 448.
  if (magnitude >= 0x43e00000u) return {static_cast<uint8_t>(sign | 0x7eu)};
  if (magnitude < (121u << 23)) {  // below 2^-6, the smallest normal: units of 2^-9
    // m * 2^9 < 8 is exact; adding 2^23 rounds it to an integer, to nearest even.
    const float units = float_of_bits(magnitude) * 0x1p9f + 0x1p23f;
    return {static_cast<uint8_t>(sign | (bits_of(units) & 0xfu))};  // 8 is 2^-6, a normal code
  }
  // Keep 3 of the 23 mantissa bits, rounding to nearest even; a carry steps the exponent (below
  // 448 the result is at most 448, code 0x7e). Rebias the exponent from 127 to 7.
  const uint32_t rounded = (magnitude + 0x7ffffu + ((magnitude >> 20) & 1u)) >> 20;
  return {static_cast<uint8_t>(sign | (rounded - ((127u - 7u) << 3)))};
}

// The storage type of each DType.
template <DType kDtype>
struct ElementOf;
template <>
struct ElementOf<DType::kFloat32> {
  using type = float;
};
template <>
struct ElementOf<DType::kBFloat16> {
  using type = bfloat16;
};
template <>
struct ElementOf<DType::kFloat16> {
  using type = float16;
};

template <>
struct ElementOf<DType::kFloat8E4M3> {
  using type = float8_e4m3;
};

// Whether an integer from outside (the C ABI's dtype field) names a DType.
HOPATTN_HOST_DEVICE bool is_valid_dtype(int dtype) {
  return dtype >= static_cast<int>(DType::kFloat32) && dtype <= static_cast<int>(DType::kFloat8E4M3);
}

// The dtypes attention reads and writes (forward, backward) and hopattn_quantize_fp8 reads.
HOPATTN_HOST_DEVICE bool is_attention_dtype(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

HOPATTN_HOST_DEVICE int64_t element_size(DType dtype) {
  return dtype == DType::kFloat32 ? 4 : dtype == DType::kFloat8E4M3 ? 1 : 2;
}

inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kFloat8E4M3: return "float8_e4m3";
  }
  return "unknown";
}

// Calls fn(Element{}) with the storage type of `dtype`, which must be an attention dtype.
template <class Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kBFloat16: return fn(bfloat16{});
    case DType::kFloat16: return fn(float16{});
    case DType::kFloat32:
    case DType::kFloat8E4M3: break;  // not an attention dtype: validation refused it
  }
  return fn(float{});
}

}  // namespace hopattn
