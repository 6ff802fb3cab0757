// The CPU backend against the float64 reference, through the C API, on fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "core/causal_mask.hpp"
#include "cpu/reference.hpp"
#include "test_support.hpp"

namespace hopattn::test {
namespace {

Case square(hopattn_dtype dtype, int64_t seqlen, int64_t heads, int64_t head_dim, bool causal) {
  Case c;
  c.dtype = dtype;
  c.seqlen_q = c.seqlen_k = seqlen;
  c.heads_q = c.heads_kv = heads;
  c.head_dim = head_dim;
  c.causal = causal;
  return c;
}

TEST(CpuForward, SeqlenOne) {
  for (bool causal : {false, true}) {
    Case c = square(HOPATTN_DTYPE_FLOAT32, 1, 2, 64, causal);
    check_case(c);
    c.seqlen_k = 100;  // one query over many keys, as in decoding
    check_case(c);
    c.seqlen_q = 100;
    c.seqlen_k = 1;
    check_case(c);
  }
}

TEST(CpuForward, SeqlensThatAreNotTileMultiples) {
  for (int64_t seqlen : {17, 127, 129, 191, 193}) {
    for (bool causal : {false, true})
      check_case(square(HOPATTN_DTYPE_FLOAT32, seqlen, 2, 64, causal));
  }
  for (bool causal : {false, true}) check_case(square(HOPATTN_DTYPE_BFLOAT16, 1000, 1, 64, causal));
}

TEST(CpuForward, SeqlenQShorterThanSeqlenK) {
  for (bool causal : {false, true}) {
    Case c = square(HOPATTN_DTYPE_FLOAT32, 0, 2, 64, causal);
    c.batch = 2;
    c.seqlen_q = 37;
    c.seqlen_k = 300;
    check_case(c);
    c.batch = 1;
    c.seqlen_q = 200;
    c.seqlen_k = 457;
    check_case(c);
  }
}

// With causal, the first seqlen_q - seqlen_k rows see no key: O = 0 and LSE = -inf there.
TEST(CpuForward, SeqlenQLongerThanSeqlenK) {
  for (bool causal : {false, true}) {
    Case c = square(HOPATTN_DTYPE_FLOAT32, 0, 2, 64, causal);
    c.seqlen_q = 250;
    c.seqlen_k = 70;
    check_case(c);
    c.dtype = HOPATTN_DTYPE_FLOAT16;
    check_case(c);
  }
}

TEST(CpuForward, GroupedQueryAttentionRatios) {
  for (int64_t ratio : {1, 2, 8}) {
    for (bool causal : {false, true}) {
      Case c = square(HOPATTN_DTYPE_BFLOAT16, 130, 8, 64, causal);
      c.heads_kv = 8 / ratio;
      check_case(c);
    }
  }
}

TEST(CpuForward, StridedSliceOfPackedQkv) {
  for (bool causal : {false, true}) {
    Case c = square(HOPATTN_DTYPE_FLOAT16, 150, 4, 64, causal);
    c.heads_kv = 2;
    c.batch = 2;
    c.layout = Layout::PackedQkv;
    check_case(c);
  }
}

TEST(CpuForward, PaddedStridesLeaveTheGapsUntouched) {
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16}) {
    Case c = square(dtype, 100, 3, 40, true);
    c.batch = 2;
    c.seqlen_k = 120;
    c.layout = Layout::Padded;
    check_case(c);
  }
}

// Scaled scores in the hundreds: exp() of them overflows float32 unless the running max is
// subtracted.
TEST(CpuForward, LargeMagnitudeInputsStayFinite) {
  for (hopattn_dtype dtype :
       {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (bool causal : {false, true}) {
      Case c = square(dtype, 200, 2, 64, causal);
      c.q_magnitude = 1000.f;
      check_case(c);
    }
  }
}

TEST(CpuForward, AllDtypes) {
  for (hopattn_dtype dtype :
       {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (bool causal : {false, true}) check_case(square(dtype, 160, 2, 128, causal));
  }
}

TEST(CpuForward, CustomSoftmaxScale) {
  for (float scale : {0.01f, 0.3f, 2.5f}) {
    Case c = square(HOPATTN_DTYPE_FLOAT32, 90, 2, 64, true);
    c.softmax_scale = scale;
    check_case(c);
  }
}

TEST(CpuForward, HeadDimsFromOneTo512) {
  for (int64_t head_dim : {1, 3, 17, 100, 128, 256, 512}) {
    check_case(square(HOPATTN_DTYPE_FLOAT32, 70, 1, head_dim, head_dim % 2 == 1));
  }
}

TEST(CpuForward, NullLseIsAllowed) {
  std::mt19937_64 rng(test_seed());
  const Case c = square(HOPATTN_DTYPE_FLOAT32, 33, 1, 32, true);
  CaseTensors t(c, rng);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = 1;
  ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, nullptr, &options), HOPATTN_OK)
      << hopattn_last_error();
  std::vector<double> ref_out, ref_lse;
  reference_forward(t.problem(c), ref_out, ref_lse);
  EXPECT_LE(error_norms(read_output(t.o), ref_out).relative, relative_tolerance(c.dtype));
}

// Tasks are scheduled dynamically, but each output row is computed by one task in a fixed
// order, so two calls agree bit for bit.
TEST(CpuForward, RepeatedCallsAgreeBitForBit) {
  std::mt19937_64 rng(test_seed());
  const Case c = square(HOPATTN_DTYPE_FLOAT32, 300, 4, 64, true);
  CaseTensors t(c, rng);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = 1;
  ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &options), HOPATTN_OK);
  const std::vector<double> first = read_output(t.o);
  const std::vector<float> first_lse = t.lse;
  ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &options), HOPATTN_OK);
  EXPECT_EQ(read_output(t.o), first);
  EXPECT_EQ(t.lse, first_lse);
}

TEST(CpuForward, ConcurrentCallsFromSeveralThreads) {
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back(
        [i] { check_case(square(HOPATTN_DTYPE_BFLOAT16, 100 + 30 * i, 2, 64, i % 2 == 0)); });
  }
  for (std::thread& thread : threads) thread.join();
}

// The tolerances must be tight enough to see a mask that is off by one key, or aligned to
// the top-left instead of the bottom-right corner of the score matrix.
TEST(CpuForward, TolerancesCatchACausalMaskOffByOne) {
  struct Shape {
    hopattn_dtype dtype;
    int64_t seqlen_q, seqlen_k;
  };
  for (const Shape& shape : {Shape{HOPATTN_DTYPE_FLOAT32, 64, 64},
                             {HOPATTN_DTYPE_FLOAT32, 40, 64},
                             {HOPATTN_DTYPE_FLOAT32, 64, 40},
                             {HOPATTN_DTYPE_BFLOAT16, 64, 64}}) {
    Case c = square(shape.dtype, 0, 2, 32, true);
    c.seqlen_q = shape.seqlen_q;
    c.seqlen_k = shape.seqlen_k;
    SCOPED_TRACE(describe(c));
    std::mt19937_64 rng(test_seed());
    CaseTensors t(c, rng);
    hopattn_forward_options options = hopattn_default_forward_options();
    options.causal = 1;
    ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &options), HOPATTN_OK);
    const std::vector<double> out = read_output(t.o);
    const ForwardProblem problem = t.problem(c);

    // ||out - ref|| / ||ref|| against a reference whose row i sees keys [0, key_end(i)).
    const auto error_against = [&](const std::function<int64_t(int64_t)>& key_end) {
      std::vector<double> ref(out.size());
      for (int64_t h = 0; h < c.heads_q; ++h) {
        for (int64_t i = 0; i < c.seqlen_q; ++i) {
          double lse = 0;
          const int64_t end = std::clamp<int64_t>(key_end(i), 0, c.seqlen_k);
          reference_row(problem, {0, h, i}, end, ref.data() + (i * c.heads_q + h) * c.head_dim,
                        lse);
        }
      }
      return error_norms(out, ref).relative;
    };
    const auto correct = [&](int64_t i) { return causal_key_end(i, c.seqlen_q, c.seqlen_k); };
    const double tolerance = relative_tolerance(c.dtype);
    EXPECT_LE(error_against(correct), tolerance);
    EXPECT_GE(error_against([&](int64_t i) { return correct(i) + 1; }), 10 * tolerance);
    EXPECT_GE(error_against([&](int64_t i) { return correct(i) - 1; }), 10 * tolerance);
    if (c.seqlen_q != c.seqlen_k) {
      EXPECT_GE(error_against([](int64_t i) { return i + 1; }), 10 * tolerance)
          << "top-left aligned";
    }
  }
}

}  // namespace
}  // namespace hopattn::test
