// Variable-length batches on the CPU backend through hopattn_forward_varlen, against the float64
// reference on fresh random inputs with NaN-poisoned outputs, and against the fixed-length call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "test_support.hpp"

namespace hopattn::test {
namespace {

const hopattn_dtype kDtypes[] = {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16,
                                 HOPATTN_DTYPE_FLOAT16};

VarlenCase varlen_case(hopattn_dtype dtype, std::vector<int32_t> seqlens_q,
                       std::vector<int32_t> seqlens_k, bool causal) {
  VarlenCase c;
  c.dtype = dtype;
  c.seqlens_q = std::move(seqlens_q);
  c.seqlens_k = std::move(seqlens_k);
  c.heads_q = c.heads_kv = 2;
  c.head_dim = 64;
  c.causal = causal;
  return c;
}

TEST(VarlenCpu, MixedLengthsWithEmptySequencesInEveryDtype) {
  const std::vector<int32_t> lengths = {37, 0, 200, 1, 0, 193, 64};
  for (hopattn_dtype dtype : kDtypes) {
    for (bool causal : {false, true})
      check_varlen_case(varlen_case(dtype, lengths, lengths, causal));
  }
}

// Under the causal mask aligned bottom-right per sequence, a sequence with more queries than
// keys has rows that see no key (O = 0, LSE = -inf); a sequence with queries and no keys at all
// has only such rows.
TEST(VarlenCpu, QueryLengthsDifferFromKeyLengths) {
  for (bool causal : {false, true}) {
    check_varlen_case(
        varlen_case(HOPATTN_DTYPE_FLOAT32, {5, 250, 70, 0, 13}, {90, 70, 250, 7, 0}, causal));
    check_varlen_case(varlen_case(HOPATTN_DTYPE_BFLOAT16, {1, 1, 1, 300}, {300, 17, 1, 1}, causal));
  }
}

TEST(VarlenCpu, GroupedQueryAttention) {
  for (int64_t heads_kv : {1, 2, 8}) {
    for (bool causal : {false, true}) {
      VarlenCase c = varlen_case(HOPATTN_DTYPE_BFLOAT16, {130, 0, 61}, {100, 40, 200}, causal);
      c.heads_q = 8;
      c.heads_kv = heads_kv;
      check_varlen_case(c);
    }
  }
}

// Each sequence attends to the first seqused_k[b] of its keys, and the causal mask aligns to
// that length.
TEST(VarlenCpu, SequsedKShortensEachSequence) {
  for (hopattn_dtype dtype : kDtypes) {
    for (bool causal : {false, true}) {
      VarlenCase c = varlen_case(dtype, {50, 120, 30, 9}, {80, 150, 30, 40}, causal);
      c.seqused_k = {80, 100, 0, 3};
      check_varlen_case(c);
    }
  }
}

TEST(VarlenCpu, PaddedStridesLeaveTheGapsUntouched) {
  for (bool causal : {false, true}) {
    VarlenCase c = varlen_case(HOPATTN_DTYPE_FLOAT16, {100, 3, 0, 57}, {120, 3, 9, 40}, causal);
    c.head_dim = 40;
    c.layout = Layout::Padded;
    check_varlen_case(c);
  }
}

TEST(VarlenCpu, LargeMagnitudesAndCustomScale) {
  VarlenCase c = varlen_case(HOPATTN_DTYPE_FLOAT32, {200, 20}, {150, 300}, true);
  c.q_magnitude = 1000.f;
  check_varlen_case(c);
  c.q_magnitude = 1.f;
  c.softmax_scale = 0.3f;
  c.head_dim = 17;
  check_varlen_case(c);
}

TEST(VarlenCpu, ManyShortSequences) {
  std::mt19937_64 rng(test_seed());
  std::uniform_int_distribution<int32_t> length(0, 40);
  VarlenCase c = varlen_case(HOPATTN_DTYPE_BFLOAT16, {}, {}, true);
  for (int i = 0; i < 60; ++i) {
    c.seqlens_q.push_back(length(rng));
    c.seqlens_k.push_back(length(rng));
  }
  c.seqlens_q[0] = 1;  // the packed tensors need at least one row
  c.seqlens_k[0] = 1;
  check_varlen_case(c);
}

// Equal lengths packed along seqlen are the fixed-length batch in another layout: every output
// element and LSE agree bit for bit.
TEST(VarlenCpu, EqualLengthsMatchTheFixedLengthCallExactly) {
  for (hopattn_dtype dtype : kDtypes) {
    for (bool causal : {false, true}) {
      constexpr int64_t kBatch = 3, kSeqlenQ = 200, kSeqlenK = 230, kHeadsQ = 4, kHeadsKv = 2;
      VarlenCase c = varlen_case(dtype, std::vector<int32_t>(kBatch, kSeqlenQ),
                                 std::vector<int32_t>(kBatch, kSeqlenK), causal);
      c.heads_q = kHeadsQ;
      c.heads_kv = kHeadsKv;
      SCOPED_TRACE(describe(c));
      std::mt19937_64 rng(test_seed());
      VarlenTensors packed(c, rng);
      CaseTensors& x = packed.tensors;
      hopattn_forward_options options = hopattn_default_forward_options();
      options.causal = causal;
      options.backend = HOPATTN_BACKEND_CPU;
      ASSERT_EQ(
          hopattn_forward_varlen(&x.q, &x.k, &x.v, &x.o, x.lse.data(), &packed.varlen, &options),
          HOPATTN_OK)
          << hopattn_last_error();

      // The same memory as (batch, seqlen, heads, head_dim) tensors.
      const auto batched = [](hopattn_tensor t, int64_t seqlen) {
        t.batch = kBatch;
        t.seqlen = seqlen;
        t.batch_stride = seqlen * t.seq_stride;
        return t;
      };
      hopattn_tensor q = batched(x.q, kSeqlenQ), k = batched(x.k, kSeqlenK),
                     v = batched(x.v, kSeqlenK);
      Buffer o_buffer;
      o_buffer.floats.assign(x.o_buffer.floats.size(), NAN);
      o_buffer.halves.assign(x.o_buffer.halves.size(), 0x7e00);
      hopattn_tensor o = batched(x.o, kSeqlenQ);
      o.data = o_buffer.data(dtype);
      std::vector<float> lse(x.lse.size(), NAN);
      ASSERT_EQ(hopattn_forward(&q, &k, &v, &o, lse.data(), &options), HOPATTN_OK)
          << hopattn_last_error();

      EXPECT_EQ(read_output(o), read_output(x.o));
      int64_t lse_mismatches = 0;
      for (int64_t b = 0; b < kBatch; ++b) {
        for (int64_t h = 0; h < kHeadsQ; ++h) {
          for (int64_t i = 0; i < kSeqlenQ; ++i) {
            // (batch, heads, seqlen) against (heads, total_q).
            const float fixed = lse[(b * kHeadsQ + h) * kSeqlenQ + i];
            const float varlen = x.lse[h * kBatch * kSeqlenQ + b * kSeqlenQ + i];
            lse_mismatches += std::memcmp(&fixed, &varlen, sizeof fixed) != 0;
          }
        }
      }
      EXPECT_EQ(lse_mismatches, 0);
    }
  }
}

TEST(VarlenCpu, NullLseIsAllowed) {
  std::mt19937_64 rng(test_seed());
  VarlenTensors t(varlen_case(HOPATTN_DTYPE_FLOAT32, {3, 0, 40}, {10, 5, 40}, true), rng);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = 1;
  CaseTensors& x = t.tensors;
  ASSERT_EQ(hopattn_forward_varlen(&x.q, &x.k, &x.v, &x.o, nullptr, &t.varlen, &options),
            HOPATTN_OK)
      << hopattn_last_error();
  for (double value : read_output(x.o)) ASSERT_TRUE(std::isfinite(value));
}

TEST(VarlenApi, BadMetadataNamesTheArgument) {
  std::mt19937_64 rng(test_seed());
  VarlenTensors t(varlen_case(HOPATTN_DTYPE_FLOAT32, {3, 4}, {10, 5}, false), rng);
  CaseTensors& x = t.tensors;
  t.cu_seqlens_k[1] = 11;
  EXPECT_EQ(hopattn_forward_varlen(&x.q, &x.k, &x.v, &x.o, nullptr, &t.varlen, nullptr),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("sequence 0 has 11 keys"), std::string::npos)
      << hopattn_last_error();
}

TEST(VarlenApi, DefaultVarlen) {
  const hopattn_varlen varlen = hopattn_default_varlen();
  EXPECT_EQ(varlen.struct_size, sizeof(hopattn_varlen));
  EXPECT_EQ(varlen.batch, 0);
  EXPECT_EQ(varlen.cu_seqlens_q, nullptr);
  EXPECT_EQ(varlen.cu_seqlens_k, nullptr);
  EXPECT_EQ(varlen.seqused_k, nullptr);
  EXPECT_EQ(varlen.max_seqlen_q, 0);
  EXPECT_EQ(varlen.max_seqlen_k, 0);
}

TEST(WorkspaceApi, TheCpuBackendNeedsNone) {
  std::mt19937_64 rng(test_seed());
  VarlenTensors t(varlen_case(HOPATTN_DTYPE_FLOAT32, {3, 4}, {10, 5}, false), rng);
  CaseTensors& x = t.tensors;
  size_t bytes = 1;
  EXPECT_EQ(hopattn_forward_workspace_size(&x.q, &x.k, &x.v, &t.varlen, nullptr, &bytes),
            HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_EQ(bytes, 0u);
  bytes = 1;
  const Case fixed;
  CaseTensors f(fixed, rng);
  EXPECT_EQ(hopattn_forward_workspace_size(&f.q, &f.k, &f.v, nullptr, nullptr, &bytes), HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_EQ(bytes, 0u);
}

TEST(WorkspaceApi, ValidatesLikeTheCall) {
  std::mt19937_64 rng(test_seed());
  const Case fixed;
  CaseTensors f(fixed, rng);
  size_t bytes = 0;
  EXPECT_EQ(hopattn_forward_workspace_size(&f.q, &f.k, &f.v, nullptr, nullptr, nullptr),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hopattn_last_error(), "bytes is NULL");
  f.k.head_dim = 32;
  EXPECT_EQ(hopattn_forward_workspace_size(&f.q, &f.k, &f.v, nullptr, nullptr, &bytes),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("v must have k's shape"), std::string::npos)
      << hopattn_last_error();
}

// A caller-provided workspace on the CPU backend is accepted and left alone.
TEST(WorkspaceApi, CpuAcceptsAndIgnoresAWorkspace) {
  std::mt19937_64 rng(test_seed());
  Case c;
  c.seqlen_q = c.seqlen_k = 20;
  CaseTensors t(c, rng);
  alignas(256) static unsigned char workspace[512];
  std::memset(workspace, 0xab, sizeof workspace);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.workspace = workspace;
  options.workspace_bytes = sizeof workspace;
  ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, nullptr, &options), HOPATTN_OK)
      << hopattn_last_error();
  for (unsigned char byte : workspace) ASSERT_EQ(byte, 0xab);
}

TEST(OptionsApi, StructSizeZeroIsRejectedWithAHint) {
  std::mt19937_64 rng(test_seed());
  const Case c;
  CaseTensors t(c, rng);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.struct_size = 0;
  EXPECT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, nullptr, &options),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("hopattn_default_forward_options()"),
            std::string::npos)
      << hopattn_last_error();
}

}  // namespace
}  // namespace hopattn::test
