// The CPU backend's building blocks on float32 tiles: an 8-lane vector type, a register-blocked
// GEMM micro-kernel, the vectorised exp2 of the softmax numerators, and 64-byte aligned storage.
//
// Everything is always_inline so that it compiles into the caller's instruction set: forward.cpp
// and backward.cpp build their per-task functions (HOPATTN_CPU_CLONES) once for x86-64-v3
// (AVX2 + FMA) and once for the baseline, and pick one at load time. The vectors are GCC vector
// extensions, not intrinsics, so the baseline build lowers them to pairs of SSE operations and
// other architectures to theirs. (Includers compile with -Wno-psabi: GCC warns that 32-byte
// vectors passed by value change the ABI without AVX, but every such call here is inlined.)
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#define HOPATTN_ALWAYS_INLINE inline __attribute__((always_inline))

// One build of the per-task code for AVX2 + FMA and one for the baseline, chosen when the
// library loads (GNU ifunc), so the library runs on any x86-64 and uses FMA where it exists.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define HOPATTN_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HOPATTN_CPU_CLONES
#endif

namespace hopattn::cpu {

constexpr int kLanes = 8;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t VecInt __attribute__((vector_size(kLanes * sizeof(int32_t))));

// Tile rows and columns are padded to multiples of this, so rows start 64-byte aligned and
// the vector loops need no tails.
constexpr int64_t kPadFloats = 16;

constexpr int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// memcpy rather than a pointer cast: vector types may not alias float under strict aliasing.
HOPATTN_ALWAYS_INLINE Vec load(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
HOPATTN_ALWAYS_INLINE void store(float* p, Vec v) { __builtin_memcpy(p, &v, sizeof v); }
HOPATTN_ALWAYS_INLINE Vec splat(float x) { return Vec{} + x; }
HOPATTN_ALWAYS_INLINE Vec max(Vec a, Vec b) { return a > b ? a : b; }

// 2^x to about 2 ulp for -126 <= x <= 127, exactly 0 for x < -126 (which includes the -inf of a
// masked score), +inf from x >= 127.5 on and NaN for NaN. It plays the role of exp2f in the softmax:
// libm's exp2f does not vectorise without -ffast-math, and -ffast-math would fold away the -inf
// and NaN tests of core/softmax_math.hpp. Range reduction to x = n + f with |f| <= 1/2, then the
// Cephes exp2f minimax polynomial for 2^f and an exponent-field construction of 2^n, whose
// exponent field the clamp to [-126, 128] keeps from wrapping into the sign bit.
HOPATTN_ALWAYS_INLINE Vec exp2(Vec x) {
  const Vec low_clamped = x < -126.f ? splat(-126.f) : x;
  const Vec clamped = low_clamped > 128.f ? splat(128.f) : low_clamped;
  const Vec shifter = splat(0x1.8p23f);  // adding it rounds to an integer in the low mantissa
  const Vec shifted = clamped + shifter;
  const Vec n = shifted - shifter;
  const Vec f = clamped - n;
  Vec p = splat(1.535336188319500e-4f);
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.f;
  // Vector casts reinterpret bits: the integer n sits where `shifted` and `shifter` differ.
  const VecInt exponent = ((VecInt)shifted - (VecInt)shifter + 127) << 23;
  const Vec result = p * (Vec)exponent;
  return x < -126.f ? Vec{} : result;  // above 127.5: n = 128, whose exponent field is +inf's
}

// The register tile: C[kRows x kVecs*kLanes] (+)= A[kRows x depth] * B[depth x kVecs*kLanes].
// A is addressed with two strides so that one kernel reads K row-major (S^T = K Q^T) and the
// transposed probabilities column-major (O += P V). kRows * kVecs accumulators, plus kVecs
// B vectors and one broadcast, fit the 16 vector registers of AVX2.
template <int kRows, int kVecs, bool kAccumulate>
HOPATTN_ALWAYS_INLINE void micro_gemm(const float* a, int64_t a_row_stride, int64_t a_depth_stride,
                                      const float* b, int64_t ldb, float* c, int64_t ldc,
                                      int64_t depth) {
  Vec acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVecs; ++v)
      acc[r][v] = kAccumulate ? load(c + r * ldc + v * kLanes) : Vec{};
  }
  for (int64_t k = 0; k < depth; ++k) {
    Vec b_row[kVecs];
    for (int v = 0; v < kVecs; ++v) b_row[v] = load(b + k * ldb + v * kLanes);
    for (int r = 0; r < kRows; ++r) {
      const float a_rk = a[r * a_row_stride + k * a_depth_stride];
      for (int v = 0; v < kVecs; ++v) acc[r][v] += a_rk * b_row[v];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVecs; ++v) store(c + r * ldc + v * kLanes, acc[r][v]);
  }
}

// C[rows x cols] (+)= A[rows x depth] * B[depth x cols], rows a multiple of kRows and cols of
// kVecs * kLanes. Column panels outermost: a depth x panel slice of B stays in L1 while the
// rows of A stream past it.
template <int kRows, int kVecs, bool kAccumulate>
HOPATTN_ALWAYS_INLINE void gemm(const float* a, int64_t a_row_stride, int64_t a_depth_stride,
                                const float* b, int64_t ldb, float* c, int64_t ldc, int64_t rows,
                                int64_t cols, int64_t depth) {
  constexpr int64_t kPanel = kVecs * kLanes;
  for (int64_t j = 0; j < cols; j += kPanel) {
    for (int64_t i = 0; i < rows; i += kRows) {
      micro_gemm<kRows, kVecs, kAccumulate>(a + i * a_row_stride, a_row_stride, a_depth_stride,
                                            b + j, ldb, c + i * ldc + j, ldc, depth);
    }
  }
}

// A float array aligned to a cache line, regrown only when a larger one is needed.
class AlignedFloats {
 public:
  float* data() { return data_.get(); }
  void reserve(int64_t count) {
    if (count <= capacity_) return;
    data_.reset(static_cast<float*>(
        ::operator new[](static_cast<size_t>(count) * sizeof(float), std::align_val_t{64})));
    capacity_ = count;
  }

 private:
  struct Free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<float, Free> data_;
  int64_t capacity_ = 0;
};

}  // namespace hopattn::cpu
