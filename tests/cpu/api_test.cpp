// The C API's informational entry points and the C++ header, through libhopattn.so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu/reference.hpp"
#include "hopattn/hopattn.hpp"
#include "test_support.hpp"

namespace hopattn::test {
namespace {

TEST(Api, VersionIsTheProjectVersion) { EXPECT_STREQ(hopattn_version(), HOPATTN_EXPECTED_VERSION); }

TEST(Api, BuildInfoHasOneLinePerBackend) {
  const std::string info = hopattn_build_info();
  const size_t newline = info.find('\n');
  ASSERT_NE(newline, std::string::npos) << info;
  EXPECT_EQ(info.rfind("cpu: ", 0), 0u) << info;
  EXPECT_NE(info.find("head_dim 1-512"), std::string::npos) << info;
  EXPECT_EQ(info.compare(newline + 1, 6, "sm90: "), 0) << info;
  EXPECT_EQ(info.find('\n', newline + 1), std::string::npos) << info;
}

TEST(Api, BackendSupports) {
  for (hopattn_dtype dtype :
       {HOPATTN_DTYPE_FLOAT32, HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (int64_t head_dim : {1, 64, 100, 512}) {
      EXPECT_TRUE(hopattn_backend_supports(HOPATTN_BACKEND_CPU, dtype, head_dim)) << head_dim;
      EXPECT_TRUE(hopattn_backend_supports(HOPATTN_BACKEND_AUTO, dtype, head_dim)) << head_dim;
    }
    EXPECT_FALSE(hopattn_backend_supports(HOPATTN_BACKEND_CPU, dtype, 0));
    EXPECT_FALSE(hopattn_backend_supports(HOPATTN_BACKEND_CPU, dtype, 513));
    EXPECT_FALSE(hopattn_backend_supports(HOPATTN_BACKEND_CPU, dtype, -64));
  }
  EXPECT_FALSE(hopattn_backend_supports(HOPATTN_BACKEND_CPU, static_cast<hopattn_dtype>(7), 64));
  EXPECT_FALSE(
      hopattn_backend_supports(static_cast<hopattn_backend>(9), HOPATTN_DTYPE_FLOAT32, 64));
  // No SM90 kernel takes float32 inputs, whether or not the backend is built.
  EXPECT_FALSE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_FLOAT32, 128));
}

TEST(Api, BackendAvailable) {
  EXPECT_TRUE(hopattn_backend_available(HOPATTN_BACKEND_CPU));
  EXPECT_TRUE(hopattn_backend_available(HOPATTN_BACKEND_AUTO));
  EXPECT_FALSE(hopattn_backend_available(static_cast<hopattn_backend>(9)));
  const std::string info = hopattn_build_info();
  if (info.find("sm90: not built") != std::string::npos) {
    EXPECT_FALSE(hopattn_backend_available(HOPATTN_BACKEND_SM90));
  }
}

TEST(Api, StatusNames) {
  EXPECT_STREQ(hopattn_status_name(HOPATTN_OK), "HOPATTN_OK");
  EXPECT_STREQ(hopattn_status_name(HOPATTN_ERROR_INVALID_ARGUMENT),
               "HOPATTN_ERROR_INVALID_ARGUMENT");
  EXPECT_STREQ(hopattn_status_name(HOPATTN_ERROR_UNSUPPORTED), "HOPATTN_ERROR_UNSUPPORTED");
  EXPECT_STREQ(hopattn_status_name(HOPATTN_ERROR_BACKEND_UNAVAILABLE),
               "HOPATTN_ERROR_BACKEND_UNAVAILABLE");
  EXPECT_STREQ(hopattn_status_name(HOPATTN_ERROR_CUDA), "HOPATTN_ERROR_CUDA");
  EXPECT_STREQ(hopattn_status_name(HOPATTN_ERROR_INTERNAL), "HOPATTN_ERROR_INTERNAL");
  EXPECT_STREQ(hopattn_status_name(static_cast<hopattn_status>(42)), "unknown hopattn_status");
}

TEST(Api, DefaultOptions) {
  const hopattn_forward_options options = hopattn_default_forward_options();
  EXPECT_EQ(options.causal, 0);
  EXPECT_EQ(options.softmax_scale, 0.f);
  EXPECT_EQ(options.backend, HOPATTN_BACKEND_AUTO);
  EXPECT_EQ(options.cuda_stream, nullptr);
  EXPECT_EQ(options.struct_size, sizeof(hopattn_forward_options));
  EXPECT_EQ(options.workspace, nullptr);
  EXPECT_EQ(options.workspace_bytes, 0u);
  EXPECT_EQ(options.fp8_v_layout, HOPATTN_FP8_LAYOUT_ROWS);
  EXPECT_EQ(hopattn_default_quantize_options().layout, HOPATTN_FP8_LAYOUT_ROWS);
}

// Memory for a growable struct followed by sentinel bytes that hopattn_init_* must not touch.
template <class Struct>
struct Sentineled {
  static constexpr unsigned char kSentinel = 0xA5;
  alignas(Struct) unsigned char bytes[sizeof(Struct) + 64];

  Sentineled() { std::memset(bytes, kSentinel, sizeof bytes); }
  Struct* get() { return reinterpret_cast<Struct*>(bytes); }
  // The number of sentinel bytes from `from` to the end.
  size_t intact_from(size_t from) const {
    size_t count = 0;
    for (size_t i = from; i < sizeof bytes; ++i) count += bytes[i] == kSentinel ? 1 : 0;
    return count;
  }
};

// ctypes' path: the caller's struct_size decides how much is written, and the result is what the
// inline defaults give and what hopattn_forward accepts.
TEST(Api, InitForwardOptionsWritesTheCallersStructSizeOnly) {
  Sentineled<hopattn_forward_options> memory;
  const size_t size = sizeof(hopattn_forward_options);
  ASSERT_EQ(hopattn_init_forward_options(memory.get(), size), HOPATTN_OK) << hopattn_last_error();
  EXPECT_EQ(memory.intact_from(size), sizeof memory.bytes - size);
  const hopattn_forward_options defaults = hopattn_default_forward_options();
  hopattn_forward_options& options = *memory.get();
  EXPECT_EQ(options.struct_size, size);
  EXPECT_EQ(options.causal, defaults.causal);
  EXPECT_EQ(options.softmax_scale, defaults.softmax_scale);
  EXPECT_EQ(options.backend, defaults.backend);
  EXPECT_EQ(options.cuda_stream, defaults.cuda_stream);
  EXPECT_EQ(options.workspace, defaults.workspace);
  EXPECT_EQ(options.workspace_bytes, defaults.workspace_bytes);
  EXPECT_EQ(options.fp8_v_layout, defaults.fp8_v_layout);

  options.backend = HOPATTN_BACKEND_CPU;
  options.causal = 1;
  std::vector<float> x(8 * 2 * 16, 0.5f), o(x.size());
  const hopattn_tensor t = {x.data(), HOPATTN_DTYPE_FLOAT32, 1, 8, 2, 16, 8 * 2 * 16, 2 * 16, 16};
  hopattn_tensor to = t;
  to.data = o.data();
  EXPECT_EQ(hopattn_forward(&t, &t, &t, &to, nullptr, &options), HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_EQ(o[0], 0.5f);
}

// A caller without the workspace fields (struct_size = offsetof(workspace)) cannot exist: the
// first hopattn.h with struct_size had them. Such a size is refused, and nothing is written.
TEST(Api, InitRefusesAStructSizeBelowTheFirstVersion) {
  Sentineled<hopattn_forward_options> memory;
  const size_t size = offsetof(hopattn_forward_options, workspace);
  EXPECT_EQ(hopattn_init_forward_options(memory.get(), size), HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("struct_size is " + std::to_string(size)),
            std::string::npos)
      << hopattn_last_error();
  EXPECT_EQ(memory.intact_from(0), sizeof memory.bytes);
  EXPECT_EQ(hopattn_init_forward_options(nullptr, sizeof(hopattn_forward_options)),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(hopattn_last_error()).rfind("options is NULL", 0), 0u)
      << hopattn_last_error();

  Sentineled<hopattn_varlen> varlen;
  EXPECT_EQ(hopattn_init_varlen(varlen.get(), offsetof(hopattn_varlen, max_seqlen_q)),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(varlen.intact_from(0), sizeof varlen.bytes);
  ASSERT_EQ(hopattn_init_varlen(varlen.get(), sizeof(hopattn_varlen)), HOPATTN_OK);
  EXPECT_EQ(varlen.intact_from(sizeof(hopattn_varlen)),
            sizeof varlen.bytes - sizeof(hopattn_varlen));
  EXPECT_EQ(varlen.get()->struct_size, sizeof(hopattn_varlen));
  EXPECT_EQ(varlen.get()->batch, 0);
  EXPECT_EQ(varlen.get()->cu_seqlens_q, nullptr);
}

struct SmallProblem {
  std::vector<float> q, k, v, o;
  hopattn_tensor tq{}, tk{}, tv{}, to{};

  explicit SmallProblem(int64_t kv_head_dim = 16) {
    std::mt19937_64 rng(test_seed());
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    for (std::vector<float>* x : {&q, &k, &v, &o}) {
      x->resize(2 * 8 * 2 * 16);
      for (float& value : *x) value = uniform(rng);
    }
    tq = {q.data(), HOPATTN_DTYPE_FLOAT32, 2, 8, 2, 16, 8 * 2 * 16, 2 * 16, 16};
    tk = {k.data(), HOPATTN_DTYPE_FLOAT32, 2, 8, 2, kv_head_dim, 8 * 2 * 16, 2 * 16, 16};
    tv = {v.data(), HOPATTN_DTYPE_FLOAT32, 2, 8, 2, kv_head_dim, 8 * 2 * 16, 2 * 16, 16};
    to = {o.data(), HOPATTN_DTYPE_FLOAT32, 2, 8, 2, 16, 8 * 2 * 16, 2 * 16, 16};
  }
};

TEST(Api, LastErrorIsClearedBySuccess) {
  SmallProblem bad(8);
  EXPECT_EQ(hopattn_forward(&bad.tq, &bad.tk, &bad.tv, &bad.to, nullptr, nullptr),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("head_dim"), std::string::npos);
  SmallProblem good;
  EXPECT_EQ(hopattn_forward(&good.tq, &good.tk, &good.tv, &good.to, nullptr, nullptr), HOPATTN_OK);
  EXPECT_STREQ(hopattn_last_error(), "");
}

TEST(Api, LastErrorIsPerThread) {
  SmallProblem bad(8);
  ASSERT_EQ(hopattn_forward(&bad.tq, &bad.tk, &bad.tv, &bad.to, nullptr, nullptr),
            HOPATTN_ERROR_INVALID_ARGUMENT);
  std::string other_thread_error = "unset";
  std::thread([&] { other_thread_error = hopattn_last_error(); }).join();
  EXPECT_EQ(other_thread_error, "");
  EXPECT_STRNE(hopattn_last_error(), "");
}

TEST(Api, Sm90WithoutTheBackendOrAGpuIsUnavailable) {
  if (hopattn_backend_available(HOPATTN_BACKEND_SM90)) GTEST_SKIP() << "an SM90 GPU is visible";
  SmallProblem p;
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = HOPATTN_BACKEND_SM90;
  EXPECT_EQ(hopattn_forward(&p.tq, &p.tk, &p.tv, &p.to, nullptr, &options),
            HOPATTN_ERROR_BACKEND_UNAVAILABLE);
  EXPECT_NE(std::string(hopattn_last_error()).find("SM90"), std::string::npos)
      << hopattn_last_error();
}

TEST(CppApi, ContiguousStrides) {
  float x = 0;
  const Tensor t = Tensor::contiguous(&x, HOPATTN_DTYPE_FLOAT32, 2, 3, 4, 5);
  EXPECT_EQ(t.raw.data, &x);
  EXPECT_EQ(t.raw.dtype, HOPATTN_DTYPE_FLOAT32);
  EXPECT_EQ(t.raw.batch_stride, 3 * 4 * 5);
  EXPECT_EQ(t.raw.seq_stride, 4 * 5);
  EXPECT_EQ(t.raw.head_stride, 5);
}

TEST(CppApi, ForwardMatchesTheReference) {
  SmallProblem p;
  const Tensor q = Tensor::contiguous(p.q.data(), HOPATTN_DTYPE_FLOAT32, 2, 8, 2, 16);
  const Tensor k = Tensor::contiguous(p.k.data(), HOPATTN_DTYPE_FLOAT32, 2, 8, 2, 16);
  const Tensor v = Tensor::contiguous(p.v.data(), HOPATTN_DTYPE_FLOAT32, 2, 8, 2, 16);
  MutableTensor o = Tensor::contiguous(p.o.data(), HOPATTN_DTYPE_FLOAT32, 2, 8, 2, 16);
  std::vector<float> lse(2 * 2 * 8);
  ForwardOptions options;
  options.causal = true;
  options.softmax_scale = 0.5f;
  options.backend = HOPATTN_BACKEND_CPU;
  forward(q, k, v, o, lse.data(), options);

  ForwardProblem problem;
  problem.dtype = DType::kFloat32;
  problem.seqlens.batch = 2;
  problem.seqlens.seqlen_q = problem.seqlens.seqlen_k = 8;
  problem.seqlens.total_q = problem.seqlens.total_k = 8;
  problem.heads_q = problem.heads_kv = 2;
  problem.head_dim = 16;
  problem.q = p.q.data();
  problem.k = p.k.data();
  problem.v = p.v.data();
  problem.q_stride = problem.k_stride = problem.v_stride = {8 * 2 * 16, 2 * 16, 16};
  problem.causal = true;
  problem.softmax_scale = 0.5f;
  std::vector<double> ref_out, ref_lse;
  reference_forward(problem, ref_out, ref_lse);
  EXPECT_LE(error_norms(read_output(o.raw), ref_out).relative,
            relative_tolerance(HOPATTN_DTYPE_FLOAT32));
  EXPECT_LE(error_norms(std::vector<double>(lse.begin(), lse.end()), ref_lse).max_abs,
            kLseTolerance);
}

TEST(CppApi, FailuresThrowErrorWithStatusAndMessage) {
  SmallProblem p(8);
  Tensor q{}, k{}, v{};
  MutableTensor o{};
  q.raw = p.tq;
  k.raw = p.tk;
  v.raw = p.tv;
  o.raw = p.to;
  try {
    forward(q, k, v, o);
    FAIL() << "expected hopattn::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HOPATTN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("k.head_dim is 8 but q.head_dim is 16"), std::string::npos)
        << e.what();
  }
  SmallProblem good;
  k.raw = good.tk;
  v.raw = good.tv;
  ForwardOptions options;
  options.softmax_scale = -1.f;
  EXPECT_THROW(forward(q, k, v, o, nullptr, options), std::runtime_error);
}

TEST(CppApi, ForwardVarlenMatchesTheFixedLengthCall) {
  SmallProblem p;  // batch 2 of 8 queries and 8 keys: the same memory packed as 16 rows
  std::vector<float> o_fixed(p.o.size()), o_varlen(p.o.size());
  ForwardOptions options;
  options.causal = true;
  options.backend = HOPATTN_BACKEND_CPU;
  const auto f32 = HOPATTN_DTYPE_FLOAT32;
  MutableTensor o = Tensor::contiguous(o_fixed.data(), f32, 2, 8, 2, 16);
  forward(Tensor::contiguous(p.q.data(), f32, 2, 8, 2, 16),
          Tensor::contiguous(p.k.data(), f32, 2, 8, 2, 16),
          Tensor::contiguous(p.v.data(), f32, 2, 8, 2, 16), o, nullptr, options);
  const int32_t cu_seqlens[] = {0, 8, 16};
  Varlen varlen;
  varlen.batch = 2;
  varlen.cu_seqlens_q = varlen.cu_seqlens_k = cu_seqlens;
  varlen.max_seqlen_q = varlen.max_seqlen_k = 8;
  const Tensor q = Tensor::contiguous(p.q.data(), f32, 1, 16, 2, 16);
  const Tensor k = Tensor::contiguous(p.k.data(), f32, 1, 16, 2, 16);
  const Tensor v = Tensor::contiguous(p.v.data(), f32, 1, 16, 2, 16);
  MutableTensor packed_o = Tensor::contiguous(o_varlen.data(), f32, 1, 16, 2, 16);
  forward_varlen(q, k, v, packed_o, varlen, nullptr, options);
  EXPECT_EQ(o_varlen, o_fixed);
  EXPECT_EQ(forward_workspace_size(q, k, v, &varlen, options), 0u);
  varlen.max_seqlen_k = 7;
  EXPECT_THROW(forward_varlen(q, k, v, packed_o, varlen, nullptr, options), Error);
}

TEST(CppApi, VersionAndBuildInfo) {
  EXPECT_EQ(version(), HOPATTN_EXPECTED_VERSION);
  EXPECT_EQ(build_info(), hopattn_build_info());
  EXPECT_TRUE(backend_available(HOPATTN_BACKEND_CPU));
  EXPECT_TRUE(backend_supports(HOPATTN_BACKEND_CPU, HOPATTN_DTYPE_BFLOAT16, 96));
}

}  // namespace
}  // namespace hopattn::test
