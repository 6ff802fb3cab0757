// The SM90 forward kernel through the public C API, against a float64 reference on fresh random
// inputs: head_dim x dtype x causal x seqlen, with GQA ratios and strided inputs spread over the
// matrix; variable-length batches against the same reference per sequence; corrupted cu_seqlens
// must leave every byte outside the outputs untouched. Outputs are poisoned with NaN before each
// call; every element must be written and finite. Skips, saying why, when no Hopper GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "api/problem_of.hpp"
#include "core/causal_mask.hpp"
#include "core/dtype.hpp"
#include "core/problem.hpp"
#include "cpu/reference.hpp"
#include "hopattn/hopattn.h"
#include "sm90/kernel/tile_size.hpp"

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

// Every GPU test: skipped, saying why, when no Hopper GPU is visible.
class Sm90Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hopattn_backend_available(HOPATTN_BACKEND_SM90)) {
      GTEST_SKIP() << "no Hopper (sm_90) GPU visible to this process; sm90 tests need one";
    }
  }
};

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
hopattn::ForwardProblem host_problem(const Case& c, const DeviceTensor& q, const DeviceTensor& k,
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
  hopattn::ForwardProblem problem = host_problem(c, q, k, v);
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

// O (in the kernel's dtype) and LSE against the reference: every element finite (or -inf where the
// reference row saw no key), relative error of O and the largest LSE error within tolerance.
void expect_close(hopattn_dtype dtype, const std::string& name, const std::vector<uint16_t>& out,
                  const std::vector<float>& lse, const std::vector<double>& ref_out,
                  const std::vector<double>& ref_lse) {
  ASSERT_EQ(ref_out.size(), out.size());
  ASSERT_EQ(ref_lse.size(), lse.size());
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double got = to_float(dtype, out[i]);
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
  const double rel_tolerance = dtype == HOPATTN_DTYPE_BFLOAT16 ? 1e-2 : 2e-3;
  ::testing::Test::RecordProperty("relative_error", std::to_string(rel));
  ::testing::Test::RecordProperty("rmse", std::to_string(rmse));
  EXPECT_LT(rel, rel_tolerance) << "rmse " << rmse;
  EXPECT_LT(lse_max_error, 1e-3) << "relative error " << rel << ", rmse " << rmse;
  std::printf("[ sm90     ] %-52s rel %.3e  rmse %.3e  lse max err %.3e\n", name.c_str(), rel, rmse,
              lse_max_error);
}

class Sm90Forward : public Sm90Test, public ::testing::WithParamInterface<Case> {};

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
  expect_close(c.dtype, name_of(c), out, lse, ref_out, ref_lse);
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

// The generated kernel list is what supports() answers: bf16 head_dim 128 is in every build (it is
// the representative kernel CI compiles), the rest only in a build of all kernels.
TEST(Sm90Backend, BuildReportsKernels) {
  EXPECT_TRUE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_BFLOAT16, 128));
  EXPECT_FALSE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_FLOAT32, 128));
  EXPECT_FALSE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, HOPATTN_DTYPE_BFLOAT16, 80));
#ifdef HOPATTN_SM90_ALL_KERNELS
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (int64_t head_dim : {64, 96, 128, 192, 256}) {
      EXPECT_TRUE(hopattn_backend_supports(HOPATTN_BACKEND_SM90, dtype, head_dim)) << head_dim;
    }
  }
#endif
}

}  // namespace

namespace {

TEST_F(Sm90Test, Sm90BackendRejectsBroadcastStridesNamingTheTensor) {
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
  EXPECT_NE(std::string(hopattn_last_error()).find("k.batch_stride is 0 (a broadcast view)"), std::string::npos)
      << hopattn_last_error();
}

}  // namespace

namespace {

// A variable-length batch: per-sequence query and key lengths (0 allowed), optionally seqused_k.
struct VarlenCase {
  hopattn_dtype dtype;
  int64_t head_dim;
  bool causal;
  std::vector<int32_t> seqlens_q, seqlens_k, seqused_k;  // seqused_k empty: not used
  int64_t heads_kv, group;
  int64_t head_padding;
};

std::string name_of(const VarlenCase& c) {
  std::string name = std::string(c.dtype == HOPATTN_DTYPE_BFLOAT16 ? "bf16" : "fp16") + "_d" +
                     std::to_string(c.head_dim) + (c.causal ? "_causal" : "_full") + "_n" +
                     std::to_string(c.seqlens_q.size()) + "_hkv" + std::to_string(c.heads_kv) + "x" +
                     std::to_string(c.group);
  int64_t total_q = 0, total_k = 0;
  for (int32_t s : c.seqlens_q) total_q += s;
  for (int32_t s : c.seqlens_k) total_k += s;
  name += "_tq" + std::to_string(total_q) + "_tk" + std::to_string(total_k);
  if (!c.seqused_k.empty()) name += "_seqused";
  return name + (c.head_padding ? "_strided" : "");
}

void PrintTo(const VarlenCase& c, std::ostream* os) { *os << name_of(c); }

std::vector<int32_t> prefix_sums(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> sums(1, 0);
  for (int32_t length : lengths) sums.push_back(sums.back() + length);
  return sums;
}

template <class T>
T* device_copy(const std::vector<T>& host) {
  void* device = nullptr;
  if (cudaMalloc(&device, std::max<size_t>(host.size(), 1) * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return static_cast<T*>(device);
}

// Rows [begin, begin + length) of a packed host tensor as a batch-1 tensor of its own.
hopattn_tensor host_sequence(const DeviceTensor& t, int64_t begin, int64_t length) {
  hopattn_tensor view = t.desc;
  view.data = const_cast<uint16_t*>(t.host.data()) + begin * t.desc.seq_stride;
  view.seqlen = length;
  return view;
}

class Sm90Varlen : public Sm90Test, public ::testing::WithParamInterface<VarlenCase> {};

TEST_P(Sm90Varlen, MatchesFloat64ReferencePerSequence) {
  const VarlenCase c = GetParam();
  std::mt19937 rng(std::random_device{}());
  const int64_t heads_q = c.heads_kv * c.group;
  const std::vector<int32_t> cu_q = prefix_sums(c.seqlens_q), cu_k = prefix_sums(c.seqlens_k);
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();
  DeviceTensor q(c.dtype, 1, total_q, heads_q, c.head_dim, c.head_padding, rng);
  DeviceTensor k(c.dtype, 1, total_k, c.heads_kv, c.head_dim, c.head_padding, rng);
  DeviceTensor v(c.dtype, 1, total_k, c.heads_kv, c.head_dim, c.head_padding, rng);
  ASSERT_TRUE(q.device && k.device && v.device) << "cudaMalloc failed";
  int32_t* cu_q_device = device_copy(cu_q);
  int32_t* cu_k_device = device_copy(cu_k);
  int32_t* seqused_device = c.seqused_k.empty() ? nullptr : device_copy(c.seqused_k);

  const size_t out_elements = size_t(total_q * heads_q * c.head_dim);
  const size_t lse_elements = size_t(heads_q * total_q);
  void* o_device = nullptr;
  float* lse_device = nullptr;
  ASSERT_CUDA(cudaMalloc(&o_device, out_elements * 2));
  ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&lse_device), lse_elements * 4));
  ASSERT_CUDA(cudaMemset(o_device, 0xff, out_elements * 2));
  ASSERT_CUDA(cudaMemset(lse_device, 0xff, lse_elements * 4));
  hopattn_tensor o{o_device, c.dtype, 1, total_q, heads_q, c.head_dim, total_q * heads_q * c.head_dim,
                   heads_q * c.head_dim, c.head_dim};

  hopattn_varlen varlen = hopattn_default_varlen();
  varlen.batch = int64_t(c.seqlens_q.size());
  varlen.cu_seqlens_q = cu_q_device;
  varlen.cu_seqlens_k = cu_k_device;
  varlen.seqused_k = seqused_device;
  varlen.max_seqlen_q = std::max<int64_t>(1, *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end()));
  varlen.max_seqlen_k = std::max<int64_t>(1, *std::max_element(c.seqlens_k.begin(), c.seqlens_k.end()));
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = c.causal;
  options.backend = HOPATTN_BACKEND_SM90;
  ASSERT_EQ(hopattn_forward_varlen(&q.desc, &k.desc, &v.desc, &o, lse_device, &varlen, &options), HOPATTN_OK)
      << hopattn_last_error();
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> out(out_elements);
  std::vector<float> lse(lse_elements);
  ASSERT_CUDA(cudaMemcpy(out.data(), o_device, out.size() * 2, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(lse.data(), lse_device, lse.size() * 4, cudaMemcpyDeviceToHost));
  for (void* p : {o_device, static_cast<void*>(lse_device), static_cast<void*>(cu_q_device),
                  static_cast<void*>(cu_k_device), static_cast<void*>(seqused_device)}) {
    cudaFree(p);
  }

  // The reference, one fixed-length problem per sequence, scattered into the packed layouts:
  // O (total_q, heads_q, head_dim) and LSE (heads_q, total_q).
  std::vector<double> ref_out(out_elements), ref_lse(lse_elements);
  for (size_t b = 0; b < c.seqlens_q.size(); ++b) {
    const int64_t len_q = c.seqlens_q[b];
    const int64_t len_k = c.seqused_k.empty() ? c.seqlens_k[b] : c.seqused_k[b];
    if (len_q == 0) continue;
    hopattn_tensor qs = host_sequence(q, cu_q[b], len_q);
    hopattn_tensor ks = host_sequence(k, cu_k[b], len_k);
    hopattn_tensor vs = host_sequence(v, cu_k[b], len_k);
    hopattn_forward_options seq_options = hopattn_default_forward_options();
    seq_options.causal = c.causal;
    std::vector<double> seq_out, seq_lse;
    hopattn::reference_forward(hopattn::problem_of(qs, ks, vs, qs, nullptr, seq_options), seq_out, seq_lse);
    for (int64_t i = 0; i < len_q; ++i) {
      for (int64_t h = 0; h < heads_q; ++h) {
        for (int64_t d = 0; d < c.head_dim; ++d) {
          ref_out[size_t(((cu_q[b] + i) * heads_q + h) * c.head_dim + d)] =
              seq_out[size_t((i * heads_q + h) * c.head_dim + d)];
        }
        ref_lse[size_t(h * total_q + cu_q[b] + i)] = seq_lse[size_t(h * len_q + i)];
      }
    }
  }
  expect_close(c.dtype, name_of(c), out, lse, ref_out, ref_lse);
}

// Lengths across tile boundaries, zero-length sequences on either side, queries longer and shorter
// than keys, one long sequence among short ones; every head_dim and dtype, both masks.
std::vector<VarlenCase> varlen_matrix() {
  const std::vector<std::vector<int32_t>> q_lengths = {
      {1, 17, 128, 129, 300}, {0, 77, 1000, 0, 5}, {513, 64, 191, 1}, {2000, 3, 250}};
  const std::vector<std::vector<int32_t>> k_lengths = {
      {1, 17, 128, 129, 300}, {12, 0, 640, 3, 200}, {100, 700, 191, 64}, {2000, 300, 1}};
  std::vector<VarlenCase> cases;
  int rotation = 0;
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (int64_t head_dim : {64, 96, 128, 192, 256}) {
      for (bool causal : {false, true}) {
        const size_t pick = size_t(rotation % int(q_lengths.size()));
        VarlenCase c{dtype, head_dim, causal, q_lengths[pick], k_lengths[pick], {}, 2, 1, 0};
        c.group = (rotation % 3 == 0) ? 1 : (rotation % 3 == 1 ? 2 : 4);
        c.head_padding = rotation % 2 ? 8 : 0;
        if (rotation % 4 == 3) {  // a KV cache filled to different lengths
          for (int32_t length : c.seqlens_k) c.seqused_k.push_back(length / 2 + (length % 3));
          for (size_t b = 0; b < c.seqused_k.size(); ++b) {
            c.seqused_k[b] = std::min(c.seqused_k[b], c.seqlens_k[b]);
          }
        }
        cases.push_back(c);
        ++rotation;
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(VarlenMatrix, Sm90Varlen, ::testing::ValuesIn(varlen_matrix()),
                         [](const ::testing::TestParamInfo<VarlenCase>& info) { return name_of(info.param); });

// cu_seqlens and seqused_k that lie (negative, decreasing, past the totals, near INT32_MAX) cannot be
// checked without a device sync; the kernel clamps them, so the call must leave every byte outside
// o and lse as it was. Run under compute-sanitizer memcheck by scripts/device_check.sh as well.
TEST_F(Sm90Test, Sm90VarlenMetadataCorruptedCuSeqlensStayInsideTheTensors) {
  std::mt19937 rng(11);
  const int64_t total_q = 1000, total_k = 900, heads = 4, head_dim = 128;
  DeviceTensor q(HOPATTN_DTYPE_BFLOAT16, 1, total_q, heads, head_dim, 0, rng);
  DeviceTensor k(HOPATTN_DTYPE_BFLOAT16, 1, total_k, heads, head_dim, 0, rng);
  DeviceTensor v(HOPATTN_DTYPE_BFLOAT16, 1, total_k, heads, head_dim, 0, rng);
  ASSERT_TRUE(q.device && k.device && v.device) << "cudaMalloc failed";
  const std::vector<int32_t> cu_q = {0, -50, 5000, 300, 2147483647, 999, -2147483647 - 1};
  const std::vector<int32_t> cu_k = {7, 1000000, -3, 899, 10, 10, 2147483647};
  const std::vector<int32_t> seqused = {-5, 99999, 3, 10, 2147483647, 0};
  int32_t* cu_q_device = device_copy(cu_q);
  int32_t* cu_k_device = device_copy(cu_k);
  int32_t* seqused_device = device_copy(seqused);

  // o and lse inside larger buffers whose guard bytes must survive.
  constexpr size_t kGuard = 1 << 16;
  constexpr unsigned char kPattern = 0xa5;
  const size_t o_bytes = size_t(total_q * heads * head_dim) * 2, lse_bytes = size_t(heads * total_q) * 4;
  unsigned char *o_buffer = nullptr, *lse_buffer = nullptr;
  ASSERT_CUDA(cudaMalloc(&o_buffer, o_bytes + 2 * kGuard));
  ASSERT_CUDA(cudaMalloc(&lse_buffer, lse_bytes + 2 * kGuard));
  ASSERT_CUDA(cudaMemset(o_buffer, kPattern, o_bytes + 2 * kGuard));
  ASSERT_CUDA(cudaMemset(lse_buffer, kPattern, lse_bytes + 2 * kGuard));
  hopattn_tensor o{o_buffer + kGuard, HOPATTN_DTYPE_BFLOAT16, 1, total_q, heads, head_dim,
                   total_q * heads * head_dim, heads * head_dim, head_dim};

  for (int use_seqused = 0; use_seqused < 2; ++use_seqused) {
    for (int causal = 0; causal < 2; ++causal) {
      hopattn_varlen varlen = hopattn_default_varlen();
      varlen.batch = int64_t(seqused.size());
      varlen.cu_seqlens_q = cu_q_device;
      varlen.cu_seqlens_k = cu_k_device;
      varlen.seqused_k = use_seqused ? seqused_device : nullptr;
      varlen.max_seqlen_q = total_q;
      varlen.max_seqlen_k = total_k;
      hopattn_forward_options options = hopattn_default_forward_options();
      options.causal = causal;
      options.backend = HOPATTN_BACKEND_SM90;
      ASSERT_EQ(hopattn_forward_varlen(&q.desc, &k.desc, &v.desc, &o,
                                       reinterpret_cast<float*>(lse_buffer + kGuard), &varlen, &options),
                HOPATTN_OK)
          << hopattn_last_error();
      ASSERT_CUDA(cudaDeviceSynchronize());
    }
  }
  auto guards_intact = [&](unsigned char* buffer, size_t bytes) {
    std::vector<unsigned char> host(bytes + 2 * kGuard);
    cudaMemcpy(host.data(), buffer, host.size(), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < kGuard; ++i) {
      if (host[i] != kPattern || host[kGuard + bytes + i] != kPattern) return false;
    }
    return true;
  };
  EXPECT_TRUE(guards_intact(o_buffer, o_bytes)) << "a write landed outside o";
  EXPECT_TRUE(guards_intact(lse_buffer, lse_bytes)) << "a write landed outside lse";
  for (void* p : {static_cast<void*>(o_buffer), static_cast<void*>(lse_buffer), static_cast<void*>(cu_q_device),
                  static_cast<void*>(cu_k_device), static_cast<void*>(seqused_device)}) {
    cudaFree(p);
  }
}

}  // namespace

namespace {

// Causal tiles are scheduled from a counter in the workspace: the library's stream-ordered
// allocation and a caller's buffer give bit-identical results, and non-causal calls need none.
TEST_F(Sm90Test, Sm90WorkspaceCallerWorkspaceMatchesTheLibrarysOwn) {
  std::mt19937 rng(5);
  DeviceTensor q(HOPATTN_DTYPE_BFLOAT16, 2, 1000, 4, 128, 0, rng);
  DeviceTensor k(HOPATTN_DTYPE_BFLOAT16, 2, 1000, 4, 128, 0, rng);
  DeviceTensor v(HOPATTN_DTYPE_BFLOAT16, 2, 1000, 4, 128, 0, rng);
  DeviceTensor o_library(HOPATTN_DTYPE_BFLOAT16, 2, 1000, 4, 128, 0, rng);
  DeviceTensor o_caller(HOPATTN_DTYPE_BFLOAT16, 2, 1000, 4, 128, 0, rng);
  ASSERT_TRUE(q.device && k.device && v.device && o_library.device && o_caller.device);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = HOPATTN_BACKEND_SM90;
  size_t bytes = 1;
  ASSERT_EQ(hopattn_forward_workspace_size(&q.desc, &k.desc, &v.desc, nullptr, &options, &bytes), HOPATTN_OK);
  EXPECT_EQ(bytes, 0u) << "non-causal tiles are scheduled statically";
  options.causal = 1;
  ASSERT_EQ(hopattn_forward_workspace_size(&q.desc, &k.desc, &v.desc, nullptr, &options, &bytes), HOPATTN_OK);
  ASSERT_GT(bytes, 0u);
  ASSERT_EQ(hopattn_forward(&q.desc, &k.desc, &v.desc, &o_library.desc, nullptr, &options), HOPATTN_OK)
      << hopattn_last_error();
  void* workspace = nullptr;
  ASSERT_CUDA(cudaMalloc(&workspace, bytes));
  ASSERT_CUDA(cudaMemset(workspace, 0x5a, bytes));  // garbage: the library must reset its counter
  options.workspace = workspace;
  options.workspace_bytes = bytes;
  for (int repeat = 0; repeat < 2; ++repeat) {  // the same buffer twice
    ASSERT_EQ(hopattn_forward(&q.desc, &k.desc, &v.desc, &o_caller.desc, nullptr, &options), HOPATTN_OK)
        << hopattn_last_error();
  }
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> a(o_library.host.size()), b(o_caller.host.size());
  ASSERT_CUDA(cudaMemcpy(a.data(), o_library.device, a.size() * 2, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(b.data(), o_caller.device, b.size() * 2, cudaMemcpyDeviceToHost));
  cudaFree(workspace);
  EXPECT_EQ(a, b);
}

}  // namespace

namespace {

// Issue 10 on the GPU: extreme magnitudes, NaN inputs and the host checks of the call.

double output_tolerance(hopattn_dtype dtype) { return dtype == HOPATTN_DTYPE_BFLOAT16 ? 2e-2 : 4e-3; }

// One call on the device and every row of O and LSE read back next to the float64 reference of the
// same inputs. `softmax_scale` 0 is the default.
struct ExtremeCall {
  hopattn_dtype dtype;
  int64_t seqlen_q, seqlen_k, heads, head_dim;
  bool causal;
  float softmax_scale;
  std::vector<double> out, lse, ref_out, ref_lse;

  ExtremeCall(hopattn_dtype dtype_, int64_t seqlen_q_, int64_t seqlen_k_, int64_t heads_, int64_t head_dim_,
              bool causal_, float softmax_scale_)
      : dtype(dtype_), seqlen_q(seqlen_q_), seqlen_k(seqlen_k_), heads(heads_), head_dim(head_dim_), causal(causal_),
        softmax_scale(softmax_scale_) {}

  void run(DeviceTensor& q, DeviceTensor& k, DeviceTensor& v) {
    const size_t out_elements = size_t(seqlen_q * heads * head_dim), lse_elements = size_t(heads * seqlen_q);
    void* o_device = nullptr;
    float* lse_device = nullptr;
    ASSERT_CUDA(cudaMalloc(&o_device, out_elements * 2));
    ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&lse_device), lse_elements * 4));
    ASSERT_CUDA(cudaMemset(o_device, 0x7f, out_elements * 2));  // finite garbage: NaN must come from the kernel
    ASSERT_CUDA(cudaMemset(lse_device, 0x7f, lse_elements * 4));
    hopattn_tensor o{o_device, dtype, 1, seqlen_q, heads, head_dim, seqlen_q * heads * head_dim, heads * head_dim,
                     head_dim};
    hopattn_forward_options options = hopattn_default_forward_options();
    options.causal = causal;
    options.softmax_scale = softmax_scale;
    options.backend = HOPATTN_BACKEND_SM90;
    ASSERT_EQ(hopattn_forward(&q.desc, &k.desc, &v.desc, &o, lse_device, &options), HOPATTN_OK)
        << hopattn_last_error();
    ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<uint16_t> out_bits(out_elements);
    std::vector<float> lse32(lse_elements);
    ASSERT_CUDA(cudaMemcpy(out_bits.data(), o_device, out_elements * 2, cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(lse32.data(), lse_device, lse_elements * 4, cudaMemcpyDeviceToHost));
    cudaFree(o_device);
    cudaFree(lse_device);
    out.resize(out_elements);
    for (size_t i = 0; i < out_elements; ++i) out[i] = to_float(dtype, out_bits[i]);
    lse.assign(lse32.begin(), lse32.end());

    hopattn_tensor qh = q.desc, kh = k.desc, vh = v.desc;
    qh.data = q.host.data();
    kh.data = k.host.data();
    vh.data = v.host.data();
    hopattn::reference_forward(hopattn::problem_of(qh, kh, vh, qh, nullptr, options), ref_out, ref_lse);
  }

  double row_output_error(int64_t row, int64_t head) const {
    double error = 0;
    for (int64_t e = 0; e < head_dim; ++e) {
      const size_t at = size_t((row * heads + head) * head_dim + e);
      error = std::isnan(out[at]) ? INFINITY : std::max(error, std::abs(out[at] - ref_out[at]));
    }
    return error;
  }
  double row_lse(int64_t row, int64_t head) const { return lse[size_t(head * seqlen_q + row)]; }
  double row_ref_lse(int64_t row, int64_t head) const { return ref_lse[size_t(head * seqlen_q + row)]; }

  // Runs the call and expects every row's O within output_tolerance and LSE within a relative 1e-4.
  void expect_every_row_matches(DeviceTensor& q, DeviceTensor& k, DeviceTensor& v) {
    run(q, k, v);
    if (::testing::Test::HasFatalFailure()) return;
    std::string first;
    EXPECT_EQ(bad_rows(output_tolerance(dtype), 1e-4, first), 0)
        << "of " << seqlen_q * heads << " rows; first: " << first;
  }

  // Rows whose O or LSE differ from the reference; the first of them described in `first`.
  int64_t bad_rows(double o_tolerance, double lse_tolerance, std::string& first) const {
    int64_t bad = 0;
    for (int64_t row = 0; row < seqlen_q; ++row) {
      for (int64_t head = 0; head < heads; ++head) {
        const double o_error = row_output_error(row, head);
        const double lse_error = std::abs(row_lse(row, head) - row_ref_lse(row, head)) /
                                 std::max(1.0, std::abs(row_ref_lse(row, head)));
        const bool lse_ok = lse_error <= lse_tolerance ||
                            (std::isinf(row_ref_lse(row, head)) && row_lse(row, head) == row_ref_lse(row, head));
        if (o_error <= o_tolerance && lse_ok) continue;
        if (bad++ == 0) {
          first = "row " + std::to_string(row) + " head " + std::to_string(head) + ": max |O - ref| " +
                  std::to_string(o_error) + ", LSE " + std::to_string(row_lse(row, head)) + " vs " +
                  std::to_string(row_ref_lse(row, head));
        }
      }
    }
    return bad;
  }
};

void fill_uniform(DeviceTensor& t, float magnitude, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-magnitude, magnitude);
  for (auto& bits : t.host) {
    const float x = uniform(rng);
    bits = t.desc.dtype == HOPATTN_DTYPE_BFLOAT16 ? hopattn::from_float<hopattn::bfloat16>(x).bits
                                                  : hopattn::from_float<hopattn::float16>(x).bits;
  }
  cudaMemcpy(t.device, t.host.data(), t.host.size() * 2, cudaMemcpyHostToDevice);
}

// Scores up to 5e11 (inputs of +-6e4, head_dim 128): with the row max folded into an FMA, its
// rounding gave the largest score an exponent of up to +-4096, and whole rows became inf, NaN or
// O = 0 / LSE = -inf. A fixed seed: a near tie between two scores of 1e10 that float32 rounding
// breaks the other way than float64 would be a property of the inputs, not a bug.
TEST_F(Sm90Test, Sm90ExtremeValuesInputsOfSixtyThousandMatchTheReferenceInEveryRow) {
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    if (!hopattn_backend_supports(HOPATTN_BACKEND_SM90, dtype, 128)) continue;
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(dtype == HOPATTN_DTYPE_BFLOAT16 ? "bf16" : "fp16") + (causal ? " causal" : ""));
      std::mt19937 rng(20240610);
      ExtremeCall call{dtype, 320, 320, 4, 128, causal, 0.f};
      DeviceTensor q(dtype, 1, 320, 4, 128, 0, rng), k(dtype, 1, 320, 4, 128, 0, rng), v(dtype, 1, 320, 4, 128, 0, rng);
      ASSERT_TRUE(q.device && k.device && v.device);
      fill_uniform(q, 6e4f, rng);
      fill_uniform(k, 6e4f, rng);
      call.expect_every_row_matches(q, k, v);
    }
  }
}

// softmax_scale up to 1e36 with N(0, 1) inputs: the scale's log2 times the max was rounded the same
// way. The LSE (scale times a max score of order ten) still fits float32.
TEST_F(Sm90Test, Sm90ExtremeValuesHugeSoftmaxScalesMatchTheReference) {
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    if (!hopattn_backend_supports(HOPATTN_BACKEND_SM90, dtype, 128)) continue;
    for (float scale : {1e30f, 1e36f}) {
      SCOPED_TRACE(std::to_string(scale));
      std::mt19937 rng(7);
      ExtremeCall call{dtype, 100, 150, 2, 128, true, scale};
      DeviceTensor q(dtype, 1, 100, 2, 128, 0, rng), k(dtype, 1, 150, 2, 128, 0, rng), v(dtype, 1, 150, 2, 128, 0, rng);
      ASSERT_TRUE(q.device && k.device && v.device);
      call.expect_every_row_matches(q, k, v);
    }
  }
}

// Scores of ~1e11 with grouped heads, seqlen_q != seqlen_k under the causal mask and padded rows of
// q: the rows computed again after the key loop (exact_rows.cuh) address q, k and v as the loop does.
TEST_F(Sm90Test, Sm90ExtremeValuesWithGroupedHeadsUnequalLengthsAndStridesMatchTheReference) {
  const hopattn_dtype dtype = HOPATTN_DTYPE_BFLOAT16;
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    std::mt19937 rng(11);
    ExtremeCall call{dtype, 300, 520, 4, 128, causal, 0.f};
    DeviceTensor q(dtype, 1, 300, 4, 128, 8, rng), k(dtype, 1, 520, 2, 128, 0, rng), v(dtype, 1, 520, 2, 128, 0, rng);
    ASSERT_TRUE(q.device && k.device && v.device);
    fill_uniform(q, 6e4f, rng);
    fill_uniform(k, 6e4f, rng);
    call.expect_every_row_matches(q, k, v);
  }
}

// The key loop runs from the last key block to the first. Keys from 700 on give every row scores
// below -1e9 (q >= 0, those keys <= -1e4), so a row's first offsets lie far outside the fused
// exponent's range and its last ones inside: nothing is computed again, and those keys weigh nothing.
TEST_F(Sm90Test, Sm90ExtremeValuesFirstKeyBlocksFarBelowTheRestWeighNothing) {
  const hopattn_dtype dtype = HOPATTN_DTYPE_BFLOAT16;
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    std::mt19937 rng(13);
    ExtremeCall call{dtype, 1000, 1000, 2, 128, causal, 0.f};
    DeviceTensor q(dtype, 1, 1000, 2, 128, 0, rng), k(dtype, 1, 1000, 2, 128, 0, rng), v(dtype, 1, 1000, 2, 128, 0, rng);
    ASSERT_TRUE(q.device && k.device && v.device);
    std::uniform_real_distribution<float> uniform(1e4f, 7e4f);
    for (auto& bits : q.host) bits &= 0x7fff;  // |q|: the sign bit cleared
    for (size_t at = size_t(700) * 2 * 128; at < k.host.size(); ++at) {
      k.host[at] = hopattn::from_float<hopattn::bfloat16>(-uniform(rng)).bits;
    }
    ASSERT_CUDA(cudaMemcpy(q.device, q.host.data(), q.host.size() * 2, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(k.device, k.host.data(), k.host.size() * 2, cudaMemcpyHostToDevice));
    call.expect_every_row_matches(q, k, v);
  }
}

// NaN in one element of q row 5 or of k or v row 150: O and LSE of exactly the rows that see it are
// NaN (for v only O's column; the LSE does not read v), every other row is the reference's. The
// one exception is the SM90 backend's documented one: NaN or inf in v reaches the rows of the same
// key block that do not see that key, since P V multiplies their P = 0 by it; rows whose visible
// keys end before that block stay clean.
TEST_F(Sm90Test, Sm90ExtremeValuesNaNReachesTheRowsThatSeeIt) {
  constexpr int64_t kNanRow = 5, kNanKey = 150, kNanColumn = 3;
  using Tiles = hopattn::sm90::TileSize<128, 2>;
  constexpr int64_t kNanKeyBlockBegin = kNanKey / Tiles::kBlockN * Tiles::kBlockN;
  const hopattn_dtype dtype = HOPATTN_DTYPE_BFLOAT16;
  for (bool causal : {false, true}) {
    for (char tensor : {'q', 'k', 'v'}) {
      SCOPED_TRACE(std::string("NaN in ") + tensor + (causal ? ", causal" : ""));
      std::mt19937 rng(3);
      ExtremeCall call{dtype, 400, 400, 1, 128, causal, 0.f};
      DeviceTensor q(dtype, 1, 400, 1, 128, 0, rng), k(dtype, 1, 400, 1, 128, 0, rng), v(dtype, 1, 400, 1, 128, 0, rng);
      ASSERT_TRUE(q.device && k.device && v.device);
      DeviceTensor& target = tensor == 'q' ? q : (tensor == 'k' ? k : v);
      const int64_t at = (tensor == 'q' ? kNanRow : kNanKey) * 128 + kNanColumn;
      target.host[size_t(at)] = 0x7fc0;  // a quiet NaN in bf16
      ASSERT_CUDA(cudaMemcpy(static_cast<uint16_t*>(target.device) + at, &target.host[size_t(at)], 2,
                             cudaMemcpyHostToDevice));
      call.run(q, k, v);
      for (int64_t row = 0; row < 400; ++row) {
        const int64_t key_end = hopattn::visible_key_end(causal, row, 400, 400);
        const bool sees = tensor == 'q' ? row == kNanRow : kNanKey < key_end;
        if (sees) {
          const size_t first = size_t(row * 128), column = first + kNanColumn;
          if (tensor == 'v') {
            EXPECT_TRUE(std::isnan(call.out[column])) << "row " << row;
          } else {
            for (int64_t e = 0; e < 128; ++e) EXPECT_TRUE(std::isnan(call.out[first + size_t(e)])) << "row " << row;
            EXPECT_TRUE(std::isnan(call.row_lse(row, 0))) << "row " << row << " LSE " << call.row_lse(row, 0);
          }
          continue;
        }
        if (tensor == 'v' && key_end > kNanKeyBlockBegin) continue;  // the documented exception
        EXPECT_LE(call.row_output_error(row, 0), output_tolerance(dtype)) << "row " << row;
        EXPECT_NEAR(call.row_lse(row, 0), call.row_ref_lse(row, 0), 1e-3) << "row " << row;
      }
    }
  }
}

// What the runtime alone can tell, refused with the C argument's name before any launch.
TEST_F(Sm90Test, Sm90HostChecksNameTheArgument) {
  std::mt19937 rng(9);
  DeviceTensor q(HOPATTN_DTYPE_BFLOAT16, 1, 64, 2, 128, 0, rng), k(HOPATTN_DTYPE_BFLOAT16, 1, 64, 2, 128, 0, rng),
      v(HOPATTN_DTYPE_BFLOAT16, 1, 64, 2, 128, 0, rng), o(HOPATTN_DTYPE_BFLOAT16, 1, 64, 2, 128, 0, rng);
  ASSERT_TRUE(q.device && k.device && v.device && o.device);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = HOPATTN_BACKEND_SM90;
  auto expect_refused = [&](float* lse, const char* name) {
    EXPECT_EQ(hopattn_forward(&q.desc, &k.desc, &v.desc, &o.desc, lse, &options), HOPATTN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(hopattn_last_error()).find(name), std::string::npos) << hopattn_last_error();
  };
  std::vector<float> host_lse(128);
  expect_refused(host_lse.data(), "lse");

  options.causal = 1;  // a call that uses its workspace
  std::vector<unsigned char> host_workspace(1 << 16);
  options.workspace = host_workspace.data();
  options.workspace_bytes = host_workspace.size();
  expect_refused(nullptr, "options->workspace");
  options.workspace = nullptr;
  options.workspace_bytes = 0;

  // A stream of the current device is accepted, and the call runs on it.
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  options.cuda_stream = stream;
  EXPECT_EQ(hopattn_forward(&q.desc, &k.desc, &v.desc, &o.desc, nullptr, &options), HOPATTN_OK)
      << hopattn_last_error();
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  ASSERT_CUDA(cudaStreamDestroy(stream));
}

// A call captured into a CUDA graph (a capturing stream refuses the device query the stream check
// makes otherwise) replays what the call gives, bit for bit; causal, so its workspace (the tile
// counter) is allocated and reset inside the graph.
TEST_F(Sm90Test, Sm90CaptureIntoACudaGraphReplaysTheCall) {
  std::mt19937 rng(13);
  DeviceTensor q(HOPATTN_DTYPE_BFLOAT16, 2, 700, 4, 128, 0, rng), k(HOPATTN_DTYPE_BFLOAT16, 2, 700, 4, 128, 0, rng),
      v(HOPATTN_DTYPE_BFLOAT16, 2, 700, 4, 128, 0, rng), o_eager(HOPATTN_DTYPE_BFLOAT16, 2, 700, 4, 128, 0, rng),
      o_graph(HOPATTN_DTYPE_BFLOAT16, 2, 700, 4, 128, 0, rng);
  ASSERT_TRUE(q.device && k.device && v.device && o_eager.device && o_graph.device);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = HOPATTN_BACKEND_SM90;
  options.causal = 1;
  ASSERT_EQ(hopattn_forward(&q.desc, &k.desc, &v.desc, &o_eager.desc, nullptr, &options), HOPATTN_OK)
      << hopattn_last_error();
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  options.cuda_stream = stream;
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const hopattn_status captured = hopattn_forward(&q.desc, &k.desc, &v.desc, &o_graph.desc, nullptr, &options);
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  ASSERT_EQ(captured, HOPATTN_OK) << hopattn_last_error();  // the library's reason before the runtime's
  ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  std::vector<uint16_t> eager(o_eager.host.size()), replayed(o_graph.host.size());
  ASSERT_CUDA(cudaMemcpy(eager.data(), o_eager.device, eager.size() * 2, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(replayed.data(), o_graph.device, replayed.size() * 2, cudaMemcpyDeviceToHost));
  EXPECT_EQ(eager, replayed);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
