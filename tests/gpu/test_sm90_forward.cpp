// The SM90 forward kernel through the public C API, against a float64 reference on fresh random
// inputs: head_dim x dtype x causal x seqlen, with GQA ratios and strided inputs spread over the
// matrix. Outputs are poisoned with NaN before each call; every element must be written and finite.
// Skips, saying why, when no Hopper GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "core/dtype.hpp"
#include "core/problem.hpp"
#include "cpu/reference.hpp"
#include "hopattn/hopattn.h"

namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

struct Case {
  hopattn_dtype dtype;
  int64_t head_dim;
  bool causal;
  int64_t seqlen_q, seqlen_k;
  int64_t heads_kv, group;  // heads_q = heads_kv * group
  int64_t batch;
  int64_t head_padding;  // extra elements between heads: a strided, non-contiguous view
};

std::string name_of(const Case& c) {
  return std::string(c.dtype == HOPATTN_DTYPE_BFLOAT16 ? "bf16" : "fp16") + "_d" +
         std::to_string(c.head_dim) + (c.causal ? "_causal" : "_full") + "_sq" +
         std::to_string(c.seqlen_q) + "_sk" + std::to_string(c.seqlen_k) + "_hkv" +
         std::to_string(c.heads_kv) + "x" + std::to_string(c.group) + "_b" + std::to_string(c.batch) +
         (c.head_padding ? "_strided" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

// A device tensor in (batch, seqlen, heads, head_dim) layout with `padding` unused elements after
// each head vector, filled from N(0, 1) on the host (kept for the reference).
struct DeviceTensor {
  hopattn_tensor desc{};
  std::vector<uint16_t> host;  // bf16 or fp16 bits
  void* device = nullptr;

  DeviceTensor(hopattn_dtype dtype, int64_t b, int64_t s, int64_t h, int64_t d, int64_t padding,
               std::mt19937& rng) {
    const int64_t head_stride = d + padding;
    host.resize(size_t(b * s * h * head_stride));
    std::normal_distribution<float> normal;
    for (auto& bits : host) {
      const float x = normal(rng);
      bits = dtype == HOPATTN_DTYPE_BFLOAT16 ? hopattn::from_float<hopattn::bfloat16>(x).bits
                                             : hopattn::from_float<hopattn::float16>(x).bits;
    }
    if (cudaMalloc(&device, host.size() * 2) != cudaSuccess) device = nullptr;
    if (device) cudaMemcpy(device, host.data(), host.size() * 2, cudaMemcpyHostToDevice);
    desc = {device, dtype, b, s, h, d, s * h * head_stride, h * head_stride, head_stride};
  }
  ~DeviceTensor() { cudaFree(device); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
};

float to_float(hopattn_dtype dtype, uint16_t bits) {
  return dtype == HOPATTN_DTYPE_BFLOAT16 ? hopattn::to_float(hopattn::bfloat16{bits})
                                         : hopattn::to_float(hopattn::float16{bits});
}

// The same call on the host copies of the inputs, for the reference.
hopattn::AttentionProblem host_problem(const Case& c, const DeviceTensor& q, const DeviceTensor& k,
                                       const DeviceTensor& v) {
  hopattn_tensor qh = q.desc, kh = k.desc, vh = v.desc;
  qh.data = const_cast<uint16_t*>(q.host.data());
  kh.data = const_cast<uint16_t*>(k.host.data());
  vh.data = const_cast<uint16_t*>(v.host.data());
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = c.causal;
  return hopattn::problem_of(qh, kh, vh, qh /* o: unused by the reference */, nullptr, options);
}

// The float64 reference; for the longest sequences, whose naive float64 product would take minutes,
// the multithreaded CPU backend (float32 accumulation, ~1e-6 relative to float64) instead.
void reference(const Case& c, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
               std::vector<double>& out, std::vector<double>& lse) {
  hopattn::AttentionProblem problem = host_problem(c, q, k, v);
  if (c.seqlen_q * c.seqlen_k * c.head_dim < (int64_t(1) << 30)) {
    hopattn::reference_forward(problem, out, lse);
    return;
  }
  const int64_t heads_q = problem.heads_q;
  // The same inputs widened to float32, so that the output is not rounded to 16 bits a second time.
  auto widened = [&](const DeviceTensor& t) {
    std::vector<float> values(t.host.size());
    for (size_t i = 0; i < values.size(); ++i) values[i] = to_float(c.dtype, t.host[i]);
    return values;
  };
  std::vector<float> q32 = widened(q), k32 = widened(k), v32 = widened(v);
  hopattn_tensor qh = q.desc, kh = k.desc, vh = v.desc;
  qh.data = q32.data();
  kh.data = k32.data();
  vh.data = v32.data();
  qh.dtype = kh.dtype = vh.dtype = HOPATTN_DTYPE_FLOAT32;
  std::vector<float> o32(size_t(c.batch * c.seqlen_q * heads_q * c.head_dim));
  std::vector<float> lse32(size_t(c.batch * heads_q * c.seqlen_q));
  hopattn_tensor oh{o32.data(), HOPATTN_DTYPE_FLOAT32, c.batch, c.seqlen_q, heads_q, c.head_dim,
                    c.seqlen_q * heads_q * c.head_dim, heads_q * c.head_dim, c.head_dim};
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = c.causal;
  options.backend = HOPATTN_BACKEND_CPU;
  ASSERT_EQ(hopattn_forward(&qh, &kh, &vh, &oh, lse32.data(), &options), HOPATTN_OK)
      << hopattn_last_error();
  out.assign(o32.begin(), o32.end());
  lse.assign(lse32.begin(), lse32.end());
}

class Sm90Forward : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!hopattn_backend_available(HOPATTN_BACKEND_SM90)) {
      GTEST_SKIP() << "no Hopper (sm_90) GPU visible to this process; sm90 tests need one";
    }
  }
};

TEST_P(Sm90Forward, MatchesFloat64Reference) {
  const Case c = GetParam();
  std::mt19937 rng(std::random_device{}());  // fresh inputs every run
  const int64_t heads_q = c.heads_kv * c.group;
  DeviceTensor q(c.dtype, c.batch, c.seqlen_q, heads_q, c.head_dim, c.head_padding, rng);
  DeviceTensor k(c.dtype, c.batch, c.seqlen_k, c.heads_kv, c.head_dim, c.head_padding, rng);
  DeviceTensor v(c.dtype, c.batch, c.seqlen_k, c.heads_kv, c.head_dim, c.head_padding, rng);
  ASSERT_TRUE(q.device && k.device && v.device) << "cudaMalloc failed";

  const size_t out_elements = size_t(c.batch * c.seqlen_q * heads_q * c.head_dim);
  const size_t lse_elements = size_t(c.batch * heads_q * c.seqlen_q);
  void* o_device = nullptr;
  float* lse_device = nullptr;
  ASSERT_CUDA(cudaMalloc(&o_device, out_elements * 2));
  ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&lse_device), lse_elements * 4));
  ASSERT_CUDA(cudaMemset(o_device, 0xff, out_elements * 2));  // NaN in bf16 and fp16
  ASSERT_CUDA(cudaMemset(lse_device, 0xff, lse_elements * 4));  // NaN in float32
  hopattn_tensor o{o_device, c.dtype, c.batch, c.seqlen_q, heads_q, c.head_dim,
                   c.seqlen_q * heads_q * c.head_dim, heads_q * c.head_dim, c.head_dim};

  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = c.causal;
  options.backend = HOPATTN_BACKEND_SM90;
  ASSERT_EQ(hopattn_forward(&q.desc, &k.desc, &v.desc, &o, lse_device, &options), HOPATTN_OK)
      << hopattn_last_error();
  ASSERT_CUDA(cudaDeviceSynchronize());

  std::vector<uint16_t> out(out_elements);
  std::vector<float> lse(lse_elements);
  ASSERT_CUDA(cudaMemcpy(out.data(), o_device, out.size() * 2, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(lse.data(), lse_device, lse.size() * 4, cudaMemcpyDeviceToHost));
  cudaFree(o_device);
  cudaFree(lse_device);

  std::vector<double> ref_out, ref_lse;
  reference(c, q, k, v, ref_out, ref_lse);
  ASSERT_EQ(ref_out.size(), out.size());

  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double got = to_float(c.dtype, out[i]);
    ASSERT_TRUE(std::isfinite(got)) << "O[" << i << "] = " << got << " (unwritten or NaN)";
    err2 += (got - ref_out[i]) * (got - ref_out[i]);
    ref2 += ref_out[i] * ref_out[i];
  }
  double lse_max_error = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(ref_lse[i])) {
      ASSERT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "LSE[" << i << "] = " << lse[i] << ", expected -inf";
      continue;
    }
    ASSERT_TRUE(std::isfinite(lse[i])) << "LSE[" << i << "] = " << lse[i] << " (unwritten or NaN)";
    lse_max_error = std::max(lse_max_error, std::abs(lse[i] - ref_lse[i]));
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  const double rmse = std::sqrt(err2 / double(out.size()));
  // Rounding O to the output type alone gives ~2^-9 (bf16) / 2^-12 (fp16) relative error; P is
  // rounded to the same type before P.V. LSE is float32 throughout, so a key masked or unmasked by
  // mistake moves it far more than 1e-3.
  const double rel_tolerance = c.dtype == HOPATTN_DTYPE_BFLOAT16 ? 1e-2 : 2e-3;
  RecordProperty("relative_error", std::to_string(rel));
  RecordProperty("rmse", std::to_string(rmse));
  EXPECT_LT(rel, rel_tolerance) << "rmse " << rmse;
  EXPECT_LT(lse_max_error, 1e-3) << "relative error " << rel << ", rmse " << rmse;
  std::printf("[ sm90     ] %-48s rel %.3e  rmse %.3e  lse max err %.3e\n", name_of(c).c_str(), rel,
              rmse, lse_max_error);
}

// The shape matrix: every head_dim x dtype x causal x seqlen, with GQA ratio, strided inputs and
// seqlen_q != seqlen_k rotated across it so each feature meets each of the others somewhere.
std::vector<Case> shape_matrix() {
  const int64_t seqlens[] = {1, 17, 127, 128, 129, 1000, 4096, 8191};
  const int64_t groups[] = {1, 2, 8};
  std::vector<Case> cases;
  int rotation = 0;
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (int64_t head_dim : {64, 96, 128, 192, 256}) {
      for (bool causal : {false, true}) {
        for (int64_t seqlen : seqlens) {
          const bool long_sequence = seqlen >= 4096;  // keep the float64 reference affordable
          Case c;
          c.dtype = dtype;
          c.head_dim = head_dim;
          c.causal = causal;
          c.seqlen_q = seqlen;
          c.seqlen_k = seqlen;
          c.group = long_sequence ? 1 : groups[rotation % 3];
          c.heads_kv = long_sequence ? 1 : (c.group == 8 ? 1 : 2);
          c.batch = seqlen <= 129 ? 2 : 1;
          c.head_padding = (rotation % 2) ? 8 : 0;
          cases.push_back(c);
          ++rotation;
        }
      }
    }
  }
  // seqlen_q != seqlen_k, both ways, with and without the causal mask: with seqlen_q > seqlen_k
  // the first rows see no key (O = 0, LSE = -inf).
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (int64_t head_dim : {64, 96, 128, 192, 256}) {
      for (bool causal : {false, true}) {
        cases.push_back({dtype, head_dim, causal, 300, 77, 2, 2, 1, 0});
        cases.push_back({dtype, head_dim, causal, 77, 300, 1, 8, 2, 16});
        cases.push_back({dtype, head_dim, causal, 1, 1000, 2, 1, 1, 0});
        cases.push_back({dtype, head_dim, causal, 1000, 129, 1, 2, 1, 8});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(ShapeMatrix, Sm90Forward, ::testing::ValuesIn(shape_matrix()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name_of(info.param); });

TEST(Sm90Backend, BuildReportsKernels) {
  EXPECT_TRUE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_BFLOAT16, 128));
  EXPECT_TRUE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_FLOAT16, 64));
  EXPECT_FALSE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_FLOAT32, 128));
  EXPECT_TRUE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_BFLOAT16, 96));
  EXPECT_TRUE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_FLOAT16, 192));
  EXPECT_FALSE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_BFLOAT16, 80));
}

}  // namespace

namespace {

TEST(Sm90Backend, RejectsBroadcastStridesNamingTheTensor) {
  if (!hopattn_backend_available(HOPATTN_BACKEND_SM90)) {
    GTEST_SKIP() << "no Hopper (sm_90) GPU visible to this process; sm90 tests need one";
  }
  std::mt19937 rng(7);
  DeviceTensor q(HOPATTN_DTYPE_BFLOAT16, 2, 64, 2, 128, 0, rng);
  DeviceTensor k(HOPATTN_DTYPE_BFLOAT16, 1, 64, 2, 128, 0, rng);
  DeviceTensor v(HOPATTN_DTYPE_BFLOAT16, 2, 64, 2, 128, 0, rng);
  DeviceTensor o(HOPATTN_DTYPE_BFLOAT16, 2, 64, 2, 128, 0, rng);
  ASSERT_TRUE(q.device && k.device && v.device && o.device) << "cudaMalloc failed";
  hopattn_tensor k_broadcast = k.desc;
  k_broadcast.batch = 2;
  k_broadcast.batch_stride = 0;  // one K shared by both batch entries
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = HOPATTN_BACKEND_SM90;
  EXPECT_EQ(hopattn_forward(&q.desc, &k_broadcast, &v.desc, &o.desc, nullptr, &options),
            HOPATTN_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(hopattn_last_error()).find("k: a zero stride"), std::string::npos)
      << hopattn_last_error();
}

}  // namespace
