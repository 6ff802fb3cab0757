// The float <-> bfloat16 / float16 conversions of core/dtype.hpp, exhaustively where the
// domain is small, and against GCC's _Float16 for float -> float16 rounding.
#include "core/dtype.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace hopattn {
namespace {

uint16_t bits(bfloat16 x) { return x.bits; }
uint16_t bits(float16 x) { return x.bits; }

TEST(Dtype, Bfloat16RoundTripsEveryValue) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = to_float(bfloat16{static_cast<uint16_t>(b)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(to_float(from_float<bfloat16>(f)))) << b;
    } else {
      EXPECT_EQ(bits(from_float<bfloat16>(f)), b) << b;
    }
  }
}

TEST(Dtype, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(bits(from_float<bfloat16>(float_of_bits(0x3f808000))), 0x3f80);  // tie, even below
  EXPECT_EQ(bits(from_float<bfloat16>(float_of_bits(0x3f818000))), 0x3f82);  // tie, even above
  EXPECT_EQ(bits(from_float<bfloat16>(float_of_bits(0x3f808001))), 0x3f81);  // above the tie
  EXPECT_EQ(bits(from_float<bfloat16>(float_of_bits(0x3f807fff))), 0x3f80);  // below the tie
  EXPECT_EQ(bits(from_float<bfloat16>(float_of_bits(0x7f7fffff))), 0x7f80);  // rounds to inf
  EXPECT_EQ(bits(from_float<bfloat16>(-INFINITY)), 0xff80);
  EXPECT_EQ(bits(from_float<bfloat16>(float_of_bits(0x00000001))), 0x0000);  // tiniest denormal
  const bfloat16 nan = from_float<bfloat16>(float_of_bits(0x7f800001));      // signalling NaN
  EXPECT_TRUE(std::isnan(to_float(nan)));
  EXPECT_TRUE(bits(nan) & 0x0040) << "quiet";
}

TEST(Dtype, Float16ReadsEveryValueExactly) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    _Float16 gcc;
    const uint16_t h = static_cast<uint16_t>(b);
    std::memcpy(&gcc, &h, sizeof h);
    const float want = static_cast<float>(gcc);
    const float got = to_float(float16{h});
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      EXPECT_EQ(bits_of(got), bits_of(want)) << b;
    }
  }
}

TEST(Dtype, Float16RoundTripsEveryValue) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = to_float(float16{static_cast<uint16_t>(b)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(to_float(from_float<float16>(f)))) << b;
    } else {
      EXPECT_EQ(bits(from_float<float16>(f)), b) << b;
    }
  }
}

// Every float whose rounding is delicate: near each float16 value and each midpoint between
// neighbours, including the subnormal range and the overflow threshold, plus random floats.
TEST(Dtype, Float16RoundingMatchesGcc) {
  const auto check = [](float f) {
    const _Float16 gcc = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &gcc, sizeof want);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(to_float(from_float<float16>(f))));
    } else {
      EXPECT_EQ(bits(from_float<float16>(f)), want) << std::hexfloat << f;
    }
  };
  for (uint32_t b = 0; b < 0x7c00; ++b) {
    const float lo = to_float(float16{static_cast<uint16_t>(b)});
    const float hi = to_float(float16{static_cast<uint16_t>(b + 1)});
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    for (float f : {lo, mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)}) {
      check(f);
      check(-f);
    }
  }
  for (float f :
       {65504.f, 65519.99f, 65520.f, 1e6f, INFINITY, 0x1p-25f, 0x1.000002p-25f, 0x1p-26f}) {
    check(f);
    check(-f);
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 1000000; ++i) check(float_of_bits(static_cast<uint32_t>(rng())));
}

TEST(Dtype, Float16KeepsNaNQuiet) {
  const float16 nan = from_float<float16>(float_of_bits(0x7f800001));
  EXPECT_EQ(bits(nan) & 0x7c00, 0x7c00);
  EXPECT_TRUE(bits(nan) & 0x0200) << "quiet";
}

TEST(Dtype, SizesNamesAndValidity) {
  EXPECT_EQ(element_size(DType::kFloat32), 4);
  EXPECT_EQ(element_size(DType::kBFloat16), 2);
  EXPECT_EQ(element_size(DType::kFloat16), 2);
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_TRUE(is_valid_dtype(2));
  EXPECT_TRUE(is_valid_dtype(3));  // float8_e4m3: hopattn_quantize_fp8's output
  EXPECT_FALSE(is_valid_dtype(4));
  EXPECT_FALSE(is_valid_dtype(-1));
}

}  // namespace
}  // namespace hopattn
