#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "api/abi.hpp"
#include "api/problem_of.hpp"
#include "core/causal_mask.hpp"
#include "core/dtype.hpp"
#include "core/seqlen.hpp"
#include "cpu/reference.hpp"

namespace hopattn::test {

std::string describe(const Case& c) {
  const char* layouts[] = {"contiguous", "padded", "packed-qkv"};
  std::ostringstream s;
  s << dtype_name(dtype_of(c.dtype)) << " batch " << c.batch << " seqlen_q " << c.seqlen_q
    << " seqlen_k " << c.seqlen_k << " heads " << c.heads_q << "/" << c.heads_kv << " head_dim "
    << c.head_dim << (c.causal ? " causal" : "") << " scale " << c.softmax_scale << " "
    << layouts[static_cast<int>(c.layout)] << " q_magnitude " << c.q_magnitude;
  return s.str();
}

uint64_t test_seed() {
  if (const char* fixed = std::getenv("HOPATTN_TEST_SEED"))
    return std::strtoull(fixed, nullptr, 10);
  return std::random_device{}();
}

void* Buffer::data(hopattn_dtype dtype) {
  return dtype == HOPATTN_DTYPE_FLOAT32 ? static_cast<void*>(floats.data())
                                        : static_cast<void*>(halves.data());
}

int64_t Buffer::size(hopattn_dtype dtype) const {
  return static_cast<int64_t>(dtype == HOPATTN_DTYPE_FLOAT32 ? floats.size() : halves.size());
}

double load_element(hopattn_dtype dtype, const void* base, int64_t offset) {
  switch (dtype) {
    case HOPATTN_DTYPE_BFLOAT16: return to_float(static_cast<const bfloat16*>(base)[offset]);
    case HOPATTN_DTYPE_FLOAT16: return to_float(static_cast<const float16*>(base)[offset]);
    case HOPATTN_DTYPE_FLOAT8_E4M3: return to_float(static_cast<const float8_e4m3*>(base)[offset]);
    case HOPATTN_DTYPE_FLOAT32: break;
  }
  return static_cast<const float*>(base)[offset];
}

void store_element(hopattn_dtype dtype, void* base, int64_t offset, double value) {
  const float f = static_cast<float>(value);
  switch (dtype) {
    case HOPATTN_DTYPE_BFLOAT16:
      static_cast<bfloat16*>(base)[offset] = from_float<bfloat16>(f);
      return;
    case HOPATTN_DTYPE_FLOAT16:
      static_cast<float16*>(base)[offset] = from_float<float16>(f);
      return;
    case HOPATTN_DTYPE_FLOAT8_E4M3:
      static_cast<float8_e4m3*>(base)[offset] = from_float<float8_e4m3>(f);
      return;
    case HOPATTN_DTYPE_FLOAT32: break;
  }
  static_cast<float*>(base)[offset] = f;
}

bool is_nan_element(hopattn_dtype dtype, const void* base, int64_t offset) {
  return std::isnan(load_element(dtype, base, offset));
}

int64_t element_offset(const hopattn_tensor& t, int64_t b, int64_t s, int64_t h, int64_t d) {
  return b * t.batch_stride + s * t.seq_stride + h * t.head_stride + d;
}

namespace {

struct View {
  int64_t offset;  // of the first element within the buffer
  hopattn_tensor tensor;
};

hopattn_tensor shaped(const Case& c, int64_t seqlen, int64_t heads, int64_t batch_stride,
                      int64_t seq_stride, int64_t head_stride) {
  return {nullptr,    c.dtype,      c.batch,    seqlen,     heads,
          c.head_dim, batch_stride, seq_stride, head_stride};
}

int64_t extent(const hopattn_tensor& t) {
  return element_offset(t, t.batch - 1, t.seqlen - 1, t.heads - 1, t.head_dim - 1) + 1;
}

// A tensor on its own: dense, or with a gap after every head, row and batch.
View standalone_view(const Case& c, int64_t seqlen, int64_t heads, int64_t offset) {
  const int64_t d = c.head_dim;
  if (c.layout != Layout::Padded) {
    return {offset, shaped(c, seqlen, heads, seqlen * heads * d, heads * d, d)};
  }
  const int64_t head_stride = d + 3, seq_stride = heads * head_stride + 5;
  return {offset, shaped(c, seqlen, heads, seqlen * seq_stride + 7, seq_stride, head_stride)};
}

void poison(Buffer& buffer, hopattn_dtype dtype, int64_t count) {
  if (dtype == HOPATTN_DTYPE_FLOAT32) {
    buffer.floats.assign(static_cast<size_t>(count), NAN);
  } else {
    buffer.halves.assign(static_cast<size_t>(count),
                         dtype == HOPATTN_DTYPE_BFLOAT16 ? 0x7fc0 : 0x7e00);
  }
}

template <class Fn>
void for_each_element(const hopattn_tensor& t, Fn&& fn) {
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seqlen; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t d = 0; d < t.head_dim; ++d) fn(b, s, h, d);
}

}  // namespace

CaseTensors::CaseTensors(const Case& c, std::mt19937_64& rng) {
  View views[3];
  if (c.layout == Layout::PackedQkv) {
    const int64_t heads = c.heads_q + 2 * c.heads_kv, d = c.head_dim;
    if (c.seqlen_q != c.seqlen_k) throw std::invalid_argument("a packed QKV buffer has one seqlen");
    const int64_t bs = c.seqlen_q * heads * d, ss = heads * d;
    views[0] = {0, shaped(c, c.seqlen_q, c.heads_q, bs, ss, d)};
    views[1] = {c.heads_q * d, shaped(c, c.seqlen_k, c.heads_kv, bs, ss, d)};
    views[2] = {(c.heads_q + c.heads_kv) * d, shaped(c, c.seqlen_k, c.heads_kv, bs, ss, d)};
  } else {
    views[0] = standalone_view(c, c.seqlen_q, c.heads_q, 0);
    views[1] = standalone_view(c, c.seqlen_k, c.heads_kv, extent(views[0].tensor));
    views[2] =
        standalone_view(c, c.seqlen_k, c.heads_kv, views[1].offset + extent(views[1].tensor));
  }
  int64_t total = 0;
  for (const View& view : views) total = std::max(total, view.offset + extent(view.tensor));
  poison(qkv_buffer, c.dtype, total);

  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  hopattn_tensor* tensors[] = {&q, &k, &v};
  for (int i = 0; i < 3; ++i) {
    const double magnitude = i == 0 ? c.q_magnitude : 1.0;
    *tensors[i] = views[i].tensor;
    void* base = static_cast<char*>(qkv_buffer.data(c.dtype)) +
                 views[i].offset * element_size(dtype_of(c.dtype));
    tensors[i]->data = base;
    for_each_element(*tensors[i], [&](int64_t b, int64_t s, int64_t h, int64_t d) {
      store_element(c.dtype, base, element_offset(*tensors[i], b, s, h, d),
                    magnitude * uniform(rng));
    });
  }

  const View o_view = standalone_view(c, c.seqlen_q, c.heads_q, 0);
  poison(o_buffer, c.dtype, extent(o_view.tensor));
  o = o_view.tensor;
  o.data = o_buffer.data(c.dtype);
  lse.assign(static_cast<size_t>(c.batch * c.heads_q * c.seqlen_q), NAN);
}

ForwardProblem CaseTensors::problem(const Case& c) {
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = c.causal;
  options.softmax_scale = c.softmax_scale;
  return problem_of(q, k, v, o, lse.data(), options);
}

std::string ErrorNorms::str() const {
  std::ostringstream s;
  s << "relative error " << relative << ", RMSE " << rmse << ", max abs error " << max_abs;
  return s.str();
}

ErrorNorms error_norms(const std::vector<double>& got, const std::vector<double>& want) {
  double diff2 = 0, want2 = 0, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = got[i] - want[i];
    diff2 += diff * diff;
    want2 += want[i] * want[i];
    max_abs = std::max(max_abs, std::abs(diff));
  }
  ErrorNorms norms;
  norms.relative = want2 > 0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2);
  norms.rmse = want.empty() ? 0 : std::sqrt(diff2 / static_cast<double>(want.size()));
  norms.max_abs = max_abs;
  return norms;
}

std::vector<double> read_output(const hopattn_tensor& o) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(o.batch * o.seqlen * o.heads * o.head_dim));
  for_each_element(o, [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    out.push_back(load_element(o.dtype, o.data, element_offset(o, b, s, h, d)));
  });
  return out;
}

double relative_tolerance(hopattn_dtype dtype) {
  switch (dtype) {
    case HOPATTN_DTYPE_BFLOAT16: return 4e-3;  // output rounding: 2^-9 relative, ~1e-3 RMS
    case HOPATTN_DTYPE_FLOAT16: return 5e-4;   // 2^-12 relative, ~1.4e-4 RMS
    case HOPATTN_DTYPE_FLOAT8_E4M3: return 0.1;  // no attention output is e4m3 (yet)
    case HOPATTN_DTYPE_FLOAT32: break;
  }
  return 5e-6;
}

double score_error_bound(const Case& c) {
  const double scale =
      c.softmax_scale != 0.f ? c.softmax_scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  return scale * static_cast<double>(c.head_dim) * c.q_magnitude * 0x1p-24;
}

namespace {

// The calls's outputs in `t` against the reference for `problem`, sequence by sequence.
void check_against_reference(const Case& c, CaseTensors& t, const ForwardProblem& problem) {
  std::vector<double> ref_out, ref_lse;
  reference_forward(problem, ref_out, ref_lse);
  const std::vector<double> out = read_output(t.o);

  int64_t unwritten = 0, nonzero_in_empty_rows = 0, bad_lse = 0;
  double lse_error = 0;
  const SeqlenLayout& layout = problem.seqlens;
  const int64_t d = c.head_dim;
  for (int64_t b = 0; b < layout.batch; ++b) {
    const Sequence seq = sequence_of(layout, b);
    for (int64_t h = 0; h < c.heads_q; ++h) {
      for (int64_t i = 0; i < seq.seqlen_q; ++i) {
        const int64_t tensor_row = seq.tensor_batch * layout.total_q + seq.q_begin + i;
        const size_t row = static_cast<size_t>((tensor_row * c.heads_q + h) * d);
        const int64_t lse_at = lse_index(layout, seq, c.heads_q, h, i);
        const double want_lse = ref_lse[lse_at];
        const double got_lse = t.lse[lse_at];
        const bool sees_no_key = visible_key_end(c.causal, i, seq.seqlen_q, seq.seqlen_k) == 0;
        for (int64_t e = 0; e < d; ++e) {
          unwritten += !std::isfinite(out[row + e]);
          nonzero_in_empty_rows += sees_no_key && out[row + e] != 0.0;
        }
        if (sees_no_key) {
          bad_lse += !(std::isinf(got_lse) && got_lse < 0);
        } else if (!std::isfinite(got_lse)) {
          ++bad_lse;
        } else {
          lse_error =
              std::max(lse_error, std::abs(got_lse - want_lse) / std::max(1.0, std::abs(want_lse)));
        }
      }
    }
  }
  EXPECT_EQ(unwritten, 0) << "output elements left NaN or not finite";
  EXPECT_EQ(nonzero_in_empty_rows, 0) << "rows that see no key must be exactly 0";
  EXPECT_EQ(bad_lse, 0) << "LSE must be finite, and -inf exactly for rows that see no key";
  EXPECT_LE(lse_error, kLseTolerance + score_error_bound(c))
      << "largest LSE error relative to max(1, |lse|)";

  const ErrorNorms norms = error_norms(out, ref_out);
  EXPECT_LE(norms.relative, relative_tolerance(c.dtype) + score_error_bound(c)) << norms.str();

  // Every element of the buffer outside the view still holds its poison.
  std::vector<bool> in_view(static_cast<size_t>(t.o_buffer.size(c.dtype)), false);
  for_each_element(t.o, [&](int64_t b, int64_t s, int64_t h, int64_t e) {
    in_view[static_cast<size_t>(element_offset(t.o, b, s, h, e))] = true;
  });
  int64_t gaps_written = 0;
  for (size_t i = 0; i < in_view.size(); ++i) {
    gaps_written += !in_view[i] && !is_nan_element(c.dtype, t.o.data, static_cast<int64_t>(i));
  }
  EXPECT_EQ(gaps_written, 0) << "elements between the output's rows were overwritten";
}

hopattn_forward_options cpu_options(bool causal, float softmax_scale) {
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = causal;
  options.softmax_scale = softmax_scale;
  options.backend = HOPATTN_BACKEND_CPU;
  return options;
}

Case packed_case(const VarlenCase& c) {
  Case packed;
  packed.dtype = c.dtype;
  packed.batch = 1;
  packed.seqlen_q = std::accumulate(c.seqlens_q.begin(), c.seqlens_q.end(), int64_t{0});
  packed.seqlen_k = std::accumulate(c.seqlens_k.begin(), c.seqlens_k.end(), int64_t{0});
  packed.heads_q = c.heads_q;
  packed.heads_kv = c.heads_kv;
  packed.head_dim = c.head_dim;
  packed.causal = c.causal;
  packed.softmax_scale = c.softmax_scale;
  packed.layout = c.layout;
  packed.q_magnitude = c.q_magnitude;
  return packed;
}

std::vector<int32_t> prefix_sums(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> sums(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), sums.begin() + 1);
  return sums;
}

}  // namespace

void check_case(const Case& c) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CaseTensors t(c, rng);
  const hopattn_forward_options options = cpu_options(c.causal, c.softmax_scale);
  ASSERT_EQ(hopattn_forward(&t.q, &t.k, &t.v, &t.o, t.lse.data(), &options), HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_STREQ(hopattn_last_error(), "");
  check_against_reference(c, t, t.problem(c));
}

std::string describe(const VarlenCase& c) {
  const auto list = [](const std::vector<int32_t>& values) {
    std::string s;
    for (int32_t v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
    return s;
  };
  std::ostringstream s;
  s << dtype_name(dtype_of(c.dtype)) << " varlen q [" << list(c.seqlens_q) << "] k ["
    << list(c.seqlens_k) << "]";
  if (!c.seqused_k.empty()) s << " seqused_k [" << list(c.seqused_k) << "]";
  s << " heads " << c.heads_q << "/" << c.heads_kv << " head_dim " << c.head_dim
    << (c.causal ? " causal" : "") << " scale " << c.softmax_scale
    << (c.layout == Layout::Padded ? " padded" : "") << " q_magnitude " << c.q_magnitude;
  return s.str();
}

VarlenTensors::VarlenTensors(const VarlenCase& c, std::mt19937_64& rng)
    : packed(packed_case(c)),
      tensors(packed, rng),
      cu_seqlens_q(prefix_sums(c.seqlens_q)),
      cu_seqlens_k(prefix_sums(c.seqlens_k)),
      seqused_k(c.seqused_k) {
  if (c.seqlens_q.size() != c.seqlens_k.size())
    throw std::invalid_argument("one query and one key length per sequence");
  varlen = hopattn_default_varlen();
  varlen.batch = static_cast<int64_t>(c.seqlens_q.size());
  varlen.cu_seqlens_q = cu_seqlens_q.data();
  varlen.cu_seqlens_k = cu_seqlens_k.data();
  varlen.seqused_k = seqused_k.empty() ? nullptr : seqused_k.data();
  varlen.max_seqlen_q = std::max(1, *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end()));
  varlen.max_seqlen_k = std::max(1, *std::max_element(c.seqlens_k.begin(), c.seqlens_k.end()));
}

ForwardProblem VarlenTensors::problem(const VarlenCase& c) {
  const hopattn_forward_options options = cpu_options(c.causal, c.softmax_scale);
  return problem_of(tensors.q, tensors.k, tensors.v, tensors.o, tensors.lse.data(), varlen,
                    options);
}

void check_varlen_case(const VarlenCase& c) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  VarlenTensors t(c, rng);
  CaseTensors& x = t.tensors;
  const hopattn_forward_options options = cpu_options(c.causal, c.softmax_scale);
  ASSERT_EQ(hopattn_forward_varlen(&x.q, &x.k, &x.v, &x.o, x.lse.data(), &t.varlen, &options),
            HOPATTN_OK)
      << hopattn_last_error();
  EXPECT_STREQ(hopattn_last_error(), "");
  check_against_reference(t.packed, x, t.problem(c));
}

}  // namespace hopattn::test
