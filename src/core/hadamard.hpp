// The rotation of FP8 quantisation (hopattn_quantize_options.hadamard), defined once for the CPU
// backend and the future SM90 kernel: every head_dim vector x becomes y = H (D x) / sqrt(n), with
// H the n x n Walsh-Hadamard matrix in natural (Sylvester) order (H_1 = [1],
// H_2m = [[H_m, H_m], [H_m, -H_m]]) and D = diag(hadamard_sign(seed, i)). H / sqrt(n) is
// orthogonal and symmetric and D squares to the identity, so rotating q and k with one seed
// leaves every q . k unchanged, while spreading an outlier channel over all n entries.
// bench/fp8_numerics.py uses the same formula with signs from NumPy's generator.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"

namespace hopattn {

// The (index + 1)-th output of the splitmix64 generator started at state `seed` (Steele, Lea and
// Flood 2014), computed directly: a stateless hash, so any thread or lane computes any entry.
HOPATTN_HOST_DEVICE uint64_t splitmix64(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// +1 or -1 for entry `index` of the diagonal D: -1 when splitmix64(seed, index)'s top bit is set.
HOPATTN_HOST_DEVICE float hadamard_sign(uint64_t seed, uint64_t index) {
  return (splitmix64(seed, index) >> 63) != 0 ? -1.f : 1.f;
}

HOPATTN_HOST_DEVICE bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// x <- H x / sqrt(n) in place (n a power of two): the fast Walsh-Hadamard transform, log2(n)
// butterfly passes in Sylvester order, then one normalising multiply.
HOPATTN_HOST_DEVICE void fast_walsh_hadamard(float* x, int64_t n) {
  for (int64_t half = 1; half < n; half *= 2) {
    for (int64_t start = 0; start < n; start += 2 * half) {
      for (int64_t i = start; i < start + half; ++i) {
        const float a = x[i], b = x[i + half];
        x[i] = a + b;
        x[i + half] = a - b;
      }
    }
  }
  const float norm = 1.f / std::sqrt(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= norm;
}

// x <- H (D x) / sqrt(n) with D from `seed`: the rotation itself.
HOPATTN_HOST_DEVICE void hadamard_rotate(float* x, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; ++i) x[i] *= hadamard_sign(seed, static_cast<uint64_t>(i));
  fast_walsh_hadamard(x, n);
}

}  // namespace hopattn
