// hopattn_forward_fp8 on the CPU backend, through the C ABI: inputs quantised with
// hopattn_quantize_fp8, the output checked against the float64 reference on the dequantised
// inputs (code * scale, Fp8Scales::index) over a matrix of shapes and every scale layout; bit for
// bit equal to the float32 forward of those inputs (the same algorithm), and with V in the
// V-transposed layout to the call with V in rows; NaN and +inf scales
// making NaN in exactly the rows that see their block; refused scales; the workspace query and
// the C++ wrapper.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "api/problem_of.hpp"
#include "core/causal_mask.hpp"
#include "core/dtype.hpp"
#include "core/fp8_layout.hpp"
#include "cpu/reference.hpp"
#include "hopattn/hopattn.h"
#include "hopattn/hopattn.hpp"
#include "test_support.hpp"

namespace hopattn::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct ScalesLayout {
  hopattn_fp8_scaling scaling = HOPATTN_FP8_SCALE_BLOCK;
  int64_t block_rows = 128;
};

struct Fp8Case {
  int64_t batch = 1, seqlen_q = 64, seqlen_k = 64, heads_q = 2, heads_kv = 2, head_dim = 64;
  bool causal = false;
  bool padded = false;  // codes with strides larger than dense
  hopattn_dtype out = HOPATTN_DTYPE_BFLOAT16;
  ScalesLayout q_scales, k_scales, v_scales{HOPATTN_FP8_SCALE_HEAD, 0};
  bool hadamard = true;  // q and k rotated with one seed (v never)
  float softmax_scale = 0.f;
};

std::string describe(const Fp8Case& c) {
  const auto layout = [](const ScalesLayout& s) {
    return s.scaling == HOPATTN_FP8_SCALE_TENSOR ? std::string("tensor")
           : s.scaling == HOPATTN_FP8_SCALE_HEAD ? std::string("head")
                                                 : "block" + std::to_string(s.block_rows);
  };
  std::ostringstream s;
  s << "batch " << c.batch << " seqlen_q " << c.seqlen_q << " seqlen_k " << c.seqlen_k
    << " heads " << c.heads_q << "/" << c.heads_kv << " head_dim " << c.head_dim
    << (c.causal ? " causal" : "") << (c.padded ? " padded" : "") << " out "
    << (c.out == HOPATTN_DTYPE_FLOAT16 ? "float16" : "bfloat16") << " scales "
    << layout(c.q_scales) << "/" << layout(c.k_scales) << "/" << layout(c.v_scales)
    << (c.hadamard ? " hadamard" : "") << " scale " << c.softmax_scale;
  return s.str();
}

hopattn_tensor dense(void* data, hopattn_dtype dtype, int64_t batch, int64_t seqlen, int64_t heads,
                     int64_t head_dim) {
  return {data,  dtype, batch, seqlen, heads, head_dim, seqlen * heads * head_dim,
          heads * head_dim, head_dim};
}

// One input quantised by the library: its float32 source (N(0,1), dense), e4m3 codes, scales,
// and the dequantised float32 values (dense) the reference reads.
struct QuantizedInput {
  std::vector<float> source;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<float> dequantised;
  hopattn_tensor source_view{};
  hopattn_tensor tensor{};    // the codes
  hopattn_tensor float32{};   // the dequantised values
  hopattn_fp8_scales fp8{};
  hopattn_quantize_options options = hopattn_default_quantize_options();

  QuantizedInput(const Fp8Case& c, int64_t seqlen, int64_t heads, const ScalesLayout& layout,
                 bool rotate, std::mt19937_64& rng) {
    const int64_t d = c.head_dim;
    source.resize(static_cast<size_t>(c.batch * seqlen * heads * d));
    std::normal_distribution<float> normal;
    for (float& value : source) value = normal(rng);
    source_view = dense(source.data(), HOPATTN_DTYPE_FLOAT32, c.batch, seqlen, heads, d);
    const int64_t head_stride = c.padded ? d + 16 : d;
    const int64_t seq_stride = heads * head_stride + (c.padded ? 32 : 0);
    tensor = {nullptr,   HOPATTN_DTYPE_FLOAT8_E4M3, c.batch,    seqlen,     heads,
              d,         seqlen * seq_stride + (c.padded ? 48 : 0), seq_stride, head_stride};
    codes.assign(static_cast<size_t>(c.batch * tensor.batch_stride), 0x7f);  // NaN between rows
    tensor.data = codes.data();
    options.backend = HOPATTN_BACKEND_CPU;
    options.scaling = layout.scaling;
    options.block_rows = layout.block_rows;
    options.hadamard = rotate ? 1 : 0;
    options.seed = 77;
    const int64_t blocks =
        layout.scaling == HOPATTN_FP8_SCALE_BLOCK ? (seqlen - 1) / layout.block_rows + 1 : 1;
    scales.assign(layout.scaling == HOPATTN_FP8_SCALE_TENSOR
                      ? 1
                      : static_cast<size_t>(c.batch * heads * blocks),
                  0.f);
    fp8 = {scales.data(), layout.scaling, layout.block_rows};
    quantise();
  }

  // source -> codes and scales -> dequantised.
  void quantise() {
    EXPECT_EQ(hopattn_quantize_fp8(&source_view, &tensor, scales.data(), &options), HOPATTN_OK)
        << hopattn_last_error();
    dequantise();
  }

  // code * scale in float32: the product of a 4-bit and a 24-bit significand is exact in
  // double, so rounding it once to float is the backend's float32 multiply.
  void dequantise() {
    const Fp8Scales s = fp8_scales_of(fp8, tensor);
    dequantised.assign(static_cast<size_t>(tensor.batch * tensor.seqlen * tensor.heads *
                                           tensor.head_dim),
                       0.f);
    float32 = dense(dequantised.data(), HOPATTN_DTYPE_FLOAT32, tensor.batch, tensor.seqlen,
                    tensor.heads, tensor.head_dim);
    for (int64_t b = 0; b < tensor.batch; ++b)
      for (int64_t r = 0; r < tensor.seqlen; ++r)
        for (int64_t h = 0; h < tensor.heads; ++h) {
          const double scale = s.data[s.index(b, h, r)];
          for (int64_t i = 0; i < tensor.head_dim; ++i) {
            const double code = load_element(HOPATTN_DTYPE_FLOAT8_E4M3, codes.data(),
                                             element_offset(tensor, b, r, h, i));
            dequantised[static_cast<size_t>(element_offset(float32, b, r, h, i))] =
                static_cast<float>(code * (std::isfinite(scale) ? scale : NAN));
          }
        }
  }
};

// A case's three quantised inputs, o (poisoned) and the lse.
struct Fp8Tensors {
  QuantizedInput q, k, v;
  std::vector<uint16_t> o_storage;
  hopattn_tensor o{};
  std::vector<float> lse;

  Fp8Tensors(const Fp8Case& c, std::mt19937_64& rng)
      : q(c, c.seqlen_q, c.heads_q, c.q_scales, c.hadamard, rng),
        k(c, c.seqlen_k, c.heads_kv, c.k_scales, c.hadamard, rng),
        v(c, c.seqlen_k, c.heads_kv, c.v_scales, false, rng) {
    o_storage.assign(static_cast<size_t>(c.batch * c.seqlen_q * c.heads_q * c.head_dim),
                     c.out == HOPATTN_DTYPE_BFLOAT16 ? 0x7fc0 : 0x7e00);
    o = dense(o_storage.data(), c.out, c.batch, c.seqlen_q, c.heads_q, c.head_dim);
    lse.assign(static_cast<size_t>(c.batch * c.heads_q * c.seqlen_q), kNaN);
  }

  hopattn_status run(const Fp8Case& c) {
    hopattn_forward_options options = hopattn_default_forward_options();
    options.backend = HOPATTN_BACKEND_CPU;
    options.causal = c.causal;
    options.softmax_scale = c.softmax_scale;
    return hopattn_forward_fp8(&q.tensor, &q.fp8, &k.tensor, &k.fp8, &v.tensor, &v.fp8, &o,
                               lse.data(), &options);
  }

  // The float32 problem of the dequantised inputs, as the reference reads it.
  ForwardProblem dequantised_problem(const Fp8Case& c) {
    hopattn_forward_options options = hopattn_default_forward_options();
    options.causal = c.causal;
    options.softmax_scale = c.softmax_scale;
    return problem_of(q.float32, k.float32, v.float32, o, lse.data(), options);
  }
};

void check_fp8_case(const Fp8Case& c) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Fp8Tensors t(c, rng);
  ASSERT_EQ(t.run(c), HOPATTN_OK) << hopattn_last_error();
  EXPECT_STREQ(hopattn_last_error(), "");

  std::vector<double> ref_out, ref_lse;
  reference_forward(t.dequantised_problem(c), ref_out, ref_lse);
  const std::vector<double> out = read_output(t.o);
  int64_t not_finite = 0, nonzero_in_empty_rows = 0, bad_lse = 0;
  double lse_error = 0;
  const int64_t d = c.head_dim;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < c.seqlen_q; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const bool sees_no_key = visible_key_end(c.causal, i, c.seqlen_q, c.seqlen_k) == 0;
        const size_t row = static_cast<size_t>(((b * c.seqlen_q + i) * c.heads_q + h) * d);
        for (int64_t e = 0; e < d; ++e) {
          not_finite += !std::isfinite(out[row + static_cast<size_t>(e)]);
          nonzero_in_empty_rows += sees_no_key && out[row + static_cast<size_t>(e)] != 0.0;
        }
        const size_t at = static_cast<size_t>((b * c.heads_q + h) * c.seqlen_q + i);
        if (sees_no_key) {
          bad_lse += !(std::isinf(t.lse[at]) && t.lse[at] < 0);
        } else if (!std::isfinite(t.lse[at])) {
          ++bad_lse;
        } else {
          lse_error = std::max(lse_error,
                               std::abs(t.lse[at] - ref_lse[at]) / std::max(1.0, std::abs(ref_lse[at])));
        }
      }
  EXPECT_EQ(not_finite, 0) << "output elements left unwritten or not finite";
  EXPECT_EQ(nonzero_in_empty_rows, 0) << "rows that see no key must be exactly 0";
  EXPECT_EQ(bad_lse, 0) << "LSE must be finite, and -inf exactly for rows that see no key";
  EXPECT_LE(lse_error, kLseTolerance) << "largest LSE error relative to max(1, |lse|)";
  const ErrorNorms norms = error_norms(out, ref_out);
  EXPECT_LE(norms.relative, relative_tolerance(c.out)) << norms.str();
}

TEST(Fp8Forward, GqaCausalBlockScalesHeadDim64) {
  Fp8Case c;
  c.batch = 2;
  c.seqlen_q = 100;
  c.seqlen_k = 300;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.causal = true;
  check_fp8_case(c);
}

TEST(Fp8Forward, MqaPaddedTensorScalesHeadDim128Float16) {
  Fp8Case c;
  c.seqlen_q = c.seqlen_k = 257;
  c.heads_q = 4;
  c.heads_kv = 1;
  c.head_dim = 128;
  c.padded = true;
  c.out = HOPATTN_DTYPE_FLOAT16;
  c.q_scales = c.k_scales = c.v_scales = {HOPATTN_FP8_SCALE_TENSOR, 0};
  check_fp8_case(c);
}

TEST(Fp8Forward, CausalHeadScalesHeadDim256AndAScale) {
  Fp8Case c;
  c.seqlen_q = 300;
  c.seqlen_k = 130;  // the first 170 rows see no key
  c.head_dim = 256;
  c.causal = true;
  c.q_scales = c.k_scales = c.v_scales = {HOPATTN_FP8_SCALE_HEAD, 0};
  c.softmax_scale = 0.03f;
  check_fp8_case(c);
}

TEST(Fp8Forward, OddHeadDimWithoutRotationPaddedBlockScalesEverywhere) {
  Fp8Case c;
  c.batch = 2;
  c.seqlen_q = 200;
  c.seqlen_k = 333;
  c.heads_q = 6;
  c.heads_kv = 3;
  c.head_dim = 80;  // no power of two: no rotation
  c.hadamard = false;
  c.causal = true;
  c.padded = true;
  c.out = HOPATTN_DTYPE_FLOAT16;
  c.q_scales = {HOPATTN_FP8_SCALE_BLOCK, 64};
  c.k_scales = {HOPATTN_FP8_SCALE_BLOCK, 32};
  c.v_scales = {HOPATTN_FP8_SCALE_BLOCK, 50};  // the CPU backend takes block V scales
  check_fp8_case(c);
}

TEST(Fp8Forward, DecodingOneQueryRow) {
  Fp8Case c;
  c.seqlen_q = 1;
  c.seqlen_k = 500;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.causal = true;
  c.k_scales = c.v_scales = {HOPATTN_FP8_SCALE_BLOCK, 128};
  check_fp8_case(c);
}

TEST(Fp8Forward, EveryScaleLayout) {
  const ScalesLayout layouts[] = {{HOPATTN_FP8_SCALE_TENSOR, 0},
                                  {HOPATTN_FP8_SCALE_HEAD, 0},
                                  {HOPATTN_FP8_SCALE_BLOCK, 16},
                                  {HOPATTN_FP8_SCALE_BLOCK, 1000}};  // one block, past the rows
  int index = 0;
  for (const ScalesLayout& q : layouts)
    for (const ScalesLayout& k : layouts)
      for (const ScalesLayout& v : layouts) {
        Fp8Case c;
        c.batch = 2;
        c.seqlen_q = 70;
        c.seqlen_k = 90;
        c.heads_q = 2;
        c.heads_kv = 1;
        c.head_dim = 32;
        c.q_scales = q;
        c.k_scales = k;
        c.v_scales = v;
        c.causal = index % 2 == 1;
        c.out = index % 3 == 0 ? HOPATTN_DTYPE_FLOAT16 : HOPATTN_DTYPE_BFLOAT16;
        ++index;
        check_fp8_case(c);
      }
}

// The FP8 forward is the float32 forward on the dequantised inputs, rounded once to o's dtype:
// the same algorithm, so the same float32 result bit for bit.
TEST(Fp8Forward, EqualsTheFloat32ForwardOfTheDequantisedInputsBitForBit) {
  Fp8Case c;
  c.batch = 2;
  c.seqlen_q = 211;
  c.seqlen_k = 197;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.causal = true;
  c.padded = true;
  c.k_scales = {HOPATTN_FP8_SCALE_BLOCK, 64};
  c.v_scales = {HOPATTN_FP8_SCALE_BLOCK, 100};
  std::mt19937_64 rng(test_seed());
  Fp8Tensors t(c, rng);
  ASSERT_EQ(t.run(c), HOPATTN_OK) << hopattn_last_error();

  std::vector<float> o32(t.o_storage.size()), lse32(t.lse.size());
  hopattn_tensor o32_view = dense(o32.data(), HOPATTN_DTYPE_FLOAT32, c.batch, c.seqlen_q,
                                  c.heads_q, c.head_dim);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = HOPATTN_BACKEND_CPU;
  options.causal = 1;
  ASSERT_EQ(hopattn_forward(&t.q.float32, &t.k.float32, &t.v.float32, &o32_view, lse32.data(),
                            &options),
            HOPATTN_OK)
      << hopattn_last_error();
  int64_t different = 0;
  for (size_t i = 0; i < o32.size(); ++i)
    different += from_float<bfloat16>(o32[i]).bits != t.o_storage[i];
  EXPECT_EQ(different, 0);
  EXPECT_EQ(std::memcmp(lse32.data(), t.lse.data(), lse32.size() * sizeof(float)), 0);
}

// The varlen tests' batch: five packed sequences, one of no queries, one of no keys.
const std::vector<int32_t> kPackedQ = {0, 0, 37, 237, 238, 328}, kPackedK = {0, 5, 69, 199, 199, 289};

hopattn_varlen packed_varlen() {
  hopattn_varlen varlen = hopattn_default_varlen();
  varlen.batch = static_cast<int64_t>(kPackedQ.size()) - 1;
  varlen.cu_seqlens_q = kPackedQ.data();
  varlen.cu_seqlens_k = kPackedK.data();
  varlen.max_seqlen_q = 200;
  varlen.max_seqlen_k = 130;
  return varlen;
}

// hopattn_forward_fp8_varlen on packed_varlen(), scale blocks of 64 packed rows that straddle the
// sequences, causal, GQA; the float32 varlen forward of the dequantised packed inputs bit for bit,
// as at fixed lengths.
TEST(Fp8Forward, VarlenEqualsTheFloat32VarlenForwardOfTheDequantisedInputsBitForBit) {
  const std::vector<int32_t>& cu_q = kPackedQ;
  const std::vector<int32_t>& cu_k = kPackedK;
  Fp8Case c;
  c.seqlen_q = cu_q.back();
  c.seqlen_k = cu_k.back();
  c.heads_q = 4;
  c.heads_kv = 2;
  c.causal = true;
  c.q_scales = c.k_scales = {HOPATTN_FP8_SCALE_BLOCK, 64};
  std::mt19937_64 rng(test_seed());
  Fp8Tensors t(c, rng);
  hopattn_varlen varlen = packed_varlen();
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = HOPATTN_BACKEND_CPU;
  options.causal = 1;
  ASSERT_EQ(hopattn_forward_fp8_varlen(&t.q.tensor, &t.q.fp8, &t.k.tensor, &t.k.fp8, &t.v.tensor,
                                       &t.v.fp8, &t.o, t.lse.data(), &varlen, &options),
            HOPATTN_OK)
      << hopattn_last_error();
  size_t bytes = 1;
  EXPECT_EQ(hopattn_forward_fp8_varlen_workspace_size(&t.q.tensor, &t.k.tensor, &t.v.tensor,
                                                      HOPATTN_DTYPE_BFLOAT16, &varlen, &options, &bytes),
            HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(hopattn_forward_fp8_varlen_workspace_size(&t.q.tensor, &t.k.tensor, &t.v.tensor,
                                                      HOPATTN_DTYPE_BFLOAT16, nullptr, &options, &bytes),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hopattn_last_error(), "varlen is NULL");
  EXPECT_EQ(hopattn_forward_fp8_varlen_workspace_size(&t.q.tensor, &t.k.tensor, &t.v.tensor,
                                                      HOPATTN_DTYPE_BFLOAT16, &varlen, &options, nullptr),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hopattn_last_error(), "bytes is NULL");

  std::vector<float> o32(t.o_storage.size()), lse32(t.lse.size());
  hopattn_tensor o32_view = dense(o32.data(), HOPATTN_DTYPE_FLOAT32, 1, c.seqlen_q, c.heads_q,
                                  c.head_dim);
  ASSERT_EQ(hopattn_forward_varlen(&t.q.float32, &t.k.float32, &t.v.float32, &o32_view,
                                   lse32.data(), &varlen, &options),
            HOPATTN_OK)
      << hopattn_last_error();
  int64_t different = 0, rows_of_no_key = 0;
  for (size_t i = 0; i < o32.size(); ++i)
    different += from_float<bfloat16>(o32[i]).bits != t.o_storage[i];
  for (float value : lse32) rows_of_no_key += std::isinf(value);
  EXPECT_EQ(different, 0);
  EXPECT_EQ(std::memcmp(lse32.data(), t.lse.data(), lse32.size() * sizeof(float)), 0);
  EXPECT_GT(rows_of_no_key, 0);  // the sequence without keys, and causal rows above the diagonal

  // The C++ wrapper is the same call.
  const auto input = [](const QuantizedInput& x) {
    const hopattn_tensor& r = x.tensor;
    return hopattn::Tensor(r.data, r.dtype, r.batch, r.seqlen, r.heads, r.head_dim,
                           r.batch_stride, r.seq_stride, r.head_stride);
  };
  hopattn::Varlen cpp_varlen;
  cpp_varlen.batch = varlen.batch;
  cpp_varlen.cu_seqlens_q = cu_q.data();
  cpp_varlen.cu_seqlens_k = cu_k.data();
  cpp_varlen.max_seqlen_q = varlen.max_seqlen_q;
  cpp_varlen.max_seqlen_k = varlen.max_seqlen_k;
  hopattn::ForwardOptions cpp_options;
  cpp_options.causal = true;
  cpp_options.backend = HOPATTN_BACKEND_CPU;
  std::vector<uint16_t> o(t.o_storage.size(), 0x7fc0);
  hopattn::forward_fp8_varlen(
      input(t.q), hopattn::Fp8ScalesView::block(t.q.scales.data(), 64), input(t.k),
      hopattn::Fp8ScalesView::block(t.k.scales.data(), 64), input(t.v),
      hopattn::Fp8ScalesView::head(t.v.scales.data()),
      hopattn::Tensor::contiguous(o.data(), c.out, 1, c.seqlen_q, c.heads_q, c.head_dim), cpp_varlen,
      nullptr, cpp_options);
  EXPECT_EQ(o, t.o_storage);
  EXPECT_EQ(hopattn::forward_fp8_workspace_size(input(t.q), input(t.k), input(t.v), c.out,
                                                &cpp_varlen, cpp_options),
            0u);
}

// v's source quantised again, by hopattn_quantize_fp8 into HOPATTN_FP8_LAYOUT_V_TRANSPOSED: the
// codes in that layout, with scales of their own (equal to v's).
struct TransposedV {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  hopattn_tensor tensor{};
  hopattn_fp8_scales fp8{};

  explicit TransposedV(const QuantizedInput& v) : scales(v.scales.size(), 0.f) {
    const hopattn_tensor& x = v.source_view;
    const VTransposedLayout layout = VTransposedLayout::of(x.seqlen, x.heads, x.head_dim);
    codes.assign(static_cast<size_t>(layout.elements(x.batch)), 0x7f);
    tensor = {codes.data(), HOPATTN_DTYPE_FLOAT8_E4M3, x.batch,  x.seqlen, x.heads, x.head_dim,
              layout.batch_stride(), 1, layout.head_stride()};
    hopattn_quantize_options options = v.options;  // unrotated, as V always is
    options.layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
    EXPECT_EQ(hopattn_quantize_fp8(&x, &tensor, scales.data(), &options), HOPATTN_OK)
        << hopattn_last_error();
    EXPECT_EQ(scales, v.scales);
    fp8 = {scales.data(), v.fp8.scaling, v.fp8.block_rows};
  }
};

// The same V in either layout: the CPU gathers a transposed V's rows into the same tiles, so O and
// the LSE are bit for bit those of V in rows; key counts that are no multiple of 16 (the pitch's
// pad), block V scales, fixed and variable lengths, causal or not.
TEST(Fp8Forward, VTransposedGivesTheResultsOfVInRowsBitForBit) {
  for (const bool is_varlen : {false, true}) {
    for (const bool causal : {false, true}) {
      Fp8Case c;
      c.batch = is_varlen ? 1 : 2;
      c.seqlen_q = is_varlen ? kPackedQ.back() : 150;
      c.seqlen_k = is_varlen ? kPackedK.back() : 97;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.causal = causal;
      c.v_scales = {HOPATTN_FP8_SCALE_BLOCK, 64};
      SCOPED_TRACE(describe(c) + (is_varlen ? " varlen" : ""));
      std::mt19937_64 rng(test_seed());
      Fp8Tensors t(c, rng);
      const TransposedV transposed(t.v);
      const hopattn_varlen varlen = packed_varlen();
      hopattn_forward_options options = hopattn_default_forward_options();
      options.backend = HOPATTN_BACKEND_CPU;
      options.causal = causal;
      const auto run = [&](const hopattn_tensor& v, const hopattn_fp8_scales& v_scales,
                           hopattn_tensor& o, float* lse) {
        return is_varlen ? hopattn_forward_fp8_varlen(&t.q.tensor, &t.q.fp8, &t.k.tensor, &t.k.fp8,
                                                      &v, &v_scales, &o, lse, &varlen, &options)
                         : hopattn_forward_fp8(&t.q.tensor, &t.q.fp8, &t.k.tensor, &t.k.fp8, &v,
                                               &v_scales, &o, lse, &options);
      };
      ASSERT_EQ(run(t.v.tensor, t.v.fp8, t.o, t.lse.data()), HOPATTN_OK) << hopattn_last_error();
      std::vector<uint16_t> o(t.o_storage.size(), 0x7fc0);
      std::vector<float> lse(t.lse.size(), kNaN);
      hopattn_tensor o_view = t.o;
      o_view.data = o.data();
      options.fp8_v_layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
      ASSERT_EQ(run(transposed.tensor, transposed.fp8, o_view, lse.data()), HOPATTN_OK)
          << hopattn_last_error();
      EXPECT_EQ(o, t.o_storage);
      EXPECT_EQ(std::memcmp(lse.data(), t.lse.data(), lse.size() * sizeof(float)), 0);
    }
  }
}

// Rows of O (all head_dim values) and of the LSE that hold NaN, as (batch, head, row) flags.
struct NanRows {
  std::vector<bool> o, lse;
  int64_t heads, seqlen;
  NanRows(const Fp8Tensors& t, const Fp8Case& c) : heads(c.heads_q), seqlen(c.seqlen_q) {
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.heads_q; ++h)
        for (int64_t i = 0; i < c.seqlen_q; ++i) {
          int64_t nans = 0;
          for (int64_t e = 0; e < c.head_dim; ++e)
            nans += is_nan_element(c.out, t.o.data, element_offset(t.o, b, i, h, e));
          EXPECT_TRUE(nans == 0 || nans == c.head_dim) << "a row partly NaN: " << b << " " << h
                                                       << " " << i;
          o.push_back(nans > 0);
          lse.push_back(std::isnan(t.lse[static_cast<size_t>((b * c.heads_q + h) * c.seqlen_q + i)]));
        }
  }
  bool o_at(int64_t b, int64_t h, int64_t i) const {
    return o[static_cast<size_t>((b * heads + h) * seqlen + i)];
  }
  bool lse_at(int64_t b, int64_t h, int64_t i) const {
    return lse[static_cast<size_t>((b * heads + h) * seqlen + i)];
  }
};

// Causal, 256 x 256, GQA 2/1, blocks of 64 rows for q, k and v; one scale made NaN or +inf.
class Fp8NonFiniteScales : public ::testing::Test {
 protected:
  void SetUp() override {
    c.batch = 2;
    c.seqlen_q = c.seqlen_k = 256;
    c.heads_q = 2;
    c.heads_kv = 1;
    c.causal = true;
    c.q_scales = c.k_scales = c.v_scales = {HOPATTN_FP8_SCALE_BLOCK, 64};
  }
  // Scale index of (b, head, block) for 4 blocks per head.
  static size_t at(int64_t b, int64_t heads, int64_t head, int64_t block) {
    return static_cast<size_t>((b * heads + head) * 4 + block);
  }
  Fp8Case c;
};

TEST_F(Fp8NonFiniteScales, KeyBlockReachesExactlyTheRowsThatSeeIt) {
  for (float mark : {kNaN, kInf}) {
    SCOPED_TRACE(mark);
    std::mt19937_64 rng(test_seed());
    Fp8Tensors t(c, rng);
    t.k.scales[at(1, 1, 0, 2)] = mark;  // keys [128, 192) of batch 1
    ASSERT_EQ(t.run(c), HOPATTN_OK) << hopattn_last_error();
    const NanRows nan(t, c);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 256; ++i) {
          const bool sees = b == 1 && visible_key_end(true, i, 256, 256) > 128;
          ASSERT_EQ(nan.o_at(b, h, i), sees) << b << " " << h << " " << i;
          ASSERT_EQ(nan.lse_at(b, h, i), sees) << b << " " << h << " " << i;
        }
  }
}

TEST_F(Fp8NonFiniteScales, QueryBlockReachesItsRowsOnly) {
  std::mt19937_64 rng(test_seed());
  Fp8Tensors t(c, rng);
  t.q.scales[at(0, 2, 1, 3)] = kNaN;  // rows [192, 256) of head 1, batch 0
  ASSERT_EQ(t.run(c), HOPATTN_OK) << hopattn_last_error();
  const NanRows nan(t, c);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 256; ++i) {
        const bool in_block = b == 0 && h == 1 && i >= 192;
        ASSERT_EQ(nan.o_at(b, h, i), in_block) << b << " " << h << " " << i;
        ASSERT_EQ(nan.lse_at(b, h, i), in_block) << b << " " << h << " " << i;
      }
}

// A non-finite V block: O is NaN in the rows that see it (under the causal mask, not in the rows
// of the same key tile that do not), the LSE nowhere.
TEST_F(Fp8NonFiniteScales, ValueBlockReachesTheOutputOfTheRowsThatSeeIt) {
  for (float mark : {kNaN, kInf}) {
    SCOPED_TRACE(mark);
    std::mt19937_64 rng(test_seed());
    Fp8Tensors t(c, rng);
    t.v.scales[at(0, 1, 0, 1)] = mark;  // keys [64, 128) of batch 0
    ASSERT_EQ(t.run(c), HOPATTN_OK) << hopattn_last_error();
    const NanRows nan(t, c);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 256; ++i) {
          ASSERT_EQ(nan.o_at(b, h, i), b == 0 && i >= 64) << b << " " << h << " " << i;
          ASSERT_FALSE(nan.lse_at(b, h, i)) << b << " " << h << " " << i;
        }
  }
}

// The whole path: a NaN in x becomes a NaN scale and NaN codes (hopattn_quantize_fp8), which the
// forward turns into NaN rows; here in a per-head V of batch 1.
TEST_F(Fp8NonFiniteScales, QuantisingANanGivesNanInTheRowsThatSeeIt) {
  c.v_scales = {HOPATTN_FP8_SCALE_HEAD, 0};
  std::mt19937_64 rng(test_seed());
  Fp8Tensors t(c, rng);
  t.v.source[static_cast<size_t>(element_offset(t.v.source_view, 1, 200, 0, 5))] = kNaN;
  t.v.quantise();
  ASSERT_TRUE(std::isnan(t.v.scales[1]));
  ASSERT_EQ(t.run(c), HOPATTN_OK) << hopattn_last_error();
  const NanRows nan(t, c);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 256; ++i) {
      ASSERT_FALSE(nan.o_at(0, h, i)) << h << " " << i;
      ASSERT_TRUE(nan.o_at(1, h, i)) << h << " " << i;  // per head: every row sees the block
      ASSERT_FALSE(nan.lse_at(1, h, i)) << h << " " << i;
    }
}

TEST(Fp8Forward, RefusesAZeroScaleAndWritesNothing) {
  Fp8Case c;
  c.k_scales = {HOPATTN_FP8_SCALE_BLOCK, 16};
  std::mt19937_64 rng(test_seed());
  Fp8Tensors t(c, rng);
  t.k.scales[3] = 0.f;
  const std::vector<uint16_t> before = t.o_storage;
  EXPECT_EQ(t.run(c), HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("k_scales->data[3] is 0; a scale must be > 0"),
            std::string::npos)
      << hopattn_last_error();
  EXPECT_EQ(t.o_storage, before);
  for (float lse : t.lse) EXPECT_TRUE(std::isnan(lse));
}

TEST(Fp8Forward, AutoRunsHostMemoryOnTheCpu) {
  Fp8Case c;
  std::mt19937_64 rng(test_seed());
  Fp8Tensors t(c, rng);
  EXPECT_EQ(hopattn_forward_fp8(&t.q.tensor, &t.q.fp8, &t.k.tensor, &t.k.fp8, &t.v.tensor,
                                &t.v.fp8, &t.o, nullptr, nullptr),
            HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_FALSE(is_nan_element(c.out, t.o.data, 0));
}

TEST(Fp8Forward, WorkspaceQuery) {
  Fp8Case c;
  std::mt19937_64 rng(test_seed());
  Fp8Tensors t(c, rng);
  size_t bytes = 123;
  EXPECT_EQ(hopattn_forward_fp8_workspace_size(&t.q.tensor, &t.k.tensor, &t.v.tensor,
                                               HOPATTN_DTYPE_BFLOAT16, nullptr, &bytes),
            HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(hopattn_forward_fp8_workspace_size(&t.q.tensor, &t.k.tensor, &t.v.tensor,
                                               HOPATTN_DTYPE_BFLOAT16, nullptr, nullptr),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hopattn_last_error(), "bytes is NULL");
  EXPECT_EQ(hopattn_forward_fp8_workspace_size(&t.q.tensor, &t.k.tensor, &t.v.tensor,
                                               HOPATTN_DTYPE_FLOAT32, nullptr, &bytes),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("o_dtype is float32"), std::string::npos);
}

TEST(Fp8Forward, CppWrapperMatchesTheCCall) {
  Fp8Case c;
  c.seqlen_q = 40;
  c.causal = true;
  std::mt19937_64 rng(test_seed());
  Fp8Tensors t(c, rng);
  ASSERT_EQ(t.run(c), HOPATTN_OK) << hopattn_last_error();
  std::vector<uint16_t> o(t.o_storage.size());
  std::vector<float> lse(t.lse.size());
  hopattn::ForwardOptions options;
  options.causal = true;
  const auto input = [](const QuantizedInput& x) {
    const hopattn_tensor& r = x.tensor;
    return hopattn::Tensor(r.data, r.dtype, r.batch, r.seqlen, r.heads, r.head_dim,
                           r.batch_stride, r.seq_stride, r.head_stride);
  };
  hopattn::QuantizeOptions block;  // the layouts of the case: block q and k, per-head v
  hopattn::forward_fp8(input(t.q), hopattn::Fp8ScalesView::of(t.q.scales.data(), block),
                       input(t.k), hopattn::Fp8ScalesView::block(t.k.scales.data(), 128),
                       input(t.v), hopattn::Fp8ScalesView::head(t.v.scales.data()),
                       hopattn::Tensor::contiguous(o.data(), c.out, c.batch, c.seqlen_q, c.heads_q,
                                                   c.head_dim),
                       lse.data(), options);
  EXPECT_EQ(o, t.o_storage);
  EXPECT_EQ(std::memcmp(lse.data(), t.lse.data(), lse.size() * sizeof(float)), 0);
  EXPECT_EQ(hopattn::forward_fp8_workspace_size(input(t.q), input(t.k), input(t.v),
                                                HOPATTN_DTYPE_FLOAT16),
            0u);
  try {
    hopattn::forward_fp8(input(t.q), hopattn::Fp8ScalesView::tensor(nullptr), input(t.k),
                         hopattn::Fp8ScalesView::head(t.k.scales.data()), input(t.v),
                         hopattn::Fp8ScalesView::head(t.v.scales.data()),
                         hopattn::Tensor::contiguous(o.data(), c.out, c.batch, c.seqlen_q,
                                                     c.heads_q, c.head_dim));
    ADD_FAILURE() << "no exception";
  } catch (const hopattn::Error& e) {
    EXPECT_EQ(e.status(), HOPATTN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("q_scales->data is NULL"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hopattn::test
