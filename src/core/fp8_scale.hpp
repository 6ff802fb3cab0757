// The scale rule of FP8 quantisation (hopattn_quantize_fp8), defined once for the CPU backend and
// the SM90 kernel, with the IEEE float operations that make the two round alike.
//
// The SM90 library is compiled with --use_fast_math, under which `a / b` is an approximation and
// even the intrinsics __fadd_rn, __fmul_rn and __fdiv_rn flush subnormals to zero (they become
// add.rn.ftz.f32 and so on), as does every float comparison (setp.*.ftz). The ieee_* operations
// below are explicit .rn PTX without .ftz on the device (an explicit rounding modifier also keeps
// ptxas from fusing a multiply into a neighbouring add), and the plain operators on the host, which
// the CPU backend's build (no fast-math, no -march and so no FMA to contract into) rounds one by
// one; so both sides compute the same correctly rounded IEEE single-precision result, subnormals
// included. Tests of a float's class go through its bits for the same reason.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"
#include "core/host_device.hpp"

namespace hopattn {

HOPATTN_HOST_DEVICE float ieee_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  float sum;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(sum) : "f"(a), "f"(b));
  return sum;
#else
  return a + b;
#endif
}

HOPATTN_HOST_DEVICE float ieee_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  float difference;
  asm("sub.rn.f32 %0, %1, %2;" : "=f"(difference) : "f"(a), "f"(b));
  return difference;
#else
  return a - b;
#endif
}

HOPATTN_HOST_DEVICE float ieee_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  float product;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(product) : "f"(a), "f"(b));
  return product;
#else
  return a * b;
#endif
}

HOPATTN_HOST_DEVICE float ieee_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  float quotient;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(quotient) : "f"(a), "f"(b));
  return quotient;
#else
  return a / b;
#endif
}

HOPATTN_HOST_DEVICE bool is_nan_bits(float value) { return (bits_of(value) & 0x7fffffffu) > 0x7f800000u; }
HOPATTN_HOST_DEVICE bool is_finite_bits(float value) { return (bits_of(value) & 0x7f800000u) != 0x7f800000u; }

// The NaN a NaN scale is written as, whichever NaN the amax was (x86 and the GPU propagate
// different payloads): so that both backends' scales agree in every bit.
constexpr uint32_t kFp8ScaleNaNBits = 0x7fc00000u;

// A scale as the SM90 FP8 kernel reads it: one that is not positive (zero, negative or NaN), which
// validation cannot see on that backend, becomes NaN, so that the rows it scales come out NaN rather
// than silently wrong.
HOPATTN_HOST_DEVICE float usable_scale(float scale) { return scale > 0.f ? scale : float_of_bits(kFp8ScaleNaNBits); }

// The scale of a block of values from its amax, the largest |value| of the block (NaN if any value
// is NaN, +inf if any is infinite and none NaN):
//   amax / 448, e4m3's largest finite value, so that the largest |value| becomes code 448;
//   1 for a block of zeros, so that it dequantises to exact zeros;
//   2^-126, the smallest normal float, where amax / 448 lies below it (amax below 448 * 2^-126):
//   so that the scale's reciprocal, by which the codes are computed, is finite (2^126 at most),
//   and every |value| * 2^126 (exact: a power of two) stays below 448;
//   +inf for +inf, NaN (kFp8ScaleNaNBits) for NaN: the block's codes are then all NaN (0x7f).
HOPATTN_HOST_DEVICE float fp8_scale_of(float amax) {
  constexpr uint32_t kSmallestNormalBits = 0x00800000u;  // 2^-126
  const uint32_t magnitude = bits_of(amax) & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return float_of_bits(kFp8ScaleNaNBits);
  if (magnitude == 0) return 1.f;
  const float scale = ieee_div(float_of_bits(magnitude), kFloat8E4M3Max);
  return bits_of(scale) < kSmallestNormalBits ? float_of_bits(kSmallestNormalBits) : scale;
}

// The codes of a block with a finite scale are from_float<float8_e4m3>(fp8_scaled(value,
// fp8_reciprocal_of(scale))): one multiply per value where value / scale would be a division (on
// the GPU some ten instructions and a branch each). The two differ only where value / scale lies
// within a float32 rounding of an e4m3 rounding boundary, by one code. Every finite scale is a
// normal float of at most FLT_MAX / 448, so its reciprocal is a finite normal float.
HOPATTN_HOST_DEVICE float fp8_reciprocal_of(float scale) { return ieee_div(1.f, scale); }
HOPATTN_HOST_DEVICE float fp8_scaled(float value, float reciprocal) { return ieee_mul(value, reciprocal); }

}  // namespace hopattn
