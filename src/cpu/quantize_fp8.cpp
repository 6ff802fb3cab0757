// FP8 quantisation on the CPU (hopattn_quantize_fp8): two passes over (batch, head) tasks on the
// thread pool. The first rotates every row (core/hadamard.hpp) and takes the amax of each row
// block; the scales follow from the amaxes (reduced over the whole tensor for kTensor); the
// second rotates each row again, identically, and writes the codes of value / scale
// (core/fp8_scale.hpp's rule), in rows or in the V-transposed layout (core/fp8_layout.hpp).
// Recomputing the rotation costs less than a float32 copy of x would in memory.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.hpp"
#include "core/fp8_layout.hpp"
#include "core/fp8_scale.hpp"
#include "core/hadamard.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/thread_pool.hpp"

namespace hopattn::cpu {
namespace {

// max(|a|, |b|) that keeps NaN: a block holding a NaN has amax NaN, one holding an infinity inf.
float nan_max(float amax, float value) {
  const float magnitude = std::fabs(value);
  if (std::isnan(amax) || std::isnan(magnitude)) return std::numeric_limits<float>::quiet_NaN();
  return magnitude > amax ? magnitude : amax;
}

// Row `row` of head `head` of batch `b`, as float32, rotated when the problem says so.
template <class Element>
void load_row(const QuantizeProblem& p, int64_t b, int64_t row, int64_t head, float* values) {
  const Element* x = static_cast<const Element*>(p.x) + b * p.x_stride.batch +
                     row * p.x_stride.seq + head * p.x_stride.head;
  for (int64_t i = 0; i < p.head_dim; ++i) values[i] = to_float(x[i]);
  if (p.hadamard) hadamard_rotate(values, p.head_dim, p.seed);
}

// Pass 1 for one (batch, head): amax[r] of each row block r of blocks_per_head().
template <class Element>
void block_amaxes(const QuantizeProblem& p, int64_t b, int64_t head, float* amax) {
  std::vector<float> values(static_cast<size_t>(p.head_dim));
  for (int64_t r = 0; r < p.blocks_per_head(); ++r) {
    float block_amax = 0.f;
    const int64_t end = std::min(p.seqlen, (r + 1) * p.block_rows);
    for (int64_t row = r * p.block_rows; row < end; ++row) {
      load_row<Element>(p, b, row, head, values.data());
      for (float v : values) block_amax = nan_max(block_amax, v);
    }
    amax[r] = block_amax;
  }
}

// Where out's element (b, row, head, i) lies, in the problem's layout.
class OutLayout {
 public:
  explicit OutLayout(const QuantizeProblem& p)
      : stride_(p.out_stride),
        transposed_(p.out_layout == Fp8Layout::kVTransposed),
        v_transposed_(VTransposedLayout::of(p.seqlen, p.heads, p.head_dim)),
        rows_(transposed_ ? v_transposed_.pitch : p.seqlen) {}

  int64_t offset(int64_t b, int64_t row, int64_t head, int64_t i) const {
    return transposed_ ? v_transposed_.offset(b, row, head, i)
                       : b * stride_.batch + row * stride_.seq + head * stride_.head + i;
  }
  // The rows of a (batch, head): seqlen, or up to the V-transposed layout's pitch, whose rows
  // past seqlen the SM90 kernel reads (with a weight of zero) and so must be finite (hopattn.h).
  int64_t rows() const { return rows_; }

 private:
  Strides stride_;
  bool transposed_;
  VTransposedLayout v_transposed_;
  int64_t rows_;
};

// Pass 2 for one (batch, head), with scale[r] the scale of row block r.
template <class Element>
void write_codes(const QuantizeProblem& p, int64_t b, int64_t head, const float* scale) {
  const OutLayout layout(p);
  auto* out = static_cast<float8_e4m3*>(p.out);
  const auto code = [&](int64_t row, int64_t i) -> float8_e4m3& {
    return out[layout.offset(b, row, head, i)];
  };
  std::vector<float> values(static_cast<size_t>(p.head_dim));
  for (int64_t row = 0; row < p.seqlen; ++row) {
    const float s = scale[row / p.block_rows];
    if (!std::isfinite(s)) {  // the block holds a NaN or an infinity: all of it is NaN
      for (int64_t i = 0; i < p.head_dim; ++i) code(row, i) = {kFloat8E4M3NaN};
      continue;
    }
    load_row<Element>(p, b, row, head, values.data());
    const float reciprocal = fp8_reciprocal_of(s);
    for (int64_t i = 0; i < p.head_dim; ++i)
      code(row, i) = from_float<float8_e4m3>(fp8_scaled(values[i], reciprocal));
  }
  for (int64_t row = p.seqlen; row < layout.rows(); ++row) {
    for (int64_t i = 0; i < p.head_dim; ++i) code(row, i) = {0};
  }
}

template <class Element>
void quantize(const QuantizeProblem& p) {
  const int64_t blocks = p.blocks_per_head();
  const int64_t heads = p.batch * p.heads;
  std::vector<float> amax(static_cast<size_t>(heads * blocks));
  ThreadPool& pool = ThreadPool::instance();
  pool.parallel_for(heads, [&](int64_t task) {
    block_amaxes<Element>(p, task / p.heads, task % p.heads, amax.data() + task * blocks);
  });
  if (p.scaling == Fp8Scaling::kTensor) {
    float tensor_amax = 0.f;
    for (float a : amax) tensor_amax = nan_max(tensor_amax, a);
    for (float& a : amax) a = tensor_amax;
  }
  std::vector<float> scale(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) scale[i] = fp8_scale_of(amax[i]);
  // kHead and kBlock store one scale per block of each (batch, head), kTensor the one.
  const size_t stored = p.scaling == Fp8Scaling::kTensor ? 1 : scale.size();
  for (size_t i = 0; i < stored; ++i) p.scales[i] = scale[i];
  pool.parallel_for(heads, [&](int64_t task) {
    write_codes<Element>(p, task / p.heads, task % p.heads, scale.data() + task * blocks);
  });
}

}  // namespace

Status quantize_fp8(const QuantizeProblem& problem) {
  switch (problem.dtype) {
    case DType::kFloat32: quantize<float>(problem); break;
    case DType::kBFloat16: quantize<bfloat16>(problem); break;
    case DType::kFloat16: quantize<float16>(problem); break;
    case DType::kFloat8E4M3: return Status::kInternal;  // validation refuses it
  }
  return Status::kOk;
}

}  // namespace hopattn::cpu
