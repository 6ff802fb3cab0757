// The SM90 FP8 forward kernel (hopattn_forward_fp8) through the public C API. Inputs are fresh
// N(0, 1) values quantised on the host by the CPU backend (hopattn_quantize_fp8, with the Hadamard
// rotation for q and k); the reference is float64 attention of the dequantised codes, so what it
// measures is the kernel alone: P rounded to e4m3 for P V (a relative error of about 2^-3 / sqrt(12)
// per P, some 3.6% of O in RMS for N(0, 1) inputs) and O rounded to its 16-bit type. A kernel that
// mixes up keys, rows, heads or scales is off by 100% or more. Outputs are poisoned with NaN first;
// every element must be written. Skips, saying why, when no Hopper GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "api/problem_of.hpp"
#include "core/dtype.hpp"
#include "core/fp8_layout.hpp"
#include "core/problem.hpp"
#include "core/softmax_math.hpp"
#include "cpu/reference.hpp"
#include "hopattn/hopattn.h"
#include "sm90/kernel/tile_size.hpp"

namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

// One scale layout: what hopattn_quantize_fp8 is asked for (block_rows for BLOCK only).
struct Scaling {
  hopattn_fp8_scaling mode;
  int64_t block_rows;
};

std::string name_of(const Scaling& s) {
  return s.mode == HOPATTN_FP8_SCALE_TENSOR ? "T" : s.mode == HOPATTN_FP8_SCALE_HEAD ? "H" : "B" + std::to_string(s.block_rows);
}

struct Fp8Case {
  hopattn_dtype out_dtype;
  int64_t head_dim;
  bool causal;
  int64_t seqlen_q, seqlen_k;
  int64_t heads_kv, group;  // heads_q = heads_kv * group
  int64_t batch;
  int64_t head_padding;  // extra elements between heads (a multiple of 16: TMA's alignment)
  Scaling q_scaling, k_scaling, v_scaling;
};

std::string name_of(const Fp8Case& c) {
  return std::string(c.out_dtype == HOPATTN_DTYPE_BFLOAT16 ? "bf16" : "fp16") + "_d" + std::to_string(c.head_dim) +
         (c.causal ? "_causal" : "_full") + "_sq" + std::to_string(c.seqlen_q) + "_sk" + std::to_string(c.seqlen_k) +
         "_hkv" + std::to_string(c.heads_kv) + "x" + std::to_string(c.group) + "_b" + std::to_string(c.batch) +
         (c.head_padding ? "_strided" : "") + "_q" + name_of(c.q_scaling) + "k" + name_of(c.k_scaling) + "v" +
         name_of(c.v_scaling);
}

void PrintTo(const Fp8Case& c, std::ostream* os) { *os << name_of(c); }

class Sm90Fp8Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hopattn_backend_available(HOPATTN_BACKEND_SM90)) {
      GTEST_SKIP() << "no Hopper (sm_90) GPU visible to this process; sm90 tests need one";
    }
  }
};

// A quantised tensor: N(0, 1) values (times `outlier` for a 0.1% of them when asked), quantised on the
// host into e4m3 codes with `padding` unused bytes after each head vector, its scales, and device
// copies of both. `values()` dequantises the codes, the reference's input.
struct QuantisedTensor {
  hopattn_tensor desc{};  // device codes
  hopattn_fp8_scales scales{};  // device scales
  std::vector<uint8_t> codes;
  std::vector<float> host_scales;
  hopattn::Fp8Scales layout;
  void* device_codes = nullptr;
  float* device_scales = nullptr;

  QuantisedTensor(int64_t b, int64_t s, int64_t h, int64_t d, int64_t padding, Scaling scaling, bool hadamard,
                  uint64_t seed, std::mt19937& rng) {
    const int64_t head_stride = d + padding;
    std::vector<uint16_t> input(size_t(b * s * h * head_stride));
    std::normal_distribution<float> normal;
    for (auto& bits : input) bits = hopattn::from_float<hopattn::bfloat16>(normal(rng)).bits;
    const hopattn_tensor x{input.data(), HOPATTN_DTYPE_BFLOAT16, b, s, h, d, s * h * head_stride, h * head_stride,
                           head_stride};
    codes.assign(input.size(), 0);
    hopattn_tensor out = x;
    out.data = codes.data();
    out.dtype = HOPATTN_DTYPE_FLOAT8_E4M3;
    layout.scaling = static_cast<hopattn::Fp8Scaling>(scaling.mode);
    layout.block_rows = scaling.block_rows;
    layout.heads = h;
    layout.blocks_per_head = scaling.mode == HOPATTN_FP8_SCALE_BLOCK ? (s + scaling.block_rows - 1) / scaling.block_rows : 1;
    const int64_t count = scaling.mode == HOPATTN_FP8_SCALE_TENSOR ? 1 : b * h * layout.blocks_per_head;
    host_scales.assign(size_t(count), 0.f);
    hopattn_quantize_options options = hopattn_default_quantize_options();
    options.scaling = scaling.mode;
    options.block_rows = scaling.block_rows;
    options.hadamard = hadamard;
    options.seed = seed;
    options.backend = HOPATTN_BACKEND_CPU;
    quantised = hopattn_quantize_fp8(&x, &out, host_scales.data(), &options) == HOPATTN_OK;
    if (!quantised) error = hopattn_last_error();
    if (cudaMalloc(&device_codes, codes.size()) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&device_scales), host_scales.size() * 4) != cudaSuccess) {
      return;
    }
    upload();
    desc = out;
    desc.data = device_codes;
    scales = {device_scales, scaling.mode, scaling.block_rows};
  }
  ~QuantisedTensor() {
    cudaFree(device_codes);
    cudaFree(device_scales);
  }
  QuantisedTensor(const QuantisedTensor&) = delete;
  QuantisedTensor& operator=(const QuantisedTensor&) = delete;

  void upload() {
    cudaMemcpy(device_codes, codes.data(), codes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(device_scales, host_scales.data(), host_scales.size() * 4, cudaMemcpyHostToDevice);
  }
  bool ok() const { return quantised && device_codes && device_scales; }

  // The dequantised values as a dense float32 (b, s, h, d) tensor.
  std::vector<float> values() const {
    std::vector<float> out(size_t(desc.batch * desc.seqlen * desc.heads * desc.head_dim));
    for (int64_t b = 0; b < desc.batch; ++b) {
      for (int64_t s = 0; s < desc.seqlen; ++s) {
        for (int64_t h = 0; h < desc.heads; ++h) {
          const float scale = host_scales[size_t(layout.index(b, h, s))];
          for (int64_t i = 0; i < desc.head_dim; ++i) {
            const uint8_t code = codes[size_t(b * desc.batch_stride + s * desc.seq_stride + h * desc.head_stride + i)];
            out[size_t(((b * desc.seqlen + s) * desc.heads + h) * desc.head_dim + i)] =
                hopattn::to_float(hopattn::float8_e4m3{code}) * scale;
          }
        }
      }
    }
    return out;
  }

  bool quantised = false;
  std::string error;
};

// A device copy of a QuantisedTensor's codes in HOPATTN_FP8_LAYOUT_V_TRANSPOSED, its pad rows
// (seqlen up to the pitch) 1.0 rather than the quantiser's zeros: finite, as the layout asks, and
// of weight zero, so that the output must not change.
struct TransposedCodes {
  hopattn_tensor desc{};
  void* device = nullptr;

  explicit TransposedCodes(const QuantisedTensor& x) {
    const hopattn_tensor& t = x.desc;
    const hopattn::VTransposedLayout layout = hopattn::VTransposedLayout::of(t.seqlen, t.heads, t.head_dim);
    std::vector<uint8_t> codes(size_t(layout.elements(t.batch)), 0x38);  // e4m3 1.0
    for (int64_t b = 0; b < t.batch; ++b) {
      for (int64_t s = 0; s < t.seqlen; ++s) {
        for (int64_t h = 0; h < t.heads; ++h) {
          for (int64_t i = 0; i < t.head_dim; ++i) {
            codes[size_t(layout.offset(b, s, h, i))] =
                x.codes[size_t(b * t.batch_stride + s * t.seq_stride + h * t.head_stride + i)];
          }
        }
      }
    }
    if (cudaMalloc(&device, codes.size()) != cudaSuccess) {
      device = nullptr;
      return;
    }
    cudaMemcpy(device, codes.data(), codes.size(), cudaMemcpyHostToDevice);
    desc = {device, HOPATTN_DTYPE_FLOAT8_E4M3, t.batch, t.seqlen, t.heads, t.head_dim, layout.batch_stride(), 1,
            layout.head_stride()};
  }
  ~TransposedCodes() { cudaFree(device); }
  TransposedCodes(const TransposedCodes&) = delete;
  TransposedCodes& operator=(const TransposedCodes&) = delete;
};

hopattn_tensor dense_float32(std::vector<float>& data, const hopattn_tensor& like) {
  return {data.data(), HOPATTN_DTYPE_FLOAT32, like.batch, like.seqlen, like.heads, like.head_dim,
          like.seqlen * like.heads * like.head_dim, like.heads * like.head_dim, like.head_dim};
}

// Float64 attention of the dequantised inputs (float32 accumulation on the CPU backend for the longest,
// whose naive float64 product would take minutes).
void reference(const Fp8Case& c, const QuantisedTensor& q, const QuantisedTensor& k, const QuantisedTensor& v,
               std::vector<double>& out, std::vector<double>& lse) {
  std::vector<float> q32 = q.values(), k32 = k.values(), v32 = v.values();
  const hopattn_tensor qh = dense_float32(q32, q.desc), kh = dense_float32(k32, k.desc), vh = dense_float32(v32, v.desc);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = c.causal;
  options.backend = HOPATTN_BACKEND_CPU;
  if (c.seqlen_q * c.seqlen_k * c.head_dim < (int64_t(1) << 30)) {
    hopattn::reference_forward(hopattn::problem_of(qh, kh, vh, qh, nullptr, options), out, lse);
    return;
  }
  std::vector<float> o32(q32.size()), lse32(size_t(c.batch * qh.heads * c.seqlen_q));
  hopattn_tensor oh = qh;
  oh.data = o32.data();
  ASSERT_EQ(hopattn_forward(&qh, &kh, &vh, &oh, lse32.data(), &options), HOPATTN_OK) << hopattn_last_error();
  out.assign(o32.begin(), o32.end());
  lse.assign(lse32.begin(), lse32.end());
}

float to_float(hopattn_dtype dtype, uint16_t bits) {
  return dtype == HOPATTN_DTYPE_BFLOAT16 ? hopattn::to_float(hopattn::bfloat16{bits})
                                         : hopattn::to_float(hopattn::float16{bits});
}

// The tile (rows, keys) an FP8 problem runs on, V in rows (the kernel transposes it) or given
// transposed, as the launch picks it (tile_size.hpp).
template <int kHeadDim, bool kTransposesV>
std::pair<int, int> fp8_tile(bool varlen, bool causal, int64_t seqlen_q, int64_t seqlen_k) {
  using Long = hopattn::sm90::TileSize<kHeadDim, 1, kTransposesV>;
  using Short = hopattn::sm90::ShortTileSize<kHeadDim, 1, kTransposesV>;
  if constexpr (Short::kExists) {
    if (hopattn::sm90::takes_short_tile<Long, Short>(varlen, causal, seqlen_q, seqlen_k)) {
      return {Short::kBlockM, Short::kBlockN};
    }
  }
  return {Long::kBlockM, Long::kBlockN};
}

// Whether both V layouts run the same tile with the same exponent scheme (kernel_form.hpp): then
// they compute the same products in the same order, and their outputs agree bit for bit. (Where
// they do not, each is checked against the reference.)
bool layouts_compute_alike(int64_t head_dim, bool varlen, bool causal, int64_t seqlen_q, int64_t seqlen_k) {
  const auto alike = [&](auto head_dim_constant) {
    constexpr int kHeadDim = decltype(head_dim_constant)::value;
    using hopattn::sm90::kernel_uses_row_offsets;
    const std::pair<int, int> rows = fp8_tile<kHeadDim, true>(varlen, causal, seqlen_q, seqlen_k);
    const std::pair<int, int> transposed = fp8_tile<kHeadDim, false>(varlen, causal, seqlen_q, seqlen_k);
    return rows == transposed &&
           kernel_uses_row_offsets(1, kHeadDim, rows.second, true) ==
               kernel_uses_row_offsets(1, kHeadDim, transposed.second, false);
  };
  switch (head_dim) {
    case 64: return alike(std::integral_constant<int, 64>{});
    case 128: return alike(std::integral_constant<int, 128>{});
    case 256: return alike(std::integral_constant<int, 256>{});
    default: return false;
  }
}

// The tests below compare the two V layouts' bits only where layouts_compute_alike: that must hold
// somewhere in their cases, or those comparisons would never run (head_dim 64, and head_dim 128's
// 128-key tiles), and not where the kernels differ (head_dim 128's 192-key tile and varlen
// batches, head_dim 256's exponent schemes). Needs no GPU.
TEST(Sm90Fp8LayoutRule, TheBitsAreComparedWhereTheLayoutsComputeAlike) {
  EXPECT_TRUE(layouts_compute_alike(64, false, true, 1000, 1000));
  EXPECT_TRUE(layouts_compute_alike(64, true, false, 0, 0));
  EXPECT_TRUE(layouts_compute_alike(128, false, false, 1000, 1000));
  EXPECT_FALSE(layouts_compute_alike(128, false, false, 4096, 4096));
  EXPECT_FALSE(layouts_compute_alike(128, true, false, 0, 0));
  EXPECT_FALSE(layouts_compute_alike(256, false, false, 1000, 1000));
}

// Runs the SM90 FP8 forward; out and lse come back as the host copies of o and lse. With
// `v_transposed`, V is read from it (the same codes in HOPATTN_FP8_LAYOUT_V_TRANSPOSED).
void run_fp8(const Fp8Case& c, const QuantisedTensor& q, const QuantisedTensor& k, const QuantisedTensor& v,
             std::vector<uint16_t>& out, std::vector<float>& lse, const TransposedCodes* v_transposed = nullptr) {
  const int64_t heads_q = c.heads_kv * c.group;
  out.assign(size_t(c.batch * c.seqlen_q * heads_q * c.head_dim), 0);
  lse.assign(size_t(c.batch * heads_q * c.seqlen_q), 0.f);
  void* o_device = nullptr;
  float* lse_device = nullptr;
  ASSERT_CUDA(cudaMalloc(&o_device, out.size() * 2));
  ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&lse_device), lse.size() * 4));
  ASSERT_CUDA(cudaMemset(o_device, 0xff, out.size() * 2));      // NaN in bf16 and fp16
  ASSERT_CUDA(cudaMemset(lse_device, 0xff, lse.size() * 4));    // NaN in float32
  hopattn_tensor o{o_device, c.out_dtype, c.batch, c.seqlen_q, heads_q, c.head_dim,
                   c.seqlen_q * heads_q * c.head_dim, heads_q * c.head_dim, c.head_dim};
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = c.causal;
  options.backend = HOPATTN_BACKEND_SM90;
  if (v_transposed != nullptr) options.fp8_v_layout = HOPATTN_FP8_LAYOUT_V_TRANSPOSED;
  const hopattn_tensor& v_desc = v_transposed != nullptr ? v_transposed->desc : v.desc;
  ASSERT_EQ(hopattn_forward_fp8(&q.desc, &q.scales, &k.desc, &k.scales, &v_desc, &v.scales, &o, lse_device, &options),
            HOPATTN_OK)
      << hopattn_last_error();
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_CUDA(cudaMemcpy(out.data(), o_device, out.size() * 2, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(lse.data(), lse_device, lse.size() * 4, cudaMemcpyDeviceToHost));
  cudaFree(o_device);
  cudaFree(lse_device);
}

class Sm90Fp8Forward : public Sm90Fp8Test, public ::testing::WithParamInterface<Fp8Case> {};

TEST_P(Sm90Fp8Forward, MatchesFloat64ReferenceOfTheDequantisedInputs) {
  const Fp8Case c = GetParam();
  std::mt19937 rng(std::random_device{}());  // fresh inputs every run
  const uint64_t seed = rng();
  const int64_t heads_q = c.heads_kv * c.group;
  QuantisedTensor q(c.batch, c.seqlen_q, heads_q, c.head_dim, c.head_padding, c.q_scaling, true, seed, rng);
  QuantisedTensor k(c.batch, c.seqlen_k, c.heads_kv, c.head_dim, c.head_padding, c.k_scaling, true, seed, rng);
  QuantisedTensor v(c.batch, c.seqlen_k, c.heads_kv, c.head_dim, c.head_padding, c.v_scaling, false, 0, rng);
  ASSERT_TRUE(q.ok() && k.ok() && v.ok()) << q.error << k.error << v.error;

  std::vector<double> ref_out, ref_lse;
  reference(c, q, k, v, ref_out, ref_lse);
  const TransposedCodes v_transposed(v);
  ASSERT_NE(v_transposed.device, nullptr) << "cudaMalloc failed";
  std::vector<uint16_t> out, out_vt;
  std::vector<float> lse, lse_vt;
  run_fp8(c, q, k, v, out, lse);
  if (HasFatalFailure()) return;
  run_fp8(c, q, k, v, out_vt, lse_vt, &v_transposed);
  if (HasFatalFailure()) return;

  // Each layout's run against the reference.
  for (const bool transposed : {false, true}) {
    const std::vector<uint16_t>& run_out = transposed ? out_vt : out;
    const std::vector<float>& run_lse = transposed ? lse_vt : lse;
    const char* label = transposed ? "V transposed" : "V in rows";
    ASSERT_EQ(ref_out.size(), run_out.size());
    double err2 = 0, ref2 = 0, max_abs = 0;
    for (size_t i = 0; i < run_out.size(); ++i) {
      const double got = to_float(c.out_dtype, run_out[i]);
      ASSERT_TRUE(std::isfinite(got)) << label << ": O[" << i << "] = " << got << " (unwritten or NaN)";
      err2 += (got - ref_out[i]) * (got - ref_out[i]);
      ref2 += ref_out[i] * ref_out[i];
      max_abs = std::max(max_abs, std::abs(got - ref_out[i]));
    }
    double lse_max_error = 0;
    for (size_t i = 0; i < run_lse.size(); ++i) {
      if (std::isinf(ref_lse[i])) {
        ASSERT_TRUE(std::isinf(run_lse[i]) && run_lse[i] < 0)
            << label << ": LSE[" << i << "] = " << run_lse[i] << ", expected -inf";
        continue;
      }
      ASSERT_TRUE(std::isfinite(run_lse[i])) << label << ": LSE[" << i << "] = " << run_lse[i] << " (unwritten or NaN)";
      lse_max_error = std::max(lse_max_error, std::abs(run_lse[i] - ref_lse[i]));
    }
    const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    const double rmse = std::sqrt(err2 / double(run_out.size()));
    ::testing::Test::RecordProperty(transposed ? "relative_error_v_transposed" : "relative_error", std::to_string(rel));
    // P in e4m3 gives 1.4-2.5% on the H200 (a single key per row, seqlen 1, none). The LSE comes from
    // float32 P, but S from FP8 WGMMAs, whose accumulation keeps fewer bits than float32 (DeepSeek-V3
    // measured about 14 on Hopper): scores of rows that see one key are off by up to ~1e-3 (measured
    // 1.1e-3 at most), a key masked by mistake by far more.
    EXPECT_LT(rel, 0.06) << label << ": rmse " << rmse << ", max abs error " << max_abs;
    EXPECT_LT(lse_max_error, 4e-3) << label << ": relative error " << rel;
    std::printf("[ sm90 fp8 ] %-72s %-12s rel %.3e  rmse %.3e  lse max err %.3e\n", name_of(c).c_str(), label, rel,
                rmse, lse_max_error);
  }
  if (layouts_compute_alike(c.head_dim, false, c.causal, c.seqlen_q, c.seqlen_k)) {
    EXPECT_EQ(std::memcmp(out_vt.data(), out.data(), out.size() * 2), 0) << "O differs with V transposed";
    EXPECT_EQ(std::memcmp(lse_vt.data(), lse.data(), lse.size() * 4), 0) << "LSE differs with V transposed";
  }
}

// head_dim x output dtype x causal x seqlen, with GQA, strides, seqlen_q != seqlen_k and every scale
// layout the kernel takes rotated across the matrix.
std::vector<Fp8Case> fp8_matrix() {
  const int64_t seqlens[] = {1, 17, 128, 129, 1000, 4096};
  const int64_t groups[] = {1, 2, 8};
  const Scaling q_scalings[] = {{HOPATTN_FP8_SCALE_BLOCK, 128}, {HOPATTN_FP8_SCALE_BLOCK, 64},
                                {HOPATTN_FP8_SCALE_HEAD, 0}, {HOPATTN_FP8_SCALE_TENSOR, 0},
                                {HOPATTN_FP8_SCALE_BLOCK, 7}};
  const Scaling k_scalings[] = {{HOPATTN_FP8_SCALE_BLOCK, 128}, {HOPATTN_FP8_SCALE_HEAD, 0},
                                {HOPATTN_FP8_SCALE_BLOCK, 256}, {HOPATTN_FP8_SCALE_TENSOR, 0}};
  const Scaling v_scalings[] = {{HOPATTN_FP8_SCALE_HEAD, 0}, {HOPATTN_FP8_SCALE_TENSOR, 0}};
  std::vector<Fp8Case> cases;
  int rotation = 0;
  for (hopattn_dtype dtype : {HOPATTN_DTYPE_BFLOAT16, HOPATTN_DTYPE_FLOAT16}) {
    for (int64_t head_dim : {64, 128, 256}) {
      for (bool causal : {false, true}) {
        for (int64_t seqlen : seqlens) {
          const bool long_sequence = seqlen >= 4096;
          Fp8Case c{};
          c.out_dtype = dtype;
          c.head_dim = head_dim;
          c.causal = causal;
          c.seqlen_q = c.seqlen_k = seqlen;
          c.group = long_sequence ? 1 : groups[rotation % 3];
          c.heads_kv = long_sequence ? 1 : (c.group == 8 ? 1 : 2);
          c.batch = seqlen <= 129 ? 2 : 1;
          c.head_padding = (rotation % 2) ? 16 : 0;
          c.q_scaling = q_scalings[rotation % 5];
          c.k_scaling = k_scalings[rotation % 4];
          c.v_scaling = v_scalings[rotation % 2];
          cases.push_back(c);
          ++rotation;
        }
      }
    }
  }
  // seqlen_q != seqlen_k both ways: with the causal mask the first rows of 300 x 77 see no key.
  for (int64_t head_dim : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      const Scaling block{HOPATTN_FP8_SCALE_BLOCK, 128}, head{HOPATTN_FP8_SCALE_HEAD, 0};
      cases.push_back({HOPATTN_DTYPE_BFLOAT16, head_dim, causal, 300, 77, 2, 2, 1, 0, block, block, head});
      cases.push_back({HOPATTN_DTYPE_FLOAT16, head_dim, causal, 77, 300, 1, 8, 2, 16, block, block, head});
      cases.push_back({HOPATTN_DTYPE_BFLOAT16, head_dim, causal, 1000, 129, 1, 2, 1, 0, head, block, head});
      // Long key rows (171-256 key blocks): a row sum that loses bits per block drifts with the
      // length, which the LSE shows (performance log, 2026-12-05 twelfth: 7e-3 at 32k).
      cases.push_back({HOPATTN_DTYPE_BFLOAT16, head_dim, causal, 128, 32768, 1, 1, 1, 0, block, block, head});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fp8Matrix, Sm90Fp8Forward, ::testing::ValuesIn(fp8_matrix()),
                         [](const ::testing::TestParamInfo<Fp8Case>& info) { return name_of(info.param); });

// A NaN scale (a block that held NaN) makes NaN exactly in the rows that see its block; a zero scale,
// which validation cannot see on this backend, is NaN too, never a silently wrong finite row.
TEST_F(Sm90Fp8Test, NonFiniteAndZeroScalesMakeNaNInTheRowsThatSeeThem) {
  std::mt19937 rng(11);
  const int64_t seqlen = 384, heads = 2, head_dim = 128;
  const Scaling block{HOPATTN_FP8_SCALE_BLOCK, 128}, head{HOPATTN_FP8_SCALE_HEAD, 0};
  QuantisedTensor q(1, seqlen, heads, head_dim, 0, block, true, 5, rng);
  QuantisedTensor k(1, seqlen, heads, head_dim, 0, block, true, 5, rng);
  QuantisedTensor v(1, seqlen, heads, head_dim, 0, head, false, 0, rng);
  ASSERT_TRUE(q.ok() && k.ok() && v.ok());
  k.host_scales[2] = std::numeric_limits<float>::quiet_NaN();  // head 0, keys 256-383
  q.host_scales[1 * 3 + 1] = 0.f;                              // head 1, queries 128-255
  k.upload();
  q.upload();
  const Fp8Case c{HOPATTN_DTYPE_BFLOAT16, head_dim, true, seqlen, seqlen, heads, 1, 1, 0, block, block, head};
  std::vector<uint16_t> out;
  std::vector<float> lse;
  run_fp8(c, q, k, v, out, lse);
  if (HasFatalFailure()) return;
  for (int64_t row = 0; row < seqlen; ++row) {
    for (int64_t h = 0; h < heads; ++h) {
      // Causal: row sees keys 0..row, so head 0's rows from 256 see the NaN block.
      const bool nan_expected = (h == 0 && row >= 256) || (h == 1 && row >= 128 && row < 256);
      const float o0 = to_float(c.out_dtype, out[size_t((row * heads + h) * head_dim)]);
      const float l = lse[size_t(h * seqlen + row)];
      EXPECT_EQ(std::isnan(o0), nan_expected) << "head " << h << " row " << row << ": O = " << o0;
      EXPECT_EQ(std::isnan(l), nan_expected) << "head " << h << " row " << row << ": LSE = " << l;
    }
  }
}

// Q and K scales 100 and 1e4 times the quantiser's (N(0, 1) inputs): scaled row maxima of some 4e4
// and 4e8, past fp8_scores_hold's 1024, where the tensor cores' FP8 scores are too coarse (at 4e8 a
// row's LSE was off by a relative 6e-4 at head_dim 128 before these rows were recomputed): every
// row is computed again after the key loop from the codes and their scales (exact_rows.cuh), at
// head_dim 64 beside the row offsets, at 128 and 256 beside the vote. With grouped heads,
// seqlen_q != seqlen_k and V in rows or given transposed (the same bits where they compute alike).
TEST_F(Sm90Fp8Test, HugeScalesMatchTheReferenceThroughTheExactPath) {
  std::mt19937 rng(23);
  const Scaling block{HOPATTN_FP8_SCALE_BLOCK, 128}, head{HOPATTN_FP8_SCALE_HEAD, 0};
  for (float scale_factor : {100.f, 1e4f}) {
    for (int64_t head_dim : {64, 128, 256}) {
      for (bool causal : {false, true}) {
        SCOPED_TRACE("head_dim " + std::to_string(head_dim) + (causal ? " causal" : "") + " scales x" +
                     std::to_string(scale_factor));
        const Fp8Case c{HOPATTN_DTYPE_BFLOAT16, head_dim, causal, 300, 400, 2, 2, 1, 0, block, block, head};
        QuantisedTensor q(1, 300, 4, head_dim, 0, block, true, 3, rng);
        QuantisedTensor k(1, 400, 2, head_dim, 0, block, true, 3, rng);
        QuantisedTensor v(1, 400, 2, head_dim, 0, head, false, 0, rng);
        ASSERT_TRUE(q.ok() && k.ok() && v.ok());
        for (float& scale : q.host_scales) scale *= scale_factor;
        for (float& scale : k.host_scales) scale *= scale_factor;
        q.upload();
        k.upload();
        std::vector<double> ref_out, ref_lse;
        reference(c, q, k, v, ref_out, ref_lse);
        const TransposedCodes v_transposed(v);
        ASSERT_NE(v_transposed.device, nullptr) << "cudaMalloc failed";
        std::vector<uint16_t> out, out_vt;
        std::vector<float> lse, lse_vt;
        run_fp8(c, q, k, v, out, lse);
        if (HasFatalFailure()) return;
        run_fp8(c, q, k, v, out_vt, lse_vt, &v_transposed);
        if (HasFatalFailure()) return;
        for (const bool transposed : {false, true}) {
          SCOPED_TRACE(transposed ? "V transposed" : "V in rows");
          const std::vector<uint16_t>& run_out = transposed ? out_vt : out;
          const std::vector<float>& run_lse = transposed ? lse_vt : lse;
          double max_abs = 0, lse_relative = 0, smallest_lse = INFINITY;
          for (size_t i = 0; i < run_out.size(); ++i) {
            max_abs = std::max(max_abs, std::abs(to_float(c.out_dtype, run_out[i]) - ref_out[i]));
          }
          for (size_t i = 0; i < run_lse.size(); ++i) {
            lse_relative =
                std::max(lse_relative, std::abs(run_lse[i] - ref_lse[i]) / std::max(1.0, std::abs(ref_lse[i])));
            smallest_lse = std::min(smallest_lse, std::abs(ref_lse[i]));
          }
          EXPECT_LT(max_abs, 2e-2);  // NaN fails it
          EXPECT_LT(lse_relative, 1e-5);
          // Every row's scores are that large: its LSE (natural log) times log2(e) past the limit.
          EXPECT_GT(smallest_lse * hopattn::kLog2e, 1.5 * hopattn::kFp8ScaledMaxLimit);
        }
        if (layouts_compute_alike(head_dim, false, causal, c.seqlen_q, c.seqlen_k)) {
          EXPECT_EQ(std::memcmp(out_vt.data(), out.data(), out.size() * 2), 0) << "O differs with V transposed";
          EXPECT_EQ(std::memcmp(lse_vt.data(), lse.data(), lse.size() * 4), 0) << "LSE differs with V transposed";
        }
      }
    }
  }
}

// hopattn_forward_fp8_varlen: packed sequences (one without queries, one without keys, single
// queries and keys), GQA, both masks, every head_dim; against the CPU backend on the same codes and
// scales (its float32 P against the kernel's e4m3 P: the matrix's tolerance; every row's LSE within
// 4e-3, which a chunk descaled by another K block would likely exceed). K scales per head and per
// block; Q per block of 128 packed rows, straddling sequences; seqused_k in the third packing.
TEST_F(Sm90Fp8Test, VarlenMatchesTheCpuBackendOnTheSamePackedCodes) {
  // Two packings. The first's sequences start off the kernel's K scale chunks (keys at 129, 400,
  // 700), so their key blocks start before them (mask.cuh's key_shift); the second's start one key
  // short of a chunk (127, 255) or on one (128), one sequence holds a single key, and K's scale
  // blocks are 256 rows. The third is the second with seqused_k: the unused keys of a sequence
  // (those past it, in its own rows) are not attended.
  struct Packing {
    std::vector<int32_t> cu_q, cu_k, seqused_k;  // seqused_k empty: not used
    int64_t max_q, max_k, k_block_rows;
  };
  const Packing packings[] = {{{0, 0, 300, 301, 557, 999}, {0, 129, 400, 400, 700, 1033}, {}, 442, 333, 128},
                              {{0, 50, 51, 300, 420}, {0, 127, 128, 255, 700}, {}, 249, 445, 256},
                              {{0, 50, 51, 300, 420}, {0, 127, 128, 255, 700}, {100, 1, 0, 300}, 249, 445, 256}};
  const int64_t heads_kv = 2, heads_q = 4;
  std::mt19937 rng(std::random_device{}());
  const Scaling head{HOPATTN_FP8_SCALE_HEAD, 0};
  for (const Packing& packing : packings) {
    const std::vector<int32_t>& cu_q = packing.cu_q;
    const std::vector<int32_t>& cu_k = packing.cu_k;
    const int64_t total_q = cu_q.back(), total_k = cu_k.back();
    const Scaling block{HOPATTN_FP8_SCALE_BLOCK, 128}, k_block{HOPATTN_FP8_SCALE_BLOCK, packing.k_block_rows};
    const std::vector<int32_t>& seqused = packing.seqused_k;
    int32_t* cu_device = nullptr;  // cu_q, cu_k, then seqused_k
    ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&cu_device), (2 * cu_q.size() + seqused.size()) * sizeof(int32_t)));
    ASSERT_CUDA(cudaMemcpy(cu_device, cu_q.data(), cu_q.size() * 4, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(cu_device + cu_q.size(), cu_k.data(), cu_k.size() * 4, cudaMemcpyHostToDevice));
    if (!seqused.empty()) {
      ASSERT_CUDA(cudaMemcpy(cu_device + 2 * cu_q.size(), seqused.data(), seqused.size() * 4, cudaMemcpyHostToDevice));
    }
    for (const int64_t head_dim : {64, 128, 256}) {
      for (const bool causal : {false, true}) {
        for (const Scaling& k_scaling : {head, k_block}) {
          const bool k_blocks = k_scaling.mode == HOPATTN_FP8_SCALE_BLOCK;
          SCOPED_TRACE(std::to_string(cu_q.size() - 1) + " sequences, head_dim " + std::to_string(head_dim) +
                       (causal ? " causal" : " full") + (k_blocks ? ", K block scales" : ", K head scales") +
                       (seqused.empty() ? "" : ", seqused_k"));
          const uint64_t seed = rng();
          QuantisedTensor q(1, total_q, heads_q, head_dim, 0, block, true, seed, rng);
          QuantisedTensor k(1, total_k, heads_kv, head_dim, 0, k_scaling, true, seed, rng);
          QuantisedTensor v(1, total_k, heads_kv, head_dim, 0, head, false, 0, rng);
          ASSERT_TRUE(q.ok() && k.ok() && v.ok()) << q.error << k.error << v.error;
          hopattn_varlen varlen = hopattn_default_varlen();
          varlen.batch = int64_t(cu_q.size()) - 1;
          varlen.max_seqlen_q = packing.max_q;
          varlen.max_seqlen_k = packing.max_k;
          hopattn_forward_options options = hopattn_default_forward_options();
          options.causal = causal;

          // The CPU backend on host copies of the same codes and scales.
          const auto host = [](const QuantisedTensor& x, hopattn_tensor& t, hopattn_fp8_scales& s) {
            t = x.desc;
            t.data = const_cast<uint8_t*>(x.codes.data());
            s = x.scales;
            s.data = x.host_scales.data();
          };
          hopattn_tensor hq, hk, hv;
          hopattn_fp8_scales sq, sk, sv;
          host(q, hq, sq);
          host(k, hk, sk);
          host(v, hv, sv);
          std::vector<uint16_t> cpu_out(size_t(total_q * heads_q * head_dim));
          std::vector<float> cpu_lse(size_t(heads_q * total_q));
          hopattn_tensor cpu_o{cpu_out.data(), HOPATTN_DTYPE_BFLOAT16, 1, total_q, heads_q, head_dim,
                               total_q * heads_q * head_dim, heads_q * head_dim, head_dim};
          varlen.cu_seqlens_q = cu_q.data();
          varlen.cu_seqlens_k = cu_k.data();
          varlen.seqused_k = seqused.empty() ? nullptr : seqused.data();
          options.backend = HOPATTN_BACKEND_CPU;
          ASSERT_EQ(hopattn_forward_fp8_varlen(&hq, &sq, &hk, &sk, &hv, &sv, &cpu_o, cpu_lse.data(), &varlen, &options),
                    HOPATTN_OK)
              << hopattn_last_error();

          void* o_device = nullptr;
          float* lse_device = nullptr;
          ASSERT_CUDA(cudaMalloc(&o_device, cpu_out.size() * 2));
          ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&lse_device), cpu_lse.size() * 4));
          hopattn_tensor o = cpu_o;
          o.data = o_device;
          varlen.cu_seqlens_q = cu_device;
          varlen.cu_seqlens_k = cu_device + cu_q.size();
          varlen.seqused_k = seqused.empty() ? nullptr : cu_device + 2 * cu_q.size();
          options.backend = HOPATTN_BACKEND_SM90;
          // One SM90 run on V's codes in `layout`, into poisoned outputs, copied back.
          const auto run_sm90 = [&](const hopattn_tensor& v_codes, hopattn_fp8_layout layout,
                                    std::vector<uint16_t>& out, std::vector<float>& lse) {
            ASSERT_CUDA(cudaMemset(o_device, 0xff, cpu_out.size() * 2));  // NaN
            ASSERT_CUDA(cudaMemset(lse_device, 0xff, cpu_lse.size() * 4));
            options.fp8_v_layout = layout;
            ASSERT_EQ(hopattn_forward_fp8_varlen(&q.desc, &q.scales, &k.desc, &k.scales, &v_codes, &v.scales, &o,
                                                 lse_device, &varlen, &options),
                      HOPATTN_OK)
                << hopattn_last_error();
            ASSERT_CUDA(cudaDeviceSynchronize());
            out.resize(cpu_out.size());
            lse.resize(cpu_lse.size());
            ASSERT_CUDA(cudaMemcpy(out.data(), o_device, out.size() * 2, cudaMemcpyDeviceToHost));
            ASSERT_CUDA(cudaMemcpy(lse.data(), lse_device, lse.size() * 4, cudaMemcpyDeviceToHost));
          };
          std::vector<uint16_t> out, out_vt;
          std::vector<float> lse, lse_vt;
          run_sm90(v.desc, HOPATTN_FP8_LAYOUT_ROWS, out, lse);
          // V given transposed: its key blocks start on groups of 16 (the packings' sequences mostly
          // do not), so against the CPU as above; with K block scales the rows' blocks start on the
          // scale chunks too, the same grid, so the same bits as V in rows where the two layouts
          // compute alike.
          const TransposedCodes v_transposed(v);
          const bool ran = !HasFatalFailure() && v_transposed.device != nullptr;
          if (ran) run_sm90(v_transposed.desc, HOPATTN_FP8_LAYOUT_V_TRANSPOSED, out_vt, lse_vt);
          cudaFree(o_device);
          cudaFree(lse_device);
          ASSERT_TRUE(ran && !HasFatalFailure()) << "an SM90 run failed (or cudaMalloc of V transposed)";
          if (k_blocks && layouts_compute_alike(head_dim, true, causal, 0, 0)) {
            EXPECT_EQ(std::memcmp(out_vt.data(), out.data(), out.size() * 2), 0) << "O differs with V transposed";
            EXPECT_EQ(std::memcmp(lse_vt.data(), lse.data(), lse.size() * 4), 0) << "LSE differs with V transposed";
          }
          // Both runs against the CPU backend.
          for (const auto* run : {&out, &out_vt}) {
            const std::vector<float>& run_lse = run == &out ? lse : lse_vt;
            const char* label = run == &out ? "V in rows" : "V transposed";
            double err2 = 0, ref2 = 0, lse_error = 0;
            for (size_t i = 0; i < run->size(); ++i) {
              const double got = to_float(HOPATTN_DTYPE_BFLOAT16, (*run)[i]);
              const double want = to_float(HOPATTN_DTYPE_BFLOAT16, cpu_out[i]);
              ASSERT_TRUE(std::isfinite(got)) << label << ": O[" << i << "] = " << got << " (unwritten or NaN)";
              err2 += (got - want) * (got - want);
              ref2 += want * want;
            }
            for (size_t i = 0; i < run_lse.size(); ++i) {
              if (std::isinf(cpu_lse[i])) {
                ASSERT_TRUE(std::isinf(run_lse[i]) && run_lse[i] < 0)
                    << label << ": LSE[" << i << "] = " << run_lse[i] << ", expected -inf";
                continue;
              }
              ASSERT_TRUE(std::isfinite(run_lse[i])) << label << ": LSE[" << i << "] = " << run_lse[i];
              lse_error = std::max(lse_error, double(std::abs(run_lse[i] - cpu_lse[i])));
            }
            const double rel = std::sqrt(err2 / ref2);
            EXPECT_LT(rel, 0.06) << label;
            EXPECT_LT(lse_error, 4e-3) << label;
            std::printf("[ sm90 fp8 varlen ] %lld seqs%s d%-4lld %-7s K %-9s %-12s rel %.3e  lse max err %.3e\n",
                        (long long)(cu_q.size() - 1), seqused.empty() ? "" : " seqused_k", (long long)head_dim,
                        causal ? "causal" : "full",
                        k_blocks ? ("block" + std::to_string(k_scaling.block_rows)).c_str() : "head", label, rel,
                        lse_error);
          }
        }
      }
    }
    cudaFree(cu_device);
  }
}

}  // namespace
