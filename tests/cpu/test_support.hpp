// Host tensors with random contents in any layout, and the comparison of a forward call
// (fixed-length or variable-length) against the float64 reference, for the tests that go through
// libhopattn.so.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/problem.hpp"
#include "hopattn/hopattn.h"

namespace hopattn::test {

enum class Layout {
  Contiguous,  // (batch, seqlen, heads, head_dim), densely packed
  Padded,      // every stride larger than dense, the gaps poisoned and checked untouched
  PackedQkv,   // q, k and v are head ranges of one (batch, seqlen, heads_q + 2 heads_kv, d) buffer
};

struct Case {
  hopattn_dtype dtype = HOPATTN_DTYPE_FLOAT32;
  int64_t batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  bool causal = false;
  float softmax_scale = 0.f;  // as passed to the API: 0 selects 1/sqrt(head_dim)
  Layout layout = Layout::Contiguous;
  // q is uniform in [-q_magnitude, q_magnitude], k and v in [-1, 1].
  float q_magnitude = 1.f;
};

std::string describe(const Case& c);

// A seed per test, printed in failures; HOPATTN_TEST_SEED fixes it to reproduce one.
uint64_t test_seed();

// Storage for one tensor (or several sharing a buffer) plus the views into it.
struct Buffer {
  std::vector<uint16_t> halves;  // 16-bit dtypes
  std::vector<float> floats;     // float32
  void* data(hopattn_dtype dtype);
  int64_t size(hopattn_dtype dtype) const;
};

double load_element(hopattn_dtype dtype, const void* base, int64_t offset);
void store_element(hopattn_dtype dtype, void* base, int64_t offset, double value);
bool is_nan_element(hopattn_dtype dtype, const void* base, int64_t offset);
int64_t element_offset(const hopattn_tensor& t, int64_t b, int64_t s, int64_t h, int64_t d);

// Tensors of one case: q, k, v filled with random values, o and lse and every gap in the
// buffers poisoned with NaN.
struct CaseTensors {
  Buffer qkv_buffer, o_buffer;
  hopattn_tensor q{}, k{}, v{}, o{};
  std::vector<float> lse;

  CaseTensors(const Case& c, std::mt19937_64& rng);
  // The problem as the reference reads it, with the scale resolved as the API resolves it.
  ForwardProblem problem(const Case& c);
};

// ||a - b|| / ||b||, RMSE and the largest |a - b| over two equally long arrays.
struct ErrorNorms {
  double relative = 0, rmse = 0, max_abs = 0;
  std::string str() const;
};
ErrorNorms error_norms(const std::vector<double>& got, const std::vector<double>& want);

// The output of a call, read back as (batch, seqlen_q, heads_q, head_dim) contiguous doubles.
std::vector<double> read_output(const hopattn_tensor& o);

// Tolerance on ||out - ref|| / ||ref|| for unit-sized inputs: float32 accumulation plus the
// rounding of the output to its dtype.
double relative_tolerance(hopattn_dtype dtype);
// Tolerance on |lse - ref| / max(1, |ref|) for unit-sized inputs.
constexpr double kLseTolerance = 1e-5;
// What float32 scores add for a case: an absolute error of up to unit roundoff times
// sum_c |q_c k_c| <= head_dim * q_magnitude, times the softmax scale, which perturbs every
// softmax weight (and the LSE) by that much relatively.
double score_error_bound(const Case& c);
// Runs the case on the CPU backend and checks it against the reference: status, every output
// element written and finite, padding untouched, rows that see no key exactly 0 with LSE -inf,
// and the error norms within tolerance.
void check_case(const Case& c);

// A variable-length batch: one entry per sequence in each list.
struct VarlenCase {
  hopattn_dtype dtype = HOPATTN_DTYPE_FLOAT32;
  std::vector<int32_t> seqlens_q, seqlens_k;
  std::vector<int32_t> seqused_k;  // empty: none
  int64_t heads_q = 1, heads_kv = 1, head_dim = 64;
  bool causal = false;
  float softmax_scale = 0.f;
  Layout layout = Layout::Contiguous;  // Contiguous or Padded
  float q_magnitude = 1.f;
};

std::string describe(const VarlenCase& c);

// The packed tensors of a varlen case (q, k, v, o of batch 1 with total_q and total_k rows,
// poisoned like CaseTensors), its prefix sums and the hopattn_varlen that points at them.
struct VarlenTensors {
  Case packed;  // the tensors' shape: batch 1, seqlen_q = total_q, seqlen_k = total_k
  CaseTensors tensors;
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k, seqused_k;
  hopattn_varlen varlen{};

  VarlenTensors(const VarlenCase& c, std::mt19937_64& rng);
  ForwardProblem problem(const VarlenCase& c);
};

// check_case for a variable-length batch, through hopattn_forward_varlen.
void check_varlen_case(const VarlenCase& c);

}  // namespace hopattn::test
