// hopattn_quantize_fp8 through the C ABI on the CPU backend: every scaling mode's scales and
// layout, the round trip within e4m3's rounding bound, the rotation, zero blocks, NaN and
// infinity as hopattn.h documents them, strided tensors, every input dtype, out in the
// V-transposed layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/fp8_layout.hpp"
#include "core/fp8_scale.hpp"
#include "core/hadamard.hpp"
#include "hopattn/hopattn.h"
#include "hopattn/hopattn.hpp"

namespace hopattn {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// x as float32 in a padded buffer (strides larger than the shape), out in another padded buffer.
struct Quantized {
  int64_t batch = 2, seqlen = 300, heads = 3, head_dim = 64;
  std::vector<float> x;
  std::vector<uint8_t> out;
  std::vector<float> scales;
  hopattn_tensor x_view{}, out_view{};
  hopattn_quantize_options options = hopattn_default_quantize_options();

  Quantized(uint64_t seed = 1, int64_t rows = 300) : seqlen(rows) {
    x_view = {nullptr, HOPATTN_DTYPE_FLOAT32, batch, seqlen, heads, head_dim,
              (seqlen + 5) * heads * (head_dim + 8), heads * (head_dim + 8), head_dim + 8};
    x.assign(static_cast<size_t>(batch * x_view.batch_stride), 0.f);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    x_view.data = x.data();
    out_view = {nullptr, HOPATTN_DTYPE_FLOAT8_E4M3, batch, seqlen, heads, head_dim,
                seqlen * heads * (head_dim + 16), heads * (head_dim + 16), head_dim + 16};
    out.assign(static_cast<size_t>(batch * out_view.batch_stride), 0xa5);  // a sentinel
    out_view.data = out.data();
    options.backend = HOPATTN_BACKEND_CPU;
  }

  // out in HOPATTN_FP8_LAYOUT_V_TRANSPOSED instead (so unrotated), poisoned with NaN codes.
  void transpose_out() {
    const VTransposedLayout layout = VTransposedLayout::of(seqlen, heads, head_dim);
    out_view = {nullptr, HOPATTN_DTYPE_FLOAT8_E4M3, batch, seqlen, heads, head_dim,
                layout.batch_stride(), 1, layout.head_stride()};
    out.assign(static_cast<size_t>(layout.elements(batch)), kFloat8E4M3NaN);
    out_view.data = out.data();
    options.layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
    options.hadamard = 0;
  }

  float& at(int64_t b, int64_t row, int64_t h, int64_t i) {
    return x[static_cast<size_t>(b * x_view.batch_stride + row * x_view.seq_stride +
                                 h * x_view.head_stride + i)];
  }
  uint8_t code(int64_t b, int64_t row, int64_t h, int64_t i) const {
    return out[static_cast<size_t>(b * out_view.batch_stride + row * out_view.seq_stride +
                                   h * out_view.head_stride + i)];
  }
  int64_t blocks() const {
    return options.scaling == HOPATTN_FP8_SCALE_BLOCK ? (seqlen - 1) / options.block_rows + 1 : 1;
  }
  size_t scale_count() const {
    return options.scaling == HOPATTN_FP8_SCALE_TENSOR ? 1 : static_cast<size_t>(batch * heads * blocks());
  }
  // The index in scales of the scale that covers row `row` of head h of batch b.
  size_t scale_index(int64_t b, int64_t row, int64_t h) const {
    switch (options.scaling) {
      case HOPATTN_FP8_SCALE_TENSOR: return 0;
      case HOPATTN_FP8_SCALE_HEAD: return static_cast<size_t>(b * heads + h);
      case HOPATTN_FP8_SCALE_BLOCK: break;
    }
    return static_cast<size_t>((b * heads + h) * blocks() + row / options.block_rows);
  }
  float scale(int64_t b, int64_t row, int64_t h) const { return scales[scale_index(b, row, h)]; }
  // The values the library quantises: x's row, rotated when the options say so.
  std::vector<float> row_values(int64_t b, int64_t row, int64_t h) {
    std::vector<float> values(&at(b, row, h, 0), &at(b, row, h, 0) + head_dim);
    if (options.hadamard) hadamard_rotate(values.data(), head_dim, options.seed);
    return values;
  }

  void run() {
    scales.assign(scale_count() + 1, -7.f);  // one past the end: must stay
    ASSERT_EQ(hopattn_quantize_fp8(&x_view, &out_view, scales.data(), &options), HOPATTN_OK)
        << hopattn_last_error();
    EXPECT_EQ(scales.back(), -7.f);
    scales.pop_back();
  }
};

const hopattn_fp8_scaling kModes[] = {HOPATTN_FP8_SCALE_TENSOR, HOPATTN_FP8_SCALE_HEAD,
                                      HOPATTN_FP8_SCALE_BLOCK};

// |dequantised - value| within half an e4m3 ulp: 2^-4 |value| for normals, 2^-10 scale below
// 2^-6 scale (subnormals), plus the float32 rounding of value * (1 / scale).
void expect_within_half_ulp(float value, uint8_t code, float scale) {
  const double dequantised = static_cast<double>(to_float(float8_e4m3{code})) * scale;
  const double bound = std::max(std::ldexp(std::fabs(value), -4), std::ldexp(scale, -10));
  ASSERT_LE(std::fabs(dequantised - value), bound * (1 + 1e-6)) << value << " scale " << scale;
}

TEST(QuantizeFp8, RoundTripsWithinHalfAnUlpInEveryMode) {
  for (const hopattn_fp8_scaling mode : kModes) {
    for (const int hadamard : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "scaling " << mode << " hadamard " << hadamard);
      Quantized q;
      q.options.scaling = mode;
      q.options.hadamard = hadamard;
      q.options.seed = 11;
      q.run();
      // Each scale is its block's amax / 448, and the block's largest value reaches 448.
      std::vector<float> amax(q.scale_count(), 0.f);
      for (int64_t b = 0; b < q.batch; ++b) {
        for (int64_t h = 0; h < q.heads; ++h) {
          for (int64_t row = 0; row < q.seqlen; ++row) {
            const std::vector<float> values = q.row_values(b, row, h);
            const float s = q.scale(b, row, h);
            const size_t index = q.scale_index(b, row, h);
            for (int64_t i = 0; i < q.head_dim; ++i) {
              expect_within_half_ulp(values[i], q.code(b, row, h, i), s);
              ASSERT_EQ(q.code(b, row, h, i), from_float<float8_e4m3>(values[i] * (1.f / s)).bits);
              amax[index] = std::max(amax[index], std::fabs(values[i]));
            }
          }
        }
      }
      for (size_t i = 0; i < amax.size(); ++i) EXPECT_EQ(q.scales[i], amax[i] / 448.f) << i;
    }
  }
}

// The V-transposed layout holds the codes of rows bit for bit (a non-finite block's NaN codes
// too) at VTransposedLayout's addresses and zero codes at the rows past seqlen up to the pitch,
// which leaves no byte unwritten; the scales do not depend on the layout.
TEST(QuantizeFp8, VTransposedHoldsTheCodesOfRowsAtTheLayoutsAddresses) {
  const std::pair<hopattn_fp8_scaling, int64_t> scalings[] = {{HOPATTN_FP8_SCALE_TENSOR, 128},
                                                              {HOPATTN_FP8_SCALE_HEAD, 128},
                                                              {HOPATTN_FP8_SCALE_BLOCK, 16},
                                                              {HOPATTN_FP8_SCALE_BLOCK, 100}};
  for (const int64_t seqlen : {1, 17, 127, 300}) {
    for (const auto& [mode, block_rows] : scalings) {
      SCOPED_TRACE(testing::Message() << "seqlen " << seqlen << " scaling " << mode
                                      << " block_rows " << block_rows);
      Quantized rows(5, seqlen), transposed(5, seqlen);
      for (Quantized* q : {&rows, &transposed}) {
        q->options.scaling = mode;
        q->options.block_rows = block_rows;
        q->options.hadamard = 0;
        q->at(1, seqlen - 1, 2, 7) = kInf;
      }
      transposed.transpose_out();
      rows.run();
      transposed.run();
      EXPECT_EQ(transposed.scales, rows.scales);
      const VTransposedLayout layout = VTransposedLayout::of(seqlen, rows.heads, rows.head_dim);
      std::vector<uint8_t> expected(static_cast<size_t>(layout.elements(rows.batch)), 0x00);
      for (int64_t b = 0; b < rows.batch; ++b)
        for (int64_t row = 0; row < seqlen; ++row)
          for (int64_t h = 0; h < rows.heads; ++h)
            for (int64_t i = 0; i < rows.head_dim; ++i)
              expected[static_cast<size_t>(layout.offset(b, row, h, i))] = rows.code(b, row, h, i);
      EXPECT_EQ(transposed.out, expected);
      EXPECT_EQ(expected[static_cast<size_t>(layout.offset(1, seqlen - 1, 2, 7))], kFloat8E4M3NaN);
    }
  }
}

TEST(QuantizeFp8, WritesOnlyTheOutputView) {
  Quantized q;
  q.run();
  for (int64_t b = 0; b < q.batch; ++b) {
    for (int64_t row = 0; row < q.seqlen; ++row) {
      for (int64_t h = 0; h < q.heads; ++h) {
        for (int64_t i = q.head_dim; i < q.head_dim + 16; ++i) {
          ASSERT_EQ(q.code(b, row, h, i), 0xa5);  // the padding between head vectors
        }
      }
    }
  }
}

TEST(QuantizeFp8, OneLargeValueChangesOnlyItsBlocksScale) {
  for (const hopattn_fp8_scaling mode : kModes) {
    SCOPED_TRACE(mode);
    Quantized base, spiked;
    base.options.scaling = spiked.options.scaling = mode;
    base.run();
    spiked.at(1, 200, 2, 17) = 1000.f;  // batch 1, head 2, block 1 (rows 128 to 255)
    spiked.run();
    const size_t changed = mode == HOPATTN_FP8_SCALE_TENSOR ? 0
                           : mode == HOPATTN_FP8_SCALE_HEAD ? 1 * 3 + 2
                                                            : (1 * 3 + 2) * 3 + 1;
    ASSERT_EQ(base.scales.size(), spiked.scales.size());
    for (size_t i = 0; i < base.scales.size(); ++i) {
      if (i == changed) {
        EXPECT_GT(spiked.scales[i], 1000.f / std::sqrt(64.f) / 448.f * 0.99f) << i;
      } else {
        EXPECT_EQ(spiked.scales[i], base.scales[i]) << i;
      }
    }
    EXPECT_EQ(base.scales.size(), mode == HOPATTN_FP8_SCALE_TENSOR ? 1u
                                  : mode == HOPATTN_FP8_SCALE_HEAD ? 6u
                                                                   : 18u);
  }
}

// block_rows up to INT64_MAX is one block per head, the same scales as HOPATTN_FP8_SCALE_HEAD
// (the fuzzer's finding: ceil(seqlen / block_rows) computed as (seqlen + block_rows - 1) / ...
// overflowed).
TEST(QuantizeFp8, BlocksLongerThanTheSequenceAreOnePerHead) {
  Quantized per_head;
  per_head.options.scaling = HOPATTN_FP8_SCALE_HEAD;
  per_head.run();
  for (const int64_t block_rows : {int64_t{300}, int64_t{301}, std::numeric_limits<int64_t>::max()}) {
    Quantized q;
    q.options.block_rows = block_rows;
    q.run();
    EXPECT_EQ(q.scales, per_head.scales) << block_rows;
    EXPECT_EQ(q.out, per_head.out) << block_rows;
  }
}

TEST(QuantizeFp8, ABlockOfZerosHasScaleOneAndDequantisesToZeros) {
  Quantized q;
  for (int64_t row = 128; row < 256; ++row) {
    for (int64_t i = 0; i < q.head_dim; ++i) q.at(0, row, 1, i) = 0.f;
  }
  q.run();
  EXPECT_EQ(q.scale(0, 128, 1), 1.f);
  for (int64_t row = 128; row < 256; ++row) {
    for (int64_t i = 0; i < q.head_dim; ++i) {
      ASSERT_EQ(to_float(float8_e4m3{q.code(0, row, 1, i)}), 0.f);
    }
  }
  // A tensor of zeros, one scale.
  std::fill(q.x.begin(), q.x.end(), 0.f);
  q.options.scaling = HOPATTN_FP8_SCALE_TENSOR;
  q.run();
  EXPECT_EQ(q.scales[0], 1.f);
  EXPECT_EQ(to_float(float8_e4m3{q.code(1, 299, 2, 63)}), 0.f);
}

// A block whose amax / 448 lies below the smallest normal float gets that float, 2^-126, as its
// scale (core/fp8_scale.hpp): its reciprocal 2^126 is finite, and each code is value * 2^126
// rounded, exact before the rounding.
TEST(QuantizeFp8, TinyBlocksHaveTheSmallestNormalScale) {
  Quantized q;
  q.options.hadamard = 0;  // the codes are then x's own
  for (int64_t row = 128; row < 256; ++row) {
    for (int64_t i = 0; i < q.head_dim; ++i) q.at(0, row, 1, i) *= 0x1p-130f;
  }
  q.at(0, 130, 1, 3) = 0x1p-149f;  // a subnormal input
  q.run();
  EXPECT_EQ(q.scale(0, 128, 1), 0x1p-126f);
  EXPECT_EQ(fp8_reciprocal_of(0x1p-126f), 0x1p126f);
  for (int64_t row = 128; row < 256; ++row) {
    for (int64_t i = 0; i < q.head_dim; ++i) {
      ASSERT_EQ(q.code(0, row, 1, i), from_float<float8_e4m3>(std::ldexp(q.at(0, row, 1, i), 126)).bits);
    }
  }
  EXPECT_EQ(q.code(0, 130, 1, 3), 0x00);  // 2^-23 rounds to e4m3's zero
}

// hopattn.h: a block holding a NaN or an infinity (after the rotation) is all NaN codes, with
// scale NaN if it holds a NaN, else +inf; the other blocks are untouched.
TEST(QuantizeFp8, NonFiniteValuesPoisonTheirBlockOnly) {
  struct Case {
    std::vector<float> values;  // placed in row 5 of (batch 0, head 1), entries 3, 4, ...
    int hadamard;
    bool scale_is_nan;
  };
  const Case cases[] = {{{kNaN}, 0, true},          {{kNaN}, 1, true},
                        {{kInf}, 0, false},         {{-kInf}, 0, false},
                        {{-kInf}, 1, false},        {{kInf, kNaN}, 0, true},
                        {{kInf, -kInf}, 0, false},  {{kInf, kInf}, 1, true}};  // inf - inf
  for (const Case& c : cases) {
    for (const hopattn_fp8_scaling mode : kModes) {
      SCOPED_TRACE(testing::Message() << "first " << c.values[0] << " count " << c.values.size()
                                      << " hadamard " << c.hadamard << " mode " << mode);
      Quantized base, poisoned;
      base.options.scaling = poisoned.options.scaling = mode;
      base.options.hadamard = poisoned.options.hadamard = c.hadamard;
      base.run();
      for (size_t j = 0; j < c.values.size(); ++j) poisoned.at(0, 5, 1, 3 + j) = c.values[j];
      poisoned.run();
      const float s = poisoned.scale(0, 5, 1);
      if (c.scale_is_nan) {
        EXPECT_TRUE(std::isnan(s)) << s;
      } else {
        EXPECT_EQ(s, kInf);
      }
      const size_t poisoned_index = poisoned.scale_index(0, 5, 1);
      for (size_t i = 0; i < base.scales.size(); ++i) {
        if (i != poisoned_index) {
          EXPECT_EQ(poisoned.scales[i], base.scales[i]) << i;
        }
      }
      for (int64_t b = 0; b < base.batch; ++b) {
        for (int64_t row = 0; row < base.seqlen; ++row) {
          for (int64_t h = 0; h < base.heads; ++h) {
            const bool in_block = poisoned.scale_index(b, row, h) == poisoned_index;
            for (int64_t i = 0; i < base.head_dim; ++i) {
              if (in_block) {
                ASSERT_EQ(poisoned.code(b, row, h, i), kFloat8E4M3NaN);
              } else {
                ASSERT_EQ(poisoned.code(b, row, h, i), base.code(b, row, h, i));
              }
            }
          }
        }
      }
    }
  }
}

TEST(QuantizeFp8, HalfPrecisionInputsQuantiseTheirValues) {
  for (const hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    SCOPED_TRACE(dtype);
    Quantized reference;
    // Round x to the dtype, then quantise it once as float32 and once in the dtype.
    for (float& v : reference.x) {
      v = dtype == HOPATTN_DTYPE_BFLOAT16 ? to_float(from_float<bfloat16>(v))
                                          : to_float(from_float<float16>(v));
    }
    reference.run();
    std::vector<uint16_t> halves(reference.x.size());
    for (size_t i = 0; i < halves.size(); ++i) {
      halves[i] = dtype == HOPATTN_DTYPE_BFLOAT16 ? from_float<bfloat16>(reference.x[i]).bits
                                                  : from_float<float16>(reference.x[i]).bits;
    }
    Quantized half;
    half.x_view.data = halves.data();
    half.x_view.dtype = dtype;
    half.run();
    EXPECT_EQ(half.scales, reference.scales);
    EXPECT_EQ(half.out, reference.out);
  }
}

TEST(QuantizeFp8, TheSeedPicksTheRotation) {
  Quantized a, b, same, off;
  a.options.seed = same.options.seed = 1;
  b.options.seed = 2;
  off.options.hadamard = 0;
  a.run();
  b.run();
  same.run();
  off.run();
  EXPECT_EQ(a.out, same.out);  // deterministic, whatever the threads did
  EXPECT_EQ(a.scales, same.scales);
  EXPECT_NE(a.out, b.out);
  EXPECT_NE(a.out, off.out);
  // Without the rotation, the codes are x's own.
  EXPECT_EQ(off.code(1, 7, 2, 5), from_float<float8_e4m3>(off.at(1, 7, 2, 5) * (1.f / off.scale(1, 7, 2))).bits);
}

// Rotating q and k with one seed keeps q . k: after quantisation, within the FP8 error.
TEST(QuantizeFp8, RotatedQAndKKeepTheirDotProducts) {
  Quantized q(3), k(4);
  q.at(0, 0, 0, 9) = 30.f;  // an outlier channel
  q.options.scaling = k.options.scaling = HOPATTN_FP8_SCALE_HEAD;
  q.options.seed = k.options.seed = 5;
  q.run();
  k.run();
  for (int64_t row = 0; row < 8; ++row) {
    double exact = 0, quantised = 0, norms = 0, nq = 0, nk = 0;
    for (int64_t i = 0; i < q.head_dim; ++i) {
      exact += static_cast<double>(q.at(0, 0, 0, i)) * k.at(0, row, 0, i);
      quantised += static_cast<double>(to_float(float8_e4m3{q.code(0, 0, 0, i)})) * q.scales[0] *
                   to_float(float8_e4m3{k.code(0, row, 0, i)}) * k.scales[0];
      nq += static_cast<double>(q.at(0, 0, 0, i)) * q.at(0, 0, 0, i);
      nk += static_cast<double>(k.at(0, row, 0, i)) * k.at(0, row, 0, i);
    }
    norms = std::sqrt(nq * nk);
    EXPECT_NEAR(quantised, exact, 0.0625 * 2 * norms) << row;  // two roundings of 2^-4
  }
}

TEST(QuantizeFp8, TheCppWrapperAndCheckedErrors) {
  Quantized q;
  std::vector<float> scales(18);
  hopattn::QuantizeOptions options;
  options.backend = HOPATTN_BACKEND_CPU;
  const hopattn_tensor& x = q.x_view;
  const hopattn_tensor& o = q.out_view;
  const hopattn::Tensor x_tensor(x.data, x.dtype, x.batch, x.seqlen, x.heads, x.head_dim,
                                 x.batch_stride, x.seq_stride, x.head_stride);
  const hopattn::MutableTensor out(o.data, o.dtype, o.batch, o.seqlen, o.heads, o.head_dim,
                                   o.batch_stride, o.seq_stride, o.head_stride);
  hopattn::quantize_fp8(x_tensor, out, scales.data(), options);
  q.run();
  EXPECT_EQ(scales, q.scales);
  hopattn_tensor wrong = q.out_view;
  wrong.dtype = HOPATTN_DTYPE_FLOAT32;
  EXPECT_EQ(hopattn_quantize_fp8(&q.x_view, &wrong, scales.data(), nullptr),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("out.dtype is float32"), std::string::npos);
}

TEST(QuantizeFp8, AttentionRefusesE4M3) {
  EXPECT_EQ(hopattn_backend_supports(HOPATTN_BACKEND_CPU, HOPATTN_DTYPE_FLOAT8_E4M3, 64), 0);
  EXPECT_EQ(hopattn_backend_supports(HOPATTN_BACKEND_AUTO, HOPATTN_DTYPE_FLOAT8_E4M3, 64), 0);
  EXPECT_EQ(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_FLOAT8_E4M3, 128), 0);
  std::vector<uint8_t> buffer(4 * 8 * 2 * 16);
  hopattn_tensor t{buffer.data(), HOPATTN_DTYPE_FLOAT8_E4M3, 1, 8, 2, 16, 256, 32, 16};
  std::vector<uint8_t> o_buffer(buffer.size());
  hopattn_tensor o = t;
  o.data = o_buffer.data();
  EXPECT_EQ(hopattn_forward(&t, &t, &t, &o, nullptr, nullptr), HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("q.dtype is float8_e4m3; hopattn_forward takes"),
            std::string::npos)
      << hopattn_last_error();
}

}  // namespace
}  // namespace hopattn
