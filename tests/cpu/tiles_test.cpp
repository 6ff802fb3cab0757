// The CPU kernel's vector exp2 and GEMM tile against scalar references.
#include "cpu/tiles.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace hopattn::cpu {
namespace {

TEST(Tiles, Exp2IsAccurateOverTheSoftmaxRange) {
  double worst = 0;
  for (float x = -126.f; x <= 0.f; x += 0.001953125f) {
    Vec v = splat(x);
    v[3] = std::nextafter(x, 0.f);
    const Vec got = exp2(v);
    for (int l : {0, 3}) {
      const double want = std::exp2(static_cast<double>(v[l]));
      worst = std::max(worst, std::abs(got[l] - want) / want);
    }
  }
  EXPECT_LE(worst, 3e-7) << "relative error";  // a few float32 ulp
}

TEST(Tiles, Exp2OfMaskedScoresIsZero) {
  const Vec got = exp2(Vec{-INFINITY, -1e30f, -127.f, -200.f, -126.5f, 0.f, -1.f, -0.f});
  for (int l = 0; l < 5; ++l) EXPECT_EQ(got[l], 0.f) << l;
  EXPECT_EQ(got[5], 1.f);
  EXPECT_EQ(got[6], 0.5f);
  EXPECT_EQ(got[7], 1.f);
}

TEST(Tiles, GemmMatchesScalarProduct) {
  constexpr int64_t rows = 12, cols = 48, depth = 37, lda = 40, ldb = 64, ldc = 64;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  AlignedFloats a, b, c;
  // A is read row-major (rows x depth) and then column-major (depth x 8), both with stride lda.
  a.reserve(depth * lda);
  b.reserve(depth * ldb);
  c.reserve(rows * ldc);
  for (int64_t i = 0; i < depth * lda; ++i) a.data()[i] = uniform(rng);
  for (int64_t i = 0; i < depth * ldb; ++i) b.data()[i] = uniform(rng);
  for (int64_t i = 0; i < rows * ldc; ++i) c.data()[i] = uniform(rng);
  std::vector<float> initial(c.data(), c.data() + rows * ldc);

  // Accumulating, with A read through both stride orders: row-major and, as A^T, column-major.
  gemm<6, 2, true>(a.data(), lda, 1, b.data(), ldb, c.data(), ldc, rows, cols, depth);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double want = initial[i * ldc + j];
      for (int64_t k = 0; k < depth; ++k)
        want += static_cast<double>(a.data()[i * lda + k]) * b.data()[k * ldb + j];
      EXPECT_NEAR(c.data()[i * ldc + j], want, 1e-5) << i << ", " << j;
    }
  }
  gemm<4, 3, false>(a.data(), 1, lda, b.data(), ldb, c.data(), ldc, 8, cols, depth);
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double want = 0;
      for (int64_t k = 0; k < depth; ++k)
        want += static_cast<double>(a.data()[k * lda + i]) * b.data()[k * ldb + j];
      EXPECT_NEAR(c.data()[i * ldc + j], want, 1e-5) << i << ", " << j;
    }
  }
}

}  // namespace
}  // namespace hopattn::cpu
