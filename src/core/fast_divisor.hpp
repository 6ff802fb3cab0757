// Division by a divisor fixed before a kernel runs, as a multiply-high and a shift (the
// round-up method of Granlund and Montgomery, as CUTLASS's FastDivmod does it): the persistent
// kernels turn each tile index into coordinates with it, where a runtime integer division costs a
// chain of some 20 instructions through the MUFU reciprocal. Host and device code, and plain C++
// (no CUTLASS), since the tile order it serves is checked by the CPU-only build's tests.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace hopattn {

class FastDivisor {
 public:
  FastDivisor() = default;
  // With p = 31 + ceil(log2(divisor)), the multiplier ceil(2^p / divisor) fits in 32 bits and gives
  // the exact quotient of every dividend in [0, 2^31). A divisor below 1 (an empty grid's, never
  // divided by) acts as 1.
  explicit FastDivisor(int divisor) : divisor_(divisor < 1 ? 1 : divisor) {
    int log2_ceil = 0;
    while ((int64_t{1} << log2_ceil) < divisor_) ++log2_ceil;
    const int p = 31 + log2_ceil;
    multiplier_ = divisor_ == 1 ? 0u : uint32_t(((uint64_t{1} << p) + uint64_t(divisor_) - 1) / uint64_t(divisor_));
    shift_ = divisor_ == 1 ? 0u : uint32_t(p - 32);
  }

  HOPATTN_HOST_DEVICE int divisor() const { return divisor_; }
  // dividend in [0, 2^31).
  HOPATTN_HOST_DEVICE int div(int dividend) const {
    return divisor_ == 1 ? dividend : int(multiply_high(uint32_t(dividend), multiplier_) >> shift_);
  }
  HOPATTN_HOST_DEVICE void divmod(int dividend, int& quotient, int& remainder) const {
    quotient = div(dividend);
    remainder = dividend - quotient * divisor_;
  }

 private:
  HOPATTN_HOST_DEVICE static uint32_t multiply_high(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return uint32_t((uint64_t(a) * b) >> 32);
#endif
  }

  int divisor_ = 1;
  uint32_t multiplier_ = 0, shift_ = 0;
};

}  // namespace hopattn
