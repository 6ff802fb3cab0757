// The CPU backend at extreme magnitudes and with NaN inputs (issue 10), against the float64
// reference row by row: large scores (the softmax exponent must never exceed 0), large softmax
// scales, NaN propagating as NaN into O and LSE of exactly the rows it reaches, and broadcast
// inputs whose work exceeds the bound refused rather than run.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/causal_mask.hpp"
#include "cpu/reference.hpp"
#include "test_support.hpp"

namespace hopattn::test {
namespace {

hopattn_forward_options cpu(bool causal = false, float softmax_scale = 0.f) {
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = HOPATTN_BACKEND_CPU;
  options.causal = causal;
  options.softmax_scale = softmax_scale;
  return options;
}

hopattn_tensor scalar_tensor(float* data) {
  return {data, HOPATTN_DTYPE_FLOAT32, 1, 1, 1, 1, 1, 1, 1};
}

// seqlen 1, head_dim 1: one score q * k, so O = v and LSE = q * k * scale exactly.
void expect_single_score(float q_value, float k_value, float scale) {
  SCOPED_TRACE("q " + std::to_string(q_value) + " k " + std::to_string(k_value) + " scale " +
               std::to_string(scale));
  float q_data = q_value, k_data = k_value, v_data = 1.f, o_data = NAN, lse = NAN;
  hopattn_tensor q = scalar_tensor(&q_data), k = scalar_tensor(&k_data),
                 v = scalar_tensor(&v_data), o = scalar_tensor(&o_data);
  const hopattn_forward_options options = cpu(false, scale);
  ASSERT_EQ(hopattn_forward(&q, &k, &v, &o, &lse, &options), HOPATTN_OK) << hopattn_last_error();
  EXPECT_EQ(o_data, 1.f);
  const double want = static_cast<double>(q_value) * k_value * scale;
  if (std::abs(want) > FLT_MAX) {
    EXPECT_EQ(lse, want > 0 ? INFINITY : -INFINITY);  // saturates, documented
  } else {
    EXPECT_NEAR(lse, want, std::abs(want) * 1e-6);
  }
}

// Before: O = 0, LSE = -inf for k = 5e9 and LSE = NaN for 1e12 (the contracted score - max gave
// the only score an exponent of up to +256, and exp2 wrapped).
TEST(ExtremeValues, OneLargeScoreGivesOneAndItsLse) {
  expect_single_score(1.f, 5e9f, 1.f);
  expect_single_score(1.f, 1e12f, 1.f);
  expect_single_score(1.f, -1e12f, 1.f);
  expect_single_score(3e18f, 1e19f, 1.f);
  expect_single_score(1.f, 1.f, 1e30f);
  expect_single_score(1.f, 1.f, FLT_MAX);
  expect_single_score(1e10f, 1e10f, 1e10f);  // LSE 1e30
}

// q, k, v as given; every row of O and LSE against the float64 reference.
struct RowCheck {
  int64_t bad_rows = 0;
  std::string first_bad;
};

RowCheck compare_rows(const Case& c, CaseTensors& t, double o_tolerance, double lse_tolerance) {
  std::vector<double> ref_out, ref_lse;
  reference_forward(t.problem(c), ref_out, ref_lse);
  const std::vector<double> out = read_output(t.o);
  RowCheck check;
  const int64_t d = c.head_dim;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < c.seqlen_q; ++i) {
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const size_t row = static_cast<size_t>(((b * c.seqlen_q + i) * c.heads_q + h) * d);
        const size_t lse_at = static_cast<size_t>((b * c.heads_q + h) * c.seqlen_q + i);
        double o_error = 0;
        for (int64_t e = 0; e < d; ++e) {
          o_error = std::max(o_error, std::abs(out[row + e] - ref_out[row + e]));
          if (std::isnan(out[row + e])) o_error = INFINITY;
        }
        const double lse_error = std::abs(t.lse[lse_at] - ref_lse[lse_at]) /
                                 std::max(1.0, std::abs(ref_lse[lse_at]));
        if (!(o_error <= o_tolerance) || !(lse_error <= lse_tolerance)) {
          if (check.bad_rows++ == 0) {
            check.first_bad = "row " + std::to_string(i) + " head " + std::to_string(h) +
                              ": max |O - ref| " + std::to_string(o_error) + ", LSE " +
                              std::to_string(t.lse[lse_at]) + " vs " +
                              std::to_string(ref_lse[lse_at]);
          }
        }
      }
    }
  }
  return check;
}

double output_tolerance(hopattn_dtype dtype) {
  return dtype == HOPATTN_DTYPE_FLOAT32 ? 1e-5 : (dtype == HOPATTN_DTYPE_FLOAT16 ? 2e-3 : 1e-2);
}

void fill(hopattn_dtype dtype, const hopattn_tensor& t, std::mt19937_64& rng, float magnitude) {
  std::uniform_real_distribution<float> uniform(-magnitude, magnitude);
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seqlen; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t e = 0; e < t.head_dim; ++e)
          store_element(dtype, t.data, element_offset(t, b, s, h, e), uniform(rng));
}

constexpr hopattn_dtype kDtypes[] = {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16,
                                     HOPATTN_DTYPE_FLOAT16};

// Inputs of +-6e4 at head_dim 64 (scores up to 2e11): before, 230-249 of 1,280 rows were O = 0,
// LSE = -inf in every dtype. A fixed seed: a near tie between two scores of 1e10 that float32
// rounding breaks the other way than float64 would be a difference of the inputs, not a bug.
TEST(ExtremeValues, InputsOfSixtyThousandMatchTheReferenceInEveryRow) {
  for (hopattn_dtype dtype : kDtypes) {
    for (bool causal : {false, true}) {
      Case c;
      c.dtype = dtype;
      c.seqlen_q = c.seqlen_k = 320;
      c.heads_q = c.heads_kv = 4;
      c.head_dim = 64;
      c.causal = causal;
      SCOPED_TRACE(describe(c));
      std::mt19937_64 rng(20240610);
      CaseTensors t(c, rng);
      fill(dtype, t.q, rng, 6e4f);
      fill(dtype, t.k, rng, 6e4f);
      const hopattn_forward_options options = cpu(causal);
      ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &options), HOPATTN_OK)
          << hopattn_last_error();
      const RowCheck check = compare_rows(c, t, output_tolerance(dtype), 1e-5);
      EXPECT_EQ(check.bad_rows, 0) << "of 1280; first: " << check.first_bad;
    }
  }
}

// softmax_scale >= 1e30 with unit inputs: before, NaN or zeros. Now O is the reference's; the
// LSE is too while it fits float32, and saturates to +-inf past FLT_MAX.
TEST(ExtremeValues, HugeSoftmaxScalesMatchTheReference) {
  for (hopattn_dtype dtype : kDtypes) {
    for (float scale : {1e30f, 1e37f}) {
      Case c;
      c.dtype = dtype;
      c.seqlen_q = 100;
      c.seqlen_k = 150;
      c.heads_q = c.heads_kv = 2;
      c.head_dim = 64;
      c.causal = true;
      c.softmax_scale = scale;
      SCOPED_TRACE(describe(c));
      std::mt19937_64 rng(7);
      CaseTensors t(c, rng);
      const hopattn_forward_options options = cpu(true, scale);
      ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &options), HOPATTN_OK)
          << hopattn_last_error();
      // float32 scores are off by up to head_dim * 2^-24 of the float64 ones, relative to LSEs
      // of scale times a max score of order one.
      const RowCheck check = compare_rows(c, t, output_tolerance(dtype), 1e-4);
      EXPECT_EQ(check.bad_rows, 0) << "first: " << check.first_bad;
    }
  }
}

// NaN in one element of q row `nan_row`, or of k or v row `nan_key`: exactly the rows that see it
// are NaN (all of O and the LSE for q and k; O's column for v, whose LSE is unaffected); every
// other row equals the reference. Key 150 lies inside a key block (64 keys) that rows 128-149 see
// only in part under the causal mask.
TEST(ExtremeValues, NaNReachesExactlyTheRowsThatSeeIt) {
  constexpr int64_t nan_row = 5, nan_key = 150, nan_column = 3;
  for (hopattn_dtype dtype : kDtypes) {
    for (bool causal : {false, true}) {
      for (char tensor : {'q', 'k', 'v'}) {
        Case c;
        c.dtype = dtype;
        c.seqlen_q = c.seqlen_k = 200;
        c.heads_q = c.heads_kv = 1;
        c.head_dim = 64;
        c.causal = causal;
        SCOPED_TRACE(describe(c) + ", NaN in " + tensor);
        std::mt19937_64 rng(test_seed());
        CaseTensors t(c, rng);
        hopattn_tensor& target = tensor == 'q' ? t.q : (tensor == 'k' ? t.k : t.v);
        const int64_t at = tensor == 'q' ? nan_row : nan_key;
        store_element(dtype, target.data, element_offset(target, 0, at, 0, nan_column), NAN);
        const hopattn_forward_options options = cpu(causal);
        ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &options), HOPATTN_OK)
            << hopattn_last_error();

        std::vector<double> ref_out, ref_lse;
        reference_forward(t.problem(c), ref_out, ref_lse);
        const std::vector<double> out = read_output(t.o);
        int64_t wrong = 0;
        for (int64_t i = 0; i < c.seqlen_q; ++i) {
          const bool sees = tensor == 'q' ? i == nan_row
                                          : nan_key < visible_key_end(causal, i, c.seqlen_q,
                                                                      c.seqlen_k);
          const bool lse_nan = sees && tensor != 'v';
          EXPECT_EQ(std::isnan(t.lse[i]), lse_nan) << "row " << i << " LSE " << t.lse[i];
          EXPECT_EQ(std::isnan(ref_lse[i]), lse_nan) << "reference row " << i;
          for (int64_t e = 0; e < c.head_dim; ++e) {
            const double got = out[i * c.head_dim + e];
            const bool nan = sees && (tensor != 'v' || e == nan_column);
            if (nan) {
              wrong += !std::isnan(got);
            } else {
              wrong += !(std::abs(got - ref_out[i * c.head_dim + e]) <= output_tolerance(dtype));
            }
          }
          if (!lse_nan) {
            EXPECT_NEAR(t.lse[i], ref_lse[i], 1e-5 * std::max(1.0, std::abs(ref_lse[i])));
          }
        }
        EXPECT_EQ(wrong, 0) << "output elements NaN where they should not be, or the reverse";
      }
    }
  }
}

// A zero-stride k and v of 2^40 or 2^63 - 1 keys at head_dim 64: a few bytes describing 2^46
// multiply-adds or unbounded work, which ran for hours or for ever. Refused at once, with the bound in the message; at the bound, accepted.
TEST(ExtremeValues, BroadcastBeyondTheWorkBoundIsRefused) {
  float q_data[64] = {}, k_data[64] = {}, v_data[64] = {}, o_data[64] = {};
  for (int64_t keys : {int64_t{1} << 40, INT64_MAX}) {
    for (bool causal : {false, true}) {
      hopattn_tensor q = {q_data, HOPATTN_DTYPE_FLOAT32, 1, 1, 1, 64, 64, 64, 64};
      hopattn_tensor o = {o_data, HOPATTN_DTYPE_FLOAT32, 1, 1, 1, 64, 64, 64, 64};
      hopattn_tensor k = {k_data, HOPATTN_DTYPE_FLOAT32, 1, keys, 1, 64, 0, 0, 0};
      hopattn_tensor v = {v_data, HOPATTN_DTYPE_FLOAT32, 1, keys, 1, 64, 0, 0, 0};
      const hopattn_forward_options options = cpu(causal);
      EXPECT_EQ(hopattn_forward(&q, &k, &v, &o, nullptr, &options), HOPATTN_ERROR_UNSUPPORTED);
      EXPECT_NE(std::string(hopattn_last_error()).find("exceeds the CPU backend's limit of 2^44"),
                std::string::npos)
          << hopattn_last_error();
    }
  }
  // 2^20 broadcast keys (2^26 multiply-adds) run, and give v's row.
  for (float& x : v_data) x = 0.5f;
  hopattn_tensor q = {q_data, HOPATTN_DTYPE_FLOAT32, 1, 1, 1, 64, 64, 64, 64};
  hopattn_tensor o = {o_data, HOPATTN_DTYPE_FLOAT32, 1, 1, 1, 64, 64, 64, 64};
  hopattn_tensor k = {k_data, HOPATTN_DTYPE_FLOAT32, 1, 1 << 20, 1, 64, 0, 0, 0};
  hopattn_tensor v = {v_data, HOPATTN_DTYPE_FLOAT32, 1, 1 << 20, 1, 64, 0, 0, 0};
  float lse = 0;
  const hopattn_forward_options options = cpu(true);
  ASSERT_EQ(hopattn_forward(&q, &k, &v, &o, &lse, &options), HOPATTN_OK) << hopattn_last_error();
  EXPECT_FLOAT_EQ(o_data[0], 0.5f);
  EXPECT_NEAR(lse, std::log(1 << 20), 1e-4);
}

}  // namespace
}  // namespace hopattn::test
