// The FP8 building blocks of core/: the float8 e4m3 conversions (core/dtype.hpp) against all 256
// codes decoded independently, the Hadamard rotation (core/hadamard.hpp) against a dense
// Sylvester matrix, and the V-transposed layout (core/fp8_layout.hpp) against hopattn.h's formula.
// The conversions must equal bench/fp8_numerics.py's e4m3() bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/fp8_layout.hpp"
#include "core/hadamard.hpp"

namespace hopattn {
namespace {

// Code -> value from the format's definition (1 sign, 4 exponent bits of bias 7, 3 mantissa
// bits; exponent 0 subnormal; 0x7f and 0xff NaN), in double.
double decode(int code) {
  const int exponent = (code >> 3) & 0xf, mantissa = code & 7;
  const double sign = (code & 0x80) != 0 ? -1.0 : 1.0;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, -9);
  return sign * std::ldexp(8 + mantissa, exponent - 10);
}

// The finite non-negative grid: (value, code), ascending.
std::vector<std::pair<double, int>> positive_grid() {
  std::vector<std::pair<double, int>> grid;
  for (int code = 0; code < 0x7f; ++code) grid.push_back({decode(code), code});
  return grid;
}

// Nearest grid value to x (ties to the even code), saturated at +-448: from the table alone.
int expected_code(double x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double magnitude = std::min(std::fabs(x), 448.0);
  int best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const auto& [value, code] : positive_grid()) {
    const double distance = std::fabs(value - magnitude);
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return sign | best;
}

int code_of(float x) { return from_float<float8_e4m3>(x).bits; }

TEST(Float8E4M3, DecodesEveryCode) {
  for (int code = 0; code < 256; ++code) {
    const float value = to_float(float8_e4m3{static_cast<uint8_t>(code)});
    const double expected = decode(code);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(value)) << code;
    } else {
      EXPECT_EQ(value, expected) << code;
      EXPECT_EQ(std::signbit(value), (code & 0x80) != 0) << code;
    }
  }
  EXPECT_EQ(to_float(float8_e4m3{0x7e}), 448.f);
  EXPECT_EQ(to_float(float8_e4m3{0x01}), 0x1p-9f);
  EXPECT_EQ(to_float(float8_e4m3{0x08}), 0x1p-6f);
}

TEST(Float8E4M3, EveryFiniteCodeRoundTripsExactly) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(code_of(to_float(float8_e4m3{static_cast<uint8_t>(code)})), code) << code;
  }
}

TEST(Float8E4M3, MidpointsGoToTheEvenCodeAndNeighboursToTheNearest) {
  const auto grid = positive_grid();
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    const auto [lo, lo_code] = grid[i];
    const auto [hi, hi_code] = grid[i + 1];
    const float mid = static_cast<float>((lo + hi) / 2);  // 5 significant bits: exact in float
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const int even = lo_code % 2 == 0 ? lo_code : hi_code;
    for (const float sign : {1.f, -1.f}) {
      const int sign_bit = sign < 0 ? 0x80 : 0;
      EXPECT_EQ(code_of(sign * mid), sign_bit | even) << mid;
      EXPECT_EQ(code_of(sign * std::nextafter(mid, 1e9f)), sign_bit | hi_code) << mid;
      EXPECT_EQ(code_of(sign * std::nextafter(mid, 0.f)), sign_bit | lo_code) << mid;
    }
  }
}

TEST(Float8E4M3, RandomValuesRoundToTheNearest) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-14, 10);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(normal(rng), exponent(rng));
    ASSERT_EQ(code_of(x), expected_code(x)) << x;
  }
}

TEST(Float8E4M3, SaturatesAndKeepsNaN) {
  for (const float x : {448.f, 449.f, 463.99f, 464.f, 480.f, 1e6f, 3e38f,
                        std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(code_of(x), 0x7e) << x;
    EXPECT_EQ(code_of(-x), 0xfe) << x;
  }
  EXPECT_EQ(code_of(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(code_of(-std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  // Below the smallest subnormal: half of it is a tie with 0 (even), anything more rounds up.
  EXPECT_EQ(code_of(0x1p-10f), 0x00);
  EXPECT_EQ(code_of(-0x1p-10f), 0x80);
  EXPECT_EQ(code_of(std::nextafter(0x1p-10f, 1.f)), 0x01);
  EXPECT_EQ(code_of(3 * 0x1p-10f), 0x02);  // 1.5 units of 2^-9: a tie between codes 1 and 2
  EXPECT_EQ(code_of(5 * 0x1p-10f), 0x02);  // 2.5 units: between 2 and 3, to 2
  EXPECT_EQ(code_of(1e-30f), 0x00);
  EXPECT_EQ(code_of(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(Float8E4M3, IsADType) {
  EXPECT_TRUE(is_valid_dtype(3));
  EXPECT_FALSE(is_attention_dtype(DType::kFloat8E4M3));
  EXPECT_EQ(element_size(DType::kFloat8E4M3), 1);
  EXPECT_STREQ(dtype_name(DType::kFloat8E4M3), "float8_e4m3");
}

// H_n in Sylvester order, H_2m = [[H_m, H_m], [H_m, -H_m]]: entry (i, j) = (-1)^popcount(i & j).
double sylvester(int64_t i, int64_t j) { return __builtin_popcountll(i & j) % 2 ? -1.0 : 1.0; }

TEST(Hadamard, FastTransformEqualsTheDenseSylvesterMatrix) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  for (int64_t n = 1; n <= 512; n *= 2) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    std::vector<float> y = x;
    fast_walsh_hadamard(y.data(), n);
    double norm_x = 0, norm_y = 0;
    for (int64_t i = 0; i < n; ++i) {
      double expected = 0;
      for (int64_t j = 0; j < n; ++j) expected += sylvester(i, j) * x[j];
      expected /= std::sqrt(static_cast<double>(n));
      // float sums over log2(n) levels of values of size about sqrt(n) |x|
      EXPECT_NEAR(y[i], expected, 1e-6 * (1 + std::log2(static_cast<double>(n))) * std::sqrt(n))
          << "n " << n << " entry " << i;
      norm_x += static_cast<double>(x[i]) * x[i];
      norm_y += static_cast<double>(y[i]) * y[i];
    }
    EXPECT_NEAR(std::sqrt(norm_y), std::sqrt(norm_x), 1e-6 * std::sqrt(norm_x)) << n;
    fast_walsh_hadamard(y.data(), n);  // H / sqrt(n) is its own inverse
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i], 1e-5) << n;
  }
}

TEST(Hadamard, SignsAreSplitmix64TopBits) {
  // The first outputs of splitmix64 from state 0, the generator's published sequence: pins the
  // scheme the SM90 kernel must reproduce.
  EXPECT_EQ(splitmix64(0, 0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitmix64(0, 1), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(splitmix64(0, 2), 0x06c45d188009454full);
  EXPECT_EQ(hadamard_sign(0, 0), -1.f);
  EXPECT_EQ(hadamard_sign(0, 1), 1.f);
  int plus = 0, differ = 0;
  for (uint64_t i = 0; i < 4096; ++i) {
    const float s = hadamard_sign(42, i);
    ASSERT_TRUE(s == 1.f || s == -1.f);
    plus += s > 0;
    differ += s != hadamard_sign(43, i);
  }
  EXPECT_GT(plus, 1848);  // 4096 fair coins: within 6.3 standard deviations of 2048
  EXPECT_LT(plus, 2248);
  EXPECT_GT(differ, 1848);
  EXPECT_LT(differ, 2248);
}

TEST(Hadamard, RotationIsHTimesDAndKeepsDotProducts) {
  constexpr int64_t n = 128;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> q(n), k(n);
  for (float& v : q) v = normal(rng);
  for (float& v : k) v = 3 * normal(rng);
  q[5] = 40.f;  // an outlier channel
  std::vector<float> q_rot = q, k_rot = k, dq = q;
  hadamard_rotate(q_rot.data(), n, 7);
  hadamard_rotate(k_rot.data(), n, 7);
  for (int64_t i = 0; i < n; ++i) dq[i] *= hadamard_sign(7, static_cast<uint64_t>(i));
  fast_walsh_hadamard(dq.data(), n);
  double dot = 0, dot_rot = 0, norm_q = 0, norm_k = 0, max_rot = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(q_rot[i], dq[i]);  // H (D x) / sqrt(n), D first
    dot += static_cast<double>(q[i]) * k[i];
    dot_rot += static_cast<double>(q_rot[i]) * k_rot[i];
    norm_q += static_cast<double>(q[i]) * q[i];
    norm_k += static_cast<double>(k[i]) * k[i];
    max_rot = std::max(max_rot, std::fabs(static_cast<double>(q_rot[i])));
  }
  EXPECT_NEAR(dot_rot, dot, 1e-5 * std::sqrt(norm_q * norm_k));
  EXPECT_LT(max_rot, 10.0);  // the outlier of 40 is spread over all 128 entries (40 / sqrt(128) = 3.5)
  // Another seed is another rotation.
  std::vector<float> other = q;
  hadamard_rotate(other.data(), n, 8);
  EXPECT_NE(other, q_rot);
}

TEST(Hadamard, PowerOfTwo) {
  for (int64_t n : {1, 2, 4, 64, 512, 1 << 20}) EXPECT_TRUE(is_power_of_two(n)) << n;
  for (int64_t n : {0, -4, 3, 6, 96, 513}) EXPECT_FALSE(is_power_of_two(n)) << n;
}

// The order of P's operand within a group, written out: rows 8 i + 2 c + j at 4 c + 2 i + j.
TEST(VTransposedLayout, PositionPermutesEachGroupOf16) {
  const int64_t positions[16] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
  for (int64_t group : {0, 1, 5, 1000}) {
    std::vector<bool> taken(16, false);
    for (int64_t r = 0; r < 16; ++r) {
      const int64_t position = v_transposed_position(16 * group + r);
      ASSERT_EQ(position, 16 * group + positions[r]) << group << " " << r;
      taken[static_cast<size_t>(position - 16 * group)] = true;
    }
    EXPECT_EQ(std::count(taken.begin(), taken.end(), true), 16) << group;
  }
  for (int64_t i : {0, 1})
    for (int64_t c = 0; c < 4; ++c)
      for (int64_t j : {0, 1})
        EXPECT_EQ(v_transposed_position(8 * i + 2 * c + j), 4 * c + 2 * i + j);
}

// hopattn.h: (b, s, h, d) at b * batch_stride + h * head_stride + d * pitch + 16 * (s / 16) +
// position(s % 16), pitch = seqlen rounded up to 16, head_stride = head_dim * pitch, batch_stride
// = heads * head_stride; the rows up to the pitch fill elements(batch) exactly, each once.
TEST(VTransposedLayout, OffsetIsTheDocumentedFormula) {
  for (int64_t seqlen : {1, 16, 17, 127}) {
    SCOPED_TRACE(seqlen);
    const int64_t batch = 2, heads = 3, head_dim = 5;
    const VTransposedLayout layout = VTransposedLayout::of(seqlen, heads, head_dim);
    const int64_t pitch = (seqlen + 15) / 16 * 16;
    EXPECT_EQ(layout.pitch, pitch);
    EXPECT_EQ(v_transposed_pitch(seqlen), pitch);
    EXPECT_EQ(layout.head_stride(), head_dim * pitch);
    EXPECT_EQ(layout.batch_stride(), heads * head_dim * pitch);
    EXPECT_EQ(layout.elements(batch), batch * heads * head_dim * pitch);
    std::vector<int> uses(static_cast<size_t>(layout.elements(batch)), 0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < pitch; ++s)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < head_dim; ++d) {
            const int64_t offset = layout.offset(b, s, h, d);
            ASSERT_EQ(offset, b * heads * head_dim * pitch + h * head_dim * pitch + d * pitch +
                                  16 * (s / 16) + v_transposed_position(s % 16));
            ++uses[static_cast<size_t>(offset)];
          }
    EXPECT_EQ(std::count(uses.begin(), uses.end(), 1), static_cast<std::ptrdiff_t>(uses.size()));
  }
}

}  // namespace
}  // namespace hopattn
