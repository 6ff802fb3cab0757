// The SM90 backward kernels through the public C API, against the float64 reference on fresh
// random inputs: dtype x head_dim x causal x seqlen (seqlen_q != seqlen_k both ways), GQA groups
// of 1 and 4, strided tensors; variable-length batches with empty sequences; corrupted cu_seqlens
// must leave every byte outside dq, dk and dv untouched; deterministic runs are bitwise equal. The
// forward on the GPU provides o and lse, as in training. Gradients are poisoned with NaN before
// each call; every element must be written and finite. Skips, saying why, without a Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "api/problem_of.hpp"
#include "core/dtype.hpp"
#include "core/problem.hpp"
#include "cpu/reference.hpp"
#include "hopattn/hopattn.h"

namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

// generate.py's backward head_dims: what a build of all kernels holds (its representative build:
// bf16 head_dim 128). 192 and 256 take the kernel's other design (dK and dV split by head_dim).
constexpr int64_t kBackwardHeadDims[] = {64, 96, 128, 192, 256};

bool backward_built(hopattn_dtype dtype, int64_t head_dim) {
#ifdef HOPATTN_SM90_ALL_KERNELS
  (void)dtype;
  return std::find(std::begin(kBackwardHeadDims), std::end(kBackwardHeadDims), head_dim) != std::end(kBackwardHeadDims);
#else
  return dtype == HOPATTN_DTYPE_BFLOAT16 && head_dim == 128;
#endif
}

class Sm90Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hopattn_backend_available(HOPATTN_BACKEND_SM90)) {
      GTEST_SKIP() << "no Hopper (sm_90) GPU visible to this process; sm90 tests need one";
    }
  }
};

float to_float(hopattn_dtype dtype, uint16_t bits) {
  return dtype == HOPATTN_DTYPE_BFLOAT16 ? hopattn::to_float(hopattn::bfloat16{bits})
                                         : hopattn::to_float(hopattn::float16{bits});
}

// A device tensor in (batch, seqlen, heads, head_dim) layout with `padding` unused elements after
// each head vector: inputs filled from N(0, 1) (the host copy kept for the reference), outputs
// poisoned with NaN.
struct DeviceTensor {
  hopattn_tensor desc{};
  std::vector<uint16_t> host;  // bf16 or fp16 bits
  void* device = nullptr;

  DeviceTensor(hopattn_dtype dtype, int64_t b, int64_t s, int64_t h, int64_t d, int64_t padding, std::mt19937* rng) {
    const int64_t head_stride = d + padding;
    host.resize(size_t(std::max<int64_t>(1, b * s * h * head_stride)));
    std::normal_distribution<float> normal;
    for (auto& bits : host) {
      const float x = rng ? normal(*rng) : 0.f;
      bits = dtype == HOPATTN_DTYPE_BFLOAT16 ? hopattn::from_float<hopattn::bfloat16>(x).bits
                                             : hopattn::from_float<hopattn::float16>(x).bits;
    }
    if (cudaMalloc(&device, host.size() * 2) != cudaSuccess) device = nullptr;
    if (device && rng) cudaMemcpy(device, host.data(), host.size() * 2, cudaMemcpyHostToDevice);
    if (device && !rng) cudaMemset(device, 0xff, host.size() * 2);  // NaN in bf16 and fp16
    desc = {device, dtype, b, s, h, d, s * h * head_stride, h * head_stride, head_stride};
  }
  ~DeviceTensor() { cudaFree(device); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  std::vector<uint16_t> download() const {
    std::vector<uint16_t> values(host.size());
    cudaMemcpy(values.data(), device, values.size() * 2, cudaMemcpyDeviceToHost);
    return values;
  }
  // The host copy as a tensor, for the reference.
  hopattn_tensor on_host() const {
    hopattn_tensor view = desc;
    view.data = const_cast<uint16_t*>(host.data());
    return view;
  }
};

// A gradient against its float64 reference. `got` is laid out as `t` (possibly padded), `ref`
// contiguous (batch, seqlen, heads, head_dim). Every element finite, relative error within
// tolerance: beyond the rounding of the output, P and dS are rounded to the element type before
// their products, and D comes from the forward's rounded O.
void expect_close(const std::string& name, const char* what, const hopattn_tensor& t,
                  const std::vector<uint16_t>& got, const std::vector<double>& ref) {
  ASSERT_EQ(ref.size(), size_t(t.batch * t.seqlen * t.heads * t.head_dim)) << what;
  double err2 = 0, ref2 = 0;
  size_t i = 0;
  for (int64_t b = 0; b < t.batch; ++b) {
    for (int64_t s = 0; s < t.seqlen; ++s) {
      for (int64_t h = 0; h < t.heads; ++h) {
        for (int64_t d = 0; d < t.head_dim; ++d, ++i) {
          const double value = to_float(t.dtype, got[size_t(b * t.batch_stride + s * t.seq_stride + h * t.head_stride + d)]);
          ASSERT_TRUE(std::isfinite(value)) << what << "[" << b << ", " << s << ", " << h << ", " << d << "] = " << value
                                            << " (unwritten or NaN)";
          err2 += (value - ref[i]) * (value - ref[i]);
          ref2 += ref[i] * ref[i];
        }
      }
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  const double rmse = std::sqrt(err2 / double(std::max<size_t>(1, ref.size())));
  const double rel_tolerance = t.dtype == HOPATTN_DTYPE_BFLOAT16 ? 3e-2 : 5e-3;
  EXPECT_LT(rel, rel_tolerance) << what << ": rmse " << rmse;
  std::printf("[ sm90 bwd ] %-48s %s rel %.3e  rmse %.3e\n", name.c_str(), what, rel, rmse);
}

// The inputs and outputs of one backward call: q, k, v, d_o random; o and lse from the GPU
// forward; dq, dk, dv poisoned. `varlen` null: fixed lengths.
struct BackwardSetup {
  DeviceTensor q, k, v, d_o, o, dq, dk, dv;
  float* lse = nullptr;
  size_t lse_elements;

  BackwardSetup(hopattn_dtype dtype, int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_kv,
                int64_t group, int64_t head_dim, int64_t padding, std::mt19937& rng)
      : q(dtype, batch, seqlen_q, heads_kv * group, head_dim, padding, &rng),
        k(dtype, batch, seqlen_k, heads_kv, head_dim, padding, &rng),
        v(dtype, batch, seqlen_k, heads_kv, head_dim, padding, &rng),
        d_o(dtype, batch, seqlen_q, heads_kv * group, head_dim, padding, &rng),
        o(dtype, batch, seqlen_q, heads_kv * group, head_dim, 0, nullptr),
        dq(dtype, batch, seqlen_q, heads_kv * group, head_dim, padding, nullptr),
        dk(dtype, batch, seqlen_k, heads_kv, head_dim, padding, nullptr),
        dv(dtype, batch, seqlen_k, heads_kv, head_dim, 0, nullptr),
        lse_elements(size_t(std::max<int64_t>(1, batch * heads_kv * group * seqlen_q))) {
    if (cudaMalloc(reinterpret_cast<void**>(&lse), lse_elements * 4) != cudaSuccess) lse = nullptr;
  }
  ~BackwardSetup() { cudaFree(lse); }
  bool allocated() const {
    return q.device && k.device && v.device && d_o.device && o.device && dq.device && dk.device && dv.device && lse;
  }

  hopattn_status forward(bool causal, const hopattn_varlen* varlen) {
    hopattn_forward_options options = hopattn_default_forward_options();
    options.causal = causal;
    options.backend = HOPATTN_BACKEND_SM90;
    return varlen ? hopattn_forward_varlen(&q.desc, &k.desc, &v.desc, &o.desc, lse, varlen, &options)
                  : hopattn_forward(&q.desc, &k.desc, &v.desc, &o.desc, lse, &options);
  }
  hopattn_status backward(const hopattn_backward_options& options, const hopattn_varlen* varlen) {
    return varlen ? hopattn_backward_varlen(&q.desc, &k.desc, &v.desc, &o.desc, &d_o.desc, lse, &dq.desc,
                                            &dk.desc, &dv.desc, varlen, &options)
                  : hopattn_backward(&q.desc, &k.desc, &v.desc, &o.desc, &d_o.desc, lse, &dq.desc, &dk.desc,
                                     &dv.desc, &options);
  }

  // The float64 gradients of the same call on the host copies (the reference reads q, k, v, d_o).
  void reference(const hopattn_backward_options& options, const hopattn_varlen* varlen, std::vector<double>& ref_dq,
                 std::vector<double>& ref_dk, std::vector<double>& ref_dv) const {
    const hopattn_tensor qh = q.on_host(), kh = k.on_host(), vh = v.on_host(), d_oh = d_o.on_host();
    const hopattn::BackwardProblem problem =
        varlen ? hopattn::problem_of(qh, kh, vh, qh, d_oh, nullptr, qh, kh, vh, *varlen, options)
               : hopattn::problem_of(qh, kh, vh, qh, d_oh, nullptr, qh, kh, vh, options);
    hopattn::reference_backward(problem, ref_dq, ref_dk, ref_dv);
  }

  void expect_matches_reference(const std::string& name, const hopattn_backward_options& options,
                                const hopattn_varlen* host_varlen) {
    std::vector<double> ref_dq, ref_dk, ref_dv;
    reference(options, host_varlen, ref_dq, ref_dk, ref_dv);
    expect_close(name, "dq", dq.desc, dq.download(), ref_dq);
    expect_close(name, "dk", dk.desc, dk.download(), ref_dk);
    expect_close(name, "dv", dv.desc, dv.download(), ref_dv);
  }
};

hopattn_backward_options sm90_backward_options(bool causal, bool deterministic) {
  hopattn_backward_options options = hopattn_default_backward_options();
  options.causal = causal;
  options.deterministic = deterministic;
  options.backend = HOPATTN_BACKEND_SM90;
  return options;
}

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
  return std::string(c.dtype == HOPATTN_DTYPE_BFLOAT16 ? "bf16" : "fp16") + "_d" + std::to_string(c.head_dim) +
         (c.causal ? "_causal" : "_full") + "_sq" + std::to_string(c.seqlen_q) + "_sk" +
         std::to_string(c.seqlen_k) + "_hkv" + std::to_string(c.heads_kv) + "x" + std::to_string(c.group) +
         "_b" + std::to_string(c.batch) + (c.head_padding ? "_strided" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

class Sm90Backward : public Sm90Test, public ::testing::WithParamInterface<Case> {};

TEST_P(Sm90Backward, MatchesFloat64Reference) {
  const Case c = GetParam();
  std::mt19937 rng(std::random_device{}());  // fresh inputs every run
  BackwardSetup setup(c.dtype, c.batch, c.seqlen_q, c.seqlen_k, c.heads_kv, c.group, c.head_dim, c.head_padding, rng);
  ASSERT_TRUE(setup.allocated()) << "cudaMalloc failed";
  ASSERT_EQ(setup.forward(c.causal, nullptr), HOPATTN_OK) << hopattn_last_error();
  const hopattn_backward_options options = sm90_backward_options(c.causal, false);
  ASSERT_EQ(setup.backward(options, nullptr), HOPATTN_OK) << hopattn_last_error();
  ASSERT_CUDA(cudaDeviceSynchronize());
  setup.expect_matches_reference(name_of(c), options, nullptr);
}

// Every built dtype x head_dim x causal x seqlen; GQA groups of 1 and 4 and a strided view rotate
// across the matrix. seqlen_q > seqlen_k with the causal mask leaves the first rows without keys.
std::vector<Case> shape_matrix() {
  // 128 and 160 end on block boundaries: 128 those of 64 and 128 rows or keys, 160 those of 80 rows.
  const std::pair<int64_t, int64_t> seqlens[] = {{1, 1}, {17, 17}, {128, 128}, {129, 129}, {160, 160},
                                                 {300, 300}, {300, 77}, {77, 300}, {1, 300}};
  std::vector<Case> cases;
  int rotation = 0;
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (int64_t head_dim : kBackwardHeadDims) {
      if (!backward_built(dtype, head_dim)) continue;
      for (bool causal : {false, true}) {
        for (auto [seqlen_q, seqlen_k] : seqlens) {
          const int64_t group = rotation % 2 ? 4 : 1;
          const int64_t batch = std::max(seqlen_q, seqlen_k) <= 129 ? 2 : 1;
          const int64_t padding = rotation % 5 == 2 ? 8 : 0;
          cases.push_back({dtype, head_dim, causal, seqlen_q, seqlen_k, 2, group, batch, padding});
          ++rotation;
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(ShapeMatrix, Sm90Backward, ::testing::ValuesIn(shape_matrix()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name_of(info.param); });

// What the build holds is what the backward accepts: the workspace query validates the call as
// the call would, so a (dtype, head_dim) without a kernel is refused as unsupported.
TEST(Sm90Backend, BuildReportsKernels) {
  if (!hopattn_backend_available(HOPATTN_BACKEND_SM90)) GTEST_SKIP() << "the backward's query needs device tensors";
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (int64_t head_dim : {64, 96, 128, 192, 256}) {
      std::mt19937 rng(1);
      DeviceTensor q(dtype, 1, 64, 2, head_dim, 0, &rng);
      hopattn_backward_options options = sm90_backward_options(false, false);
      size_t bytes = 0;
      const hopattn_status status = hopattn_backward_workspace_size(&q.desc, &q.desc, &q.desc, nullptr, &options, &bytes);
      if (backward_built(dtype, head_dim)) {
        EXPECT_EQ(status, HOPATTN_OK) << head_dim << ": " << hopattn_last_error();
        EXPECT_GT(bytes, 0u) << "the float32 dq accumulator lives in the workspace";
      } else {
        EXPECT_EQ(status, HOPATTN_ERROR_UNSUPPORTED) << head_dim;
      }
    }
  }
}

// A variable-length batch: per-sequence lengths, zero-length sequences on either side included,
// optionally seqused_k (dk and dv are 0 past it).
struct VarlenCase {
  hopattn_dtype dtype;
  int64_t head_dim;
  bool causal;
  std::vector<int32_t> seqlens_q, seqlens_k, seqused_k;  // seqused_k empty: not used
  int64_t heads_kv, group;
};

std::string name_of(const VarlenCase& c) {
  int64_t total_q = 0, total_k = 0;
  for (int32_t s : c.seqlens_q) total_q += s;
  for (int32_t s : c.seqlens_k) total_k += s;
  return std::string(c.dtype == HOPATTN_DTYPE_BFLOAT16 ? "bf16" : "fp16") + "_d" + std::to_string(c.head_dim) +
         (c.causal ? "_causal" : "_full") + "_n" + std::to_string(c.seqlens_q.size()) + "_hkv" +
         std::to_string(c.heads_kv) + "x" + std::to_string(c.group) + "_tq" + std::to_string(total_q) + "_tk" +
         std::to_string(total_k) + (c.seqused_k.empty() ? "" : "_seqused");
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

class Sm90BackwardVarlen : public Sm90Test, public ::testing::WithParamInterface<VarlenCase> {};

TEST_P(Sm90BackwardVarlen, MatchesFloat64Reference) {
  const VarlenCase c = GetParam();
  std::mt19937 rng(std::random_device{}());
  const std::vector<int32_t> cu_q = prefix_sums(c.seqlens_q), cu_k = prefix_sums(c.seqlens_k);
  BackwardSetup setup(c.dtype, 1, cu_q.back(), cu_k.back(), c.heads_kv, c.group, c.head_dim, 0, rng);
  ASSERT_TRUE(setup.allocated()) << "cudaMalloc failed";
  int32_t* cu_q_device = device_copy(cu_q);
  int32_t* cu_k_device = device_copy(cu_k);
  int32_t* seqused_device = c.seqused_k.empty() ? nullptr : device_copy(c.seqused_k);
  ASSERT_TRUE(cu_q_device && cu_k_device && (c.seqused_k.empty() || seqused_device));

  hopattn_varlen varlen = hopattn_default_varlen();
  varlen.batch = int64_t(c.seqlens_q.size());
  varlen.max_seqlen_q = std::max<int64_t>(1, *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end()));
  varlen.max_seqlen_k = std::max<int64_t>(1, *std::max_element(c.seqlens_k.begin(), c.seqlens_k.end()));
  hopattn_varlen host_varlen = varlen;
  host_varlen.cu_seqlens_q = cu_q.data();
  host_varlen.cu_seqlens_k = cu_k.data();
  host_varlen.seqused_k = c.seqused_k.empty() ? nullptr : c.seqused_k.data();
  varlen.cu_seqlens_q = cu_q_device;
  varlen.cu_seqlens_k = cu_k_device;
  varlen.seqused_k = seqused_device;

  ASSERT_EQ(setup.forward(c.causal, &varlen), HOPATTN_OK) << hopattn_last_error();
  const hopattn_backward_options options = sm90_backward_options(c.causal, false);
  ASSERT_EQ(setup.backward(options, &varlen), HOPATTN_OK) << hopattn_last_error();
  ASSERT_CUDA(cudaDeviceSynchronize());
  cudaFree(cu_q_device);
  cudaFree(cu_k_device);
  cudaFree(seqused_device);
  setup.expect_matches_reference(name_of(c), options, &host_varlen);
}

std::vector<VarlenCase> varlen_matrix() {
  const std::vector<int32_t> q_lengths = {0, 77, 300, 0, 17, 129};
  const std::vector<int32_t> k_lengths = {12, 0, 200, 0, 129, 128};
  const std::vector<int32_t> k_used = {5, 0, 200, 0, 64, 127};
  std::vector<VarlenCase> cases;
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (int64_t head_dim : kBackwardHeadDims) {
      if (!backward_built(dtype, head_dim)) continue;
      for (bool causal : {false, true}) {
        for (bool seqused : {false, true}) {
          // GQA (groups of 4) with each mask, and with seqused_k and without.
          cases.push_back({dtype, head_dim, causal, q_lengths, k_lengths, seqused ? k_used : std::vector<int32_t>{}, 2,
                           causal == seqused ? 1 : 4});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(VarlenMatrix, Sm90BackwardVarlen, ::testing::ValuesIn(varlen_matrix()),
                         [](const ::testing::TestParamInfo<VarlenCase>& info) { return name_of(info.param); });

// cu_seqlens and seqused_k that lie (negative, decreasing, past the totals, near INT32_MAX) cannot
// be checked without a device sync; the kernels clamp them, so the call must leave every byte
// outside dq, dk and dv as it was, deterministic or not (its semaphores must not hang either).
// Run under compute-sanitizer memcheck by scripts/device_check.sh as well.
TEST_F(Sm90Test, Sm90BackwardVarlenCorruptedCuSeqlensStayInsideTheTensors) {
  const hopattn_dtype dtype = HOPATTN_DTYPE_BFLOAT16;
  const int64_t head_dim = 128;
  if (!backward_built(dtype, head_dim)) GTEST_SKIP();
  std::mt19937 rng(11);
  const int64_t total_q = 1000, total_k = 900, heads = 4;
  DeviceTensor q(dtype, 1, total_q, heads, head_dim, 0, &rng);
  DeviceTensor k(dtype, 1, total_k, heads, head_dim, 0, &rng);
  DeviceTensor v(dtype, 1, total_k, heads, head_dim, 0, &rng);
  DeviceTensor o(dtype, 1, total_q, heads, head_dim, 0, &rng);
  DeviceTensor d_o(dtype, 1, total_q, heads, head_dim, 0, &rng);
  ASSERT_TRUE(q.device && k.device && v.device && o.device && d_o.device) << "cudaMalloc failed";
  std::vector<float> lse_host(size_t(heads * total_q));
  std::uniform_real_distribution<float> uniform(0.f, 8.f);
  for (float& x : lse_host) x = uniform(rng);
  float* lse = device_copy(lse_host);
  const std::vector<int32_t> cu_q = {0, -50, 5000, 300, 2147483647, 999, -2147483647 - 1};
  const std::vector<int32_t> cu_k = {7, 1000000, -3, 899, 10, 10, 2147483647};
  const std::vector<int32_t> seqused = {-5, 99999, 3, 10, 2147483647, 0};
  int32_t* cu_q_device = device_copy(cu_q);
  int32_t* cu_k_device = device_copy(cu_k);
  int32_t* seqused_device = device_copy(seqused);
  ASSERT_TRUE(lse && cu_q_device && cu_k_device && seqused_device);

  // dq, dk, dv inside larger buffers whose guard bytes must survive.
  constexpr size_t kGuard = 1 << 16;
  constexpr unsigned char kPattern = 0xa5;
  const size_t q_bytes = size_t(total_q * heads * head_dim) * 2, k_bytes = size_t(total_k * heads * head_dim) * 2;
  std::vector<unsigned char*> buffers(3, nullptr);
  const size_t sizes[3] = {q_bytes, k_bytes, k_bytes};
  for (int i = 0; i < 3; ++i) {
    ASSERT_CUDA(cudaMalloc(&buffers[i], sizes[i] + 2 * kGuard));
    ASSERT_CUDA(cudaMemset(buffers[i], kPattern, sizes[i] + 2 * kGuard));
  }
  hopattn_tensor dq{buffers[0] + kGuard, dtype, 1, total_q, heads, head_dim, total_q * heads * head_dim,
                    heads * head_dim, head_dim};
  hopattn_tensor dk{buffers[1] + kGuard, dtype, 1, total_k, heads, head_dim, total_k * heads * head_dim,
                    heads * head_dim, head_dim};
  hopattn_tensor dv = dk;
  dv.data = buffers[2] + kGuard;

  for (int use_seqused = 0; use_seqused < 2; ++use_seqused) {
    for (int causal = 0; causal < 2; ++causal) {
      for (int deterministic = 0; deterministic < 2; ++deterministic) {
        hopattn_varlen varlen = hopattn_default_varlen();
        varlen.batch = int64_t(seqused.size());
        varlen.cu_seqlens_q = cu_q_device;
        varlen.cu_seqlens_k = cu_k_device;
        varlen.seqused_k = use_seqused ? seqused_device : nullptr;
        varlen.max_seqlen_q = total_q;
        varlen.max_seqlen_k = total_k;
        const hopattn_backward_options options = sm90_backward_options(causal, deterministic);
        ASSERT_EQ(hopattn_backward_varlen(&q.desc, &k.desc, &v.desc, &o.desc, &d_o.desc, lse, &dq, &dk, &dv,
                                          &varlen, &options),
                  HOPATTN_OK)
            << hopattn_last_error();
        ASSERT_CUDA(cudaDeviceSynchronize());
      }
    }
  }
  const char* names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) {
    std::vector<unsigned char> host(sizes[i] + 2 * kGuard);
    ASSERT_CUDA(cudaMemcpy(host.data(), buffers[i], host.size(), cudaMemcpyDeviceToHost));
    bool intact = true;
    for (size_t j = 0; j < kGuard; ++j) intact &= host[j] == kPattern && host[kGuard + sizes[i] + j] == kPattern;
    EXPECT_TRUE(intact) << "a write landed outside " << names[i];
    cudaFree(buffers[i]);
  }
  for (void* p : {static_cast<void*>(lse), static_cast<void*>(cu_q_device), static_cast<void*>(cu_k_device),
                  static_cast<void*>(seqused_device)}) {
    cudaFree(p);
  }
}

// deterministic = 1: two runs give bitwise-equal gradients, one with the library's workspace and
// one with a caller's buffer full of garbage (the preprocess initialises what the kernels read),
// and both match the reference. GQA and the causal mask make several key blocks add into each
// query block, in an order that only the semaphores fix. Both designs of the kernel (head_dim 128
// and 256).
TEST_F(Sm90Test, Sm90BackwardDeterministicRunsAreBitwiseEqual) {
  const hopattn_dtype dtype = HOPATTN_DTYPE_BFLOAT16;
  for (int64_t head_dim : {128, 256}) {
    if (!backward_built(dtype, head_dim)) continue;
    for (bool causal : {false, true}) {
      std::mt19937 rng(3);
      BackwardSetup setup(dtype, 2, 700, 1000, 2, 2, head_dim, 0, rng);
      ASSERT_TRUE(setup.allocated()) << "cudaMalloc failed";
      ASSERT_EQ(setup.forward(causal, nullptr), HOPATTN_OK) << hopattn_last_error();
      hopattn_backward_options options = sm90_backward_options(causal, true);
      ASSERT_EQ(setup.backward(options, nullptr), HOPATTN_OK) << hopattn_last_error();
      ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<uint16_t> dq = setup.dq.download(), dk = setup.dk.download(), dv = setup.dv.download();

      size_t bytes = 0;
      ASSERT_EQ(hopattn_backward_workspace_size(&setup.q.desc, &setup.k.desc, &setup.v.desc, nullptr, &options, &bytes),
                HOPATTN_OK)
          << hopattn_last_error();
      void* workspace = nullptr;
      ASSERT_CUDA(cudaMalloc(&workspace, bytes));
      ASSERT_CUDA(cudaMemset(workspace, 0x5a, bytes));
      options.workspace = workspace;
      options.workspace_bytes = bytes;
      for (DeviceTensor* t : {&setup.dq, &setup.dk, &setup.dv}) ASSERT_CUDA(cudaMemset(t->device, 0xff, t->host.size() * 2));
      ASSERT_EQ(setup.backward(options, nullptr), HOPATTN_OK) << hopattn_last_error();
      ASSERT_CUDA(cudaDeviceSynchronize());
      cudaFree(workspace);
      EXPECT_TRUE(setup.dq.download() == dq) << "dq differs between deterministic runs";
      EXPECT_TRUE(setup.dk.download() == dk) << "dk differs between deterministic runs";
      EXPECT_TRUE(setup.dv.download() == dv) << "dv differs between deterministic runs";
      options.workspace = nullptr;
      options.workspace_bytes = 0;
      setup.expect_matches_reference((causal ? "deterministic_causal_d" : "deterministic_full_d") + std::to_string(head_dim),
                                     options, nullptr);
    }
  }
}

}  // namespace
