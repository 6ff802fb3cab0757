// The CPU backward pass against the float64 reference, through the C API, on fresh random inputs:
// the forward (CPU) writes o and the LSE, the backward reads them, and dq, dk and dv (poisoned
// with NaN first) are compared with reference_backward, which recomputes everything from q, k, v
// and d_o. The reference itself is checked against finite differences of the float64 forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "api/problem_of.hpp"
#include "core/causal_mask.hpp"
#include "core/seqlen.hpp"
#include "cpu/reference.hpp"
#include "hopattn/hopattn.hpp"
#include "test_support.hpp"

namespace hopattn::test {
namespace {

int64_t extent(const hopattn_tensor& t) {
  return element_offset(t, t.batch - 1, t.seqlen - 1, t.heads - 1, t.head_dim - 1) + 1;
}

// A tensor of its own buffer, dense or (Layout::Padded) with a gap after every head, row and
// batch entry, as test_support lays out o.
hopattn_tensor standalone(const Case& c, int64_t seqlen, int64_t heads) {
  const int64_t d = c.head_dim;
  if (c.layout != Layout::Padded) {
    return {nullptr, c.dtype, c.batch, seqlen, heads, d, seqlen * heads * d, heads * d, d};
  }
  const int64_t head_stride = d + 5, seq_stride = heads * head_stride + 3;
  return {nullptr,    c.dtype,      c.batch,    seqlen,     heads,
          d,          seqlen * seq_stride + 9, seq_stride, head_stride};
}

void fill(Buffer& buffer, hopattn_tensor& t, double value) {
  const int64_t count = extent(t);
  if (t.dtype == HOPATTN_DTYPE_FLOAT32) {
    buffer.floats.assign(static_cast<size_t>(count), 0.f);
  } else {
    buffer.halves.assign(static_cast<size_t>(count), 0);
  }
  t.data = buffer.data(t.dtype);
  for (int64_t i = 0; i < count; ++i) store_element(t.dtype, t.data, i, value);
}

// d_o (random in [-1, 1]) and the gradients (NaN everywhere, gaps included) of a case.
struct GradientTensors {
  Buffer d_o_buffer, dq_buffer, dk_buffer, dv_buffer;
  hopattn_tensor d_o{}, dq{}, dk{}, dv{};

  GradientTensors(const Case& c, std::mt19937_64& rng) {
    d_o = dq = standalone(c, c.seqlen_q, c.heads_q);
    dk = dv = standalone(c, c.seqlen_k, c.heads_kv);
    fill(d_o_buffer, d_o, NAN);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    for (int64_t b = 0; b < d_o.batch; ++b)
      for (int64_t s = 0; s < d_o.seqlen; ++s)
        for (int64_t h = 0; h < d_o.heads; ++h)
          for (int64_t e = 0; e < d_o.head_dim; ++e)
            store_element(c.dtype, d_o.data, element_offset(d_o, b, s, h, e), uniform(rng));
    fill(dq_buffer, dq, NAN);
    fill(dk_buffer, dk, NAN);
    fill(dv_buffer, dv, NAN);
  }
};

hopattn_backward_options backward_options(const Case& c) {
  hopattn_backward_options options = hopattn_default_backward_options();
  options.causal = c.causal;
  options.softmax_scale = c.softmax_scale;
  options.backend = HOPATTN_BACKEND_CPU;
  return options;
}

hopattn_forward_options forward_options(const Case& c) {
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = c.causal;
  options.softmax_scale = c.softmax_scale;
  options.backend = HOPATTN_BACKEND_CPU;
  return options;
}

// Tolerance on ||grad - ref|| / ||ref|| for unit-sized inputs: float32 accumulation, the forward's
// o rounded to the dtype (it enters through D = rowsum(dO * O)) and the gradients' own rounding.
double gradient_tolerance(hopattn_dtype dtype) {
  switch (dtype) {
    case HOPATTN_DTYPE_BFLOAT16: return 6e-3;
    case HOPATTN_DTYPE_FLOAT16: return 6e-4;
    case HOPATTN_DTYPE_FLOAT8_E4M3:  // no gradient is e4m3
    case HOPATTN_DTYPE_FLOAT32: break;
  }
  return 1e-5;
}

// Every element of a gradient's buffer outside its view still holds its NaN.
int64_t gaps_written(const hopattn_tensor& t, int64_t buffer_size) {
  std::vector<bool> in_view(static_cast<size_t>(buffer_size), false);
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seqlen; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t e = 0; e < t.head_dim; ++e)
          in_view[static_cast<size_t>(element_offset(t, b, s, h, e))] = true;
  int64_t written = 0;
  for (size_t i = 0; i < in_view.size(); ++i)
    written += !in_view[i] && !is_nan_element(t.dtype, t.data, static_cast<int64_t>(i));
  return written;
}

// The gradients of a finished call against the reference: all written and finite, within
// tolerance, exactly 0 in the rows that nothing reaches (dq of a query row that sees no key, dk
// and dv of a key no query row sees), gaps untouched.
void check_gradients(const Case& c, GradientTensors& g, const BackwardProblem& problem) {
  std::vector<double> ref_dq, ref_dk, ref_dv;
  reference_backward(problem, ref_dq, ref_dk, ref_dv);
  const int64_t d = c.head_dim;
  // Rows (of head_dim elements) that must be exactly 0.
  std::vector<bool> dq_zero(ref_dq.size() / static_cast<size_t>(d), false);
  const SeqlenLayout& layout = problem.seqlens;
  for (int64_t b = 0; b < layout.batch; ++b) {
    const Sequence seq = sequence_of(layout, b);
    for (int64_t h = 0; h < c.heads_q; ++h) {
      for (int64_t i = 0; i < seq.seqlen_q; ++i) {
        const int64_t row = seq.tensor_batch * layout.total_q + seq.q_begin + i;
        dq_zero[static_cast<size_t>(row * c.heads_q + h)] =
            visible_key_end(c.causal, i, seq.seqlen_q, seq.seqlen_k) == 0;
      }
    }
  }
  std::vector<bool> kv_zero(ref_dv.size() / static_cast<size_t>(d), true);
  for (size_t i = 0; i < ref_dv.size(); ++i) {
    if (ref_dv[i] != 0.0) kv_zero[i / static_cast<size_t>(d)] = false;
  }
  struct Gradient {
    const char* name;
    const hopattn_tensor* tensor;
    const std::vector<double>* want;
    const std::vector<bool>* zero_rows;
  };
  for (const Gradient& gradient : {Gradient{"dq", &g.dq, &ref_dq, &dq_zero},
                                   {"dk", &g.dk, &ref_dk, &kv_zero},
                                   {"dv", &g.dv, &ref_dv, &kv_zero}}) {
    SCOPED_TRACE(gradient.name);
    const std::vector<double> got = read_output(*gradient.tensor);
    const std::vector<double>& want = *gradient.want;
    ASSERT_EQ(got.size(), want.size());
    int64_t not_finite = 0, nonzero_where_zero = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      not_finite += !std::isfinite(got[i]);
      nonzero_where_zero += (*gradient.zero_rows)[i / static_cast<size_t>(d)] && got[i] != 0.0;
    }
    EXPECT_EQ(not_finite, 0) << "gradient elements left NaN or not finite";
    EXPECT_EQ(nonzero_where_zero, 0) << "elements that nothing reaches must be exactly 0";
    const ErrorNorms norms = error_norms(got, want);
    EXPECT_LE(norms.relative, gradient_tolerance(c.dtype) + 4 * score_error_bound(c))
        << norms.str();
  }
  EXPECT_EQ(gaps_written(g.dq, g.dq_buffer.size(c.dtype)), 0) << "dq's gaps";
  EXPECT_EQ(gaps_written(g.dk, g.dk_buffer.size(c.dtype)), 0) << "dk's gaps";
  EXPECT_EQ(gaps_written(g.dv, g.dv_buffer.size(c.dtype)), 0) << "dv's gaps";
}

void check_backward_case(const Case& c) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CaseTensors t(c, rng);
  GradientTensors g(c, rng);
  const hopattn_forward_options forward = forward_options(c);
  ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &forward), HOPATTN_OK)
      << hopattn_last_error();
  const hopattn_backward_options options = backward_options(c);
  ASSERT_EQ(hopattn_backward(&t.q, &t.k, &t.v, &t.o, &g.d_o, t.lse.data(), &g.dq, &g.dk, &g.dv,
                             &options),
            HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_STREQ(hopattn_last_error(), "");
  check_gradients(c, g,
                  problem_of(t.q, t.k, t.v, t.o, g.d_o, t.lse.data(), g.dq, g.dk, g.dv, options));
}

void check_backward_varlen_case(const VarlenCase& c) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  VarlenTensors t(c, rng);
  CaseTensors& x = t.tensors;
  GradientTensors g(t.packed, rng);
  const hopattn_forward_options forward = forward_options(t.packed);
  ASSERT_EQ(hopattn_forward_varlen(&x.q, &x.k, &x.v, &x.o, x.lse.data(), &t.varlen, &forward),
            HOPATTN_OK)
      << hopattn_last_error();
  const hopattn_backward_options options = backward_options(t.packed);
  ASSERT_EQ(hopattn_backward_varlen(&x.q, &x.k, &x.v, &x.o, &g.d_o, x.lse.data(), &g.dq, &g.dk,
                                    &g.dv, &t.varlen, &options),
            HOPATTN_OK)
      << hopattn_last_error();
  check_gradients(t.packed, g,
                  problem_of(x.q, x.k, x.v, x.o, g.d_o, x.lse.data(), g.dq, g.dk, g.dv, t.varlen,
                             options));
}

Case square(hopattn_dtype dtype, int64_t seqlen, int64_t heads, int64_t head_dim, bool causal) {
  Case c;
  c.dtype = dtype;
  c.seqlen_q = c.seqlen_k = seqlen;
  c.heads_q = c.heads_kv = heads;
  c.head_dim = head_dim;
  c.causal = causal;
  return c;
}

const hopattn_dtype kDtypes[] = {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16,
                                 HOPATTN_DTYPE_FLOAT16};

TEST(CpuBackward, HeadDimsAndDtypes) {
  for (int64_t head_dim : {32, 64, 128}) {
    for (hopattn_dtype dtype : kDtypes) {
      for (bool causal : {false, true}) check_backward_case(square(dtype, 100, 2, head_dim, causal));
    }
  }
}

TEST(CpuBackward, SeqlensAroundTheTiles) {
  for (int64_t seqlen : {1, 17, 47, 48, 49, 127, 128, 129}) {
    for (bool causal : {false, true})
      check_backward_case(square(HOPATTN_DTYPE_FLOAT32, seqlen, 2, 64, causal));
  }
}

// seqlen_q < seqlen_k, and seqlen_q > seqlen_k, where the causal mask leaves the first rows
// without a key: their dq is exactly 0 and they add nothing to dk and dv.
TEST(CpuBackward, SeqlenQAndSeqlenKDiffer) {
  struct Lengths {
    int64_t q, k;
  };
  for (const Lengths& l : {Lengths{1, 100}, {37, 300}, {130, 129}, {250, 70}, {100, 1}}) {
    for (bool causal : {false, true}) {
      for (hopattn_dtype dtype : {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16}) {
        Case c = square(dtype, 0, 2, 64, causal);
        c.batch = 2;
        c.seqlen_q = l.q;
        c.seqlen_k = l.k;
        check_backward_case(c);
      }
    }
  }
}

TEST(CpuBackward, GroupedQueryAttentionSumsOverTheGroup) {
  for (int64_t ratio : {1, 2, 4}) {
    for (bool causal : {false, true}) {
      Case c = square(HOPATTN_DTYPE_FLOAT32, 90, 4, 64, causal);
      c.heads_kv = 4 / ratio;
      c.seqlen_k = 110;
      check_backward_case(c);
    }
  }
}

TEST(CpuBackward, StridedViews) {
  for (bool causal : {false, true}) {
    Case packed = square(HOPATTN_DTYPE_FLOAT16, 150, 4, 64, causal);
    packed.heads_kv = 2;
    packed.batch = 2;
    packed.layout = Layout::PackedQkv;  // q, k, v slices of one qkv buffer
    check_backward_case(packed);
    Case padded = square(HOPATTN_DTYPE_BFLOAT16, 70, 3, 40, causal);
    padded.seqlen_k = 95;
    padded.batch = 2;
    padded.layout = Layout::Padded;  // every tensor, gradients included, with gaps
    check_backward_case(padded);
  }
}

TEST(CpuBackward, ScalesAndLargerScores) {
  for (float scale : {0.05f, 0.5f}) {
    Case c = square(HOPATTN_DTYPE_FLOAT32, 80, 2, 64, true);
    c.softmax_scale = scale;
    check_backward_case(c);
  }
  Case c = square(HOPATTN_DTYPE_FLOAT32, 80, 2, 64, false);
  c.q_magnitude = 8.f;  // peaked softmax rows
  check_backward_case(c);
}

TEST(CpuBackward, OddHeadDims) {
  for (int64_t head_dim : {1, 3, 100, 256}) {
    check_backward_case(square(HOPATTN_DTYPE_FLOAT32, 60, 1, head_dim, head_dim % 2 == 1));
  }
}

TEST(CpuBackward, VarlenWithEmptySequences) {
  for (bool causal : {false, true}) {
    for (hopattn_dtype dtype : {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16}) {
      VarlenCase c;
      c.dtype = dtype;
      c.seqlens_q = {30, 0, 70, 5, 60};
      c.seqlens_k = {40, 25, 70, 0, 49};
      c.heads_q = 4;
      c.heads_kv = 2;
      c.causal = causal;
      check_backward_varlen_case(c);
      c.seqused_k = {33, 0, 70, 0, 10};  // the keys past seqused_k get zero gradients
      c.layout = Layout::Padded;
      check_backward_varlen_case(c);
    }
  }
}

TEST(CpuBackward, RepeatedCallsAgreeBitForBit) {
  std::mt19937_64 rng(test_seed());
  Case c = square(HOPATTN_DTYPE_FLOAT32, 300, 4, 64, true);
  c.heads_kv = 2;
  CaseTensors t(c, rng);
  GradientTensors g(c, rng);
  const hopattn_forward_options forward = forward_options(c);
  ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &forward), HOPATTN_OK);
  hopattn_backward_options options = backward_options(c);
  options.backend = HOPATTN_BACKEND_AUTO;
  std::vector<std::vector<double>> first;
  for (int run = 0; run < 3; ++run) {
    ASSERT_EQ(hopattn_backward(&t.q, &t.k, &t.v, &t.o, &g.d_o, t.lse.data(), &g.dq, &g.dk, &g.dv,
                               &options),
              HOPATTN_OK)
        << hopattn_last_error();
    const std::vector<std::vector<double>> gradients = {read_output(g.dq), read_output(g.dk),
                                                        read_output(g.dv)};
    if (run == 0) {
      first = gradients;
    } else {
      EXPECT_EQ(gradients, first) << "run " << run;
    }
  }
}

// NaN in a row of dO reaches exactly the gradients that depend on it: its own dq row, and dk, dv
// of the keys the row sees; not the keys the causal mask hides from it, although they share tiles.
TEST(CpuBackward, NaNInDoReachesOnlyWhatDependsOnIt) {
  std::mt19937_64 rng(test_seed());
  const Case c = square(HOPATTN_DTYPE_FLOAT32, 100, 1, 32, true);
  CaseTensors t(c, rng);
  GradientTensors g(c, rng);
  const hopattn_forward_options forward = forward_options(c);
  ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &forward), HOPATTN_OK);
  const int64_t nan_row = 30;
  store_element(c.dtype, g.d_o.data, element_offset(g.d_o, 0, nan_row, 0, 5), NAN);
  const hopattn_backward_options options = backward_options(c);
  ASSERT_EQ(hopattn_backward(&t.q, &t.k, &t.v, &t.o, &g.d_o, t.lse.data(), &g.dq, &g.dk, &g.dv,
                             &options),
            HOPATTN_OK);
  const auto row_has_nan = [](const hopattn_tensor& x, int64_t row) {
    bool any = false;
    for (int64_t e = 0; e < x.head_dim; ++e)
      any |= is_nan_element(x.dtype, x.data, element_offset(x, 0, row, 0, e));
    return any;
  };
  for (int64_t i = 0; i < c.seqlen_q; ++i) EXPECT_EQ(row_has_nan(g.dq, i), i == nan_row) << i;
  for (int64_t j = 0; j < c.seqlen_k; ++j) {
    EXPECT_EQ(row_has_nan(g.dv, j), j <= nan_row) << j;
    EXPECT_EQ(row_has_nan(g.dk, j), j <= nan_row) << j;
  }
}

// NaN in a key row: dq is NaN in exactly the rows that see that key.
TEST(CpuBackward, NaNInKReachesTheDqRowsThatSeeIt) {
  std::mt19937_64 rng(test_seed());
  const Case c = square(HOPATTN_DTYPE_FLOAT32, 100, 1, 32, true);
  CaseTensors t(c, rng);
  GradientTensors g(c, rng);
  const int64_t nan_key = 40;
  store_element(c.dtype, t.k.data, element_offset(t.k, 0, nan_key, 0, 3), NAN);
  const hopattn_forward_options forward = forward_options(c);
  ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &forward), HOPATTN_OK);
  const hopattn_backward_options options = backward_options(c);
  ASSERT_EQ(hopattn_backward(&t.q, &t.k, &t.v, &t.o, &g.d_o, t.lse.data(), &g.dq, &g.dk, &g.dv,
                             &options),
            HOPATTN_OK);
  for (int64_t i = 0; i < c.seqlen_q; ++i) {
    bool any = false;
    for (int64_t e = 0; e < c.head_dim; ++e)
      any |= is_nan_element(c.dtype, g.dq.data, element_offset(g.dq, 0, i, 0, e));
    EXPECT_EQ(any, i >= nan_key) << i;
  }
}

TEST(CpuBackward, WorkspaceQueryAnswersZero) {
  std::mt19937_64 rng(test_seed());
  const Case c = square(HOPATTN_DTYPE_BFLOAT16, 10, 2, 64, false);
  CaseTensors t(c, rng);
  const hopattn_backward_options options = backward_options(c);
  size_t bytes = 1;
  ASSERT_EQ(hopattn_backward_workspace_size(&t.q, &t.k, &t.v, nullptr, &options, &bytes),
            HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_EQ(bytes, 0u);
}

// The C++ layer: one C call each; a varlen batch of the same memory gives the same bits.
TEST(CppApiBackward, FixedAndVarlenAgreeBitForBit) {
  std::mt19937_64 rng(test_seed());
  Case c = square(HOPATTN_DTYPE_FLOAT32, 50, 2, 16, true);
  c.batch = 2;
  CaseTensors t(c, rng);
  GradientTensors fixed(c, rng), packed(c, rng);
  const auto f32 = HOPATTN_DTYPE_FLOAT32;
  hopattn::forward(hopattn::Tensor{t.q.data, f32, 2, 50, 2, 16, 1600, 32, 16},
                   hopattn::Tensor{t.k.data, f32, 2, 50, 2, 16, 1600, 32, 16},
                   hopattn::Tensor{t.v.data, f32, 2, 50, 2, 16, 1600, 32, 16},
                   hopattn::MutableTensor{t.o.data, f32, 2, 50, 2, 16, 1600, 32, 16},
                   t.lse.data(), [] {
                     hopattn::ForwardOptions options;
                     options.causal = true;
                     return options;
                   }());
  hopattn::BackwardOptions options;
  options.causal = true;
  options.deterministic = true;
  const auto fixed_view = [&](void* data) {
    return hopattn::MutableTensor{data, f32, 2, 50, 2, 16, 1600, 32, 16};
  };
  hopattn::backward(fixed_view(t.q.data), fixed_view(t.k.data), fixed_view(t.v.data),
                    fixed_view(t.o.data), fixed_view(fixed.d_o.data), t.lse.data(),
                    fixed_view(fixed.dq.data), fixed_view(fixed.dk.data),
                    fixed_view(fixed.dv.data), options);
  // The same rows as one packed batch of two sequences; the LSE, (batch, heads, seqlen) for fixed
  // lengths, becomes (heads, total_q).
  std::vector<float> packed_lse(t.lse.size());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 50; ++i)
        packed_lse[(h * 100) + b * 50 + i] = t.lse[(b * 2 + h) * 50 + i];
  const auto packed_view = [&](void* data) {
    return hopattn::MutableTensor{data, f32, 1, 100, 2, 16, 3200, 32, 16};
  };
  const int32_t cu_seqlens[] = {0, 50, 100};
  hopattn::Varlen varlen;
  varlen.batch = 2;
  varlen.cu_seqlens_q = varlen.cu_seqlens_k = cu_seqlens;
  varlen.max_seqlen_q = varlen.max_seqlen_k = 50;
  hopattn::backward_varlen(packed_view(t.q.data), packed_view(t.k.data), packed_view(t.v.data),
                           packed_view(t.o.data), packed_view(fixed.d_o.data), packed_lse.data(),
                           packed_view(packed.dq.data), packed_view(packed.dk.data),
                           packed_view(packed.dv.data), varlen, options);
  EXPECT_EQ(read_output(packed.dq), read_output(fixed.dq));
  EXPECT_EQ(read_output(packed.dk), read_output(fixed.dk));
  EXPECT_EQ(read_output(packed.dv), read_output(fixed.dv));
  EXPECT_EQ(hopattn::backward_workspace_size(packed_view(t.q.data), packed_view(t.k.data),
                                             packed_view(t.v.data), &varlen, options),
            0u);
  varlen.max_seqlen_q = 49;
  try {
    hopattn::backward_varlen(packed_view(t.q.data), packed_view(t.k.data), packed_view(t.v.data),
                             packed_view(t.o.data), packed_view(fixed.d_o.data), packed_lse.data(),
                             packed_view(packed.dq.data), packed_view(packed.dk.data),
                             packed_view(packed.dv.data), varlen, options);
    FAIL() << "expected hopattn::Error";
  } catch (const hopattn::Error& e) {
    EXPECT_EQ(e.status(), HOPATTN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("varlen->max_seqlen_q is 49"), std::string::npos)
        << e.what();
  }
}

// The reference itself: its gradients against central differences of the float64 forward's
// loss L = sum(dO * O), for every element of q, k and v of small cases.
TEST(ReferenceBackward, MatchesFiniteDifferencesOfTheForward) {
  struct Shape {
    int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    bool causal;
  };
  for (const Shape& s : {Shape{1, 5, 4, 2, 1, 3, true}, {2, 3, 6, 2, 2, 4, false},
                         {1, 4, 7, 3, 1, 2, true}}) {
    Case c;
    c.batch = s.batch;
    c.seqlen_q = s.seqlen_q;
    c.seqlen_k = s.seqlen_k;
    c.heads_q = s.heads_q;
    c.heads_kv = s.heads_kv;
    c.head_dim = s.head_dim;
    c.causal = s.causal;
    c.softmax_scale = 0.7f;
    SCOPED_TRACE(describe(c));
    std::mt19937_64 rng(test_seed());
    CaseTensors t(c, rng);
    GradientTensors g(c, rng);
    const hopattn_forward_options forward = forward_options(c);
    const std::vector<double> d_o = read_output(g.d_o);
    const auto loss = [&] {
      std::vector<double> out, lse;
      reference_forward(problem_of(t.q, t.k, t.v, t.o, t.lse.data(), forward), out, lse);
      double sum = 0;
      for (size_t i = 0; i < out.size(); ++i) sum += d_o[i] * out[i];
      return sum;
    };
    std::vector<double> dq, dk, dv;
    reference_backward(problem_of(t.q, t.k, t.v, t.o, g.d_o, t.lse.data(), g.dq, g.dk, g.dv,
                                  backward_options(c)),
                       dq, dk, dv);
    const std::pair<hopattn_tensor*, std::vector<double>*> inputs[] = {
        {&t.q, &dq}, {&t.k, &dk}, {&t.v, &dv}};
    double max_error = 0, max_gradient = 0;
    for (const auto& [x, gradient] : inputs) {
      size_t index = 0;  // the reference's layout is the contiguous order of x's elements
      for (int64_t b = 0; b < x->batch; ++b)
        for (int64_t r = 0; r < x->seqlen; ++r)
          for (int64_t h = 0; h < x->heads; ++h)
            for (int64_t e = 0; e < x->head_dim; ++e, ++index) {
              const int64_t at = element_offset(*x, b, r, h, e);
              const double value = load_element(x->dtype, x->data, at);
              const double step = 1.0 / 256;
              store_element(x->dtype, x->data, at, value + step);
              const double plus = load_element(x->dtype, x->data, at), loss_plus = loss();
              store_element(x->dtype, x->data, at, value - step);
              const double minus = load_element(x->dtype, x->data, at), loss_minus = loss();
              store_element(x->dtype, x->data, at, value);
              const double numeric = (loss_plus - loss_minus) / (plus - minus);
              max_error = std::max(max_error, std::abs(numeric - (*gradient)[index]));
              max_gradient = std::max(max_gradient, std::abs((*gradient)[index]));
            }
    }
    EXPECT_LE(max_error, 1e-4) << "largest gradient " << max_gradient;
    EXPECT_GE(max_gradient, 1e-2) << "a test of nothing";
  }
}

}  // namespace
}  // namespace hopattn::test
