#include "bench_run.hpp"

#include <algorithm>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "api/abi.hpp"
#include "api/problem_of.hpp"
#include "bench_device.hpp"
#include "core/dtype.hpp"
#include "core/problem.hpp"
#include "core/seqlen.hpp"
#include "cpu/reference.hpp"

namespace hopattn::bench {
namespace {

constexpr int kSampledRows = 64;
constexpr uint64_t kSeed = 20240711;
// --dtype e4m3: the quantisation the FP8 kernel is designed for (docs/performance-log.md's FP8
// design study): Q and K rotated with one seed and scaled per block of its 128-row tiles, V per
// (batch, head) and not rotated.
constexpr int64_t kFp8BlockRows = 128;
constexpr uint64_t kFp8Seed = 0;

bool is_fp8(const CaseSpec& s) { return s.dtype == HOPATTN_DTYPE_FLOAT8_E4M3; }

// The dtype of the inputs as generated and of o: an FP8 case starts from bfloat16 and writes it.
hopattn_dtype source_dtype(const CaseSpec& s) { return is_fp8(s) ? HOPATTN_DTYPE_BFLOAT16 : s.dtype; }

void store(hopattn_dtype dtype, float x, unsigned char* dst) {
  visit_dtype(dtype_of(dtype), [&](auto element) {
    const auto value = from_float<decltype(element)>(x);
    std::memcpy(dst, &value, sizeof value);
  });
}

float load(hopattn_dtype dtype, const unsigned char* src) {
  return visit_dtype(dtype_of(dtype), [&](auto element) {
    std::memcpy(&element, src, sizeof element);
    return to_float(element);
  });
}

// The tensors' batch: 1 for a variable-length case, whose sequences are packed along seqlen.
int64_t tensor_batch(const CaseSpec& s) { return s.varlen_lengths.empty() ? s.batch : 1; }

// A packed (batch, seqlen, heads, head_dim) tensor of `dtype` in `storage`, N(0,1) when `rng` is
// given.
hopattn_tensor make_tensor(const CaseSpec& s, hopattn_dtype dtype, int64_t seqlen, int64_t heads,
                           std::vector<unsigned char>& storage, std::mt19937_64* rng) {
  const int64_t batch = tensor_batch(s);
  const size_t count = static_cast<size_t>(batch * seqlen * heads * s.head_dim);
  const size_t size = static_cast<size_t>(element_size(dtype_of(dtype)));
  storage.assign(count * size, 0);
  if (rng && dtype != HOPATTN_DTYPE_FLOAT8_E4M3) {
    std::normal_distribution<float> normal(0.f, 1.f);
    for (size_t i = 0; i < count; ++i) store(dtype, normal(*rng), storage.data() + i * size);
  }
  hopattn_tensor t{};
  t.data = storage.data();
  t.dtype = dtype;
  t.batch = batch;
  t.seqlen = seqlen;
  t.heads = heads;
  t.head_dim = s.head_dim;
  t.head_stride = s.head_dim;
  t.seq_stride = heads * s.head_dim;
  t.batch_stride = seqlen * heads * s.head_dim;
  return t;
}

HostTensors make_tensors(const CaseSpec& s) {
  HostTensors t;
  std::mt19937_64 rng(kSeed);
  const hopattn_dtype dtype = source_dtype(s);
  t.tq = make_tensor(s, dtype, s.seqlen_q, s.heads_q, t.q, &rng);
  t.tk = make_tensor(s, dtype, s.seqlen_k, s.heads_kv, t.k, &rng);
  t.tv = make_tensor(s, dtype, s.seqlen_k, s.heads_kv, t.v, &rng);
  t.to = make_tensor(s, dtype, s.seqlen_q, s.heads_q, t.o, nullptr);
  const int64_t lse_rows = tensor_batch(s) * s.heads_q * s.seqlen_q;
  t.lse.assign(static_cast<size_t>(lse_rows), 0.f);
  if (!s.varlen_lengths.empty()) {
    t.is_varlen = true;
    t.cu_seqlens.assign(1, 0);
    for (int32_t length : s.varlen_lengths) t.cu_seqlens.push_back(t.cu_seqlens.back() + length);
    t.varlen = hopattn_default_varlen();
    t.varlen.batch = s.batch;
    t.varlen.cu_seqlens_q = t.varlen.cu_seqlens_k = t.cu_seqlens.data();
    t.varlen.max_seqlen_q = t.varlen.max_seqlen_k =
        *std::max_element(s.varlen_lengths.begin(), s.varlen_lengths.end());
  }
  return t;
}

// x quantised into codes (a tensor of x's shape) and scales, as the FP8 case's design says.
hopattn_status quantize(const CaseSpec& s, const hopattn_tensor& x, hopattn_fp8_scaling scaling,
                        bool rotate, std::vector<unsigned char>& codes, hopattn_tensor& codes_view,
                        std::vector<float>& scales, hopattn_fp8_scales& scales_view) {
  codes_view = make_tensor(s, HOPATTN_DTYPE_FLOAT8_E4M3, x.seqlen, x.heads, codes, nullptr);
  const int64_t blocks =
      scaling == HOPATTN_FP8_SCALE_BLOCK ? (x.seqlen - 1) / kFp8BlockRows + 1 : 1;
  scales.assign(static_cast<size_t>(x.batch * x.heads * blocks), 0.f);
  scales_view = {scales.data(), scaling, kFp8BlockRows};
  hopattn_quantize_options options = hopattn_default_quantize_options();
  options.scaling = scaling;
  options.block_rows = kFp8BlockRows;
  options.hadamard = rotate ? 1 : 0;
  options.seed = kFp8Seed;
  options.backend = HOPATTN_BACKEND_CPU;  // host memory; the SM90 case uploads the codes
  return hopattn_quantize_fp8(&x, &codes_view, scales.data(), &options);
}

// An FP8 case's e4m3 inputs from its bfloat16 ones. The rotation needs a power-of-two head_dim;
// other head_dims are quantised without it.
hopattn_status quantize_inputs(const CaseSpec& s, HostTensors& t) {
  t.is_fp8 = true;
  Fp8Inputs& f = t.fp8;
  const bool rotate = s.head_dim > 0 && (s.head_dim & (s.head_dim - 1)) == 0;
  hopattn_status status =
      quantize(s, t.tq, HOPATTN_FP8_SCALE_BLOCK, rotate, f.q, f.tq, f.q_scales, f.sq);
  if (status == HOPATTN_OK)
    status = quantize(s, t.tk, HOPATTN_FP8_SCALE_BLOCK, rotate, f.k, f.tk, f.k_scales, f.sk);
  if (status == HOPATTN_OK)
    status = quantize(s, t.tv, HOPATTN_FP8_SCALE_HEAD, false, f.v, f.tv, f.v_scales, f.sv);
  return status;
}

// The problem the reference reads: the case's host tensors with the resolved scale (for an FP8
// case the bfloat16 inputs before quantisation: the check measures what FP8 costs).
ForwardProblem problem_of(const CaseSpec& s, HostTensors& t) {
  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = s.causal;
  options.softmax_scale = s.scale > 0 ? s.scale : 0.f;
  return t.is_varlen
             ? hopattn::problem_of(t.tq, t.tk, t.tv, t.to, t.lse.data(), t.varlen, options)
             : hopattn::problem_of(t.tq, t.tk, t.tv, t.to, t.lse.data(), options);
}

// Forward FLOPs, unmasked scores only, summed per sequence.
double flops_of(const ForwardProblem& p) {
  if (!p.seqlens.varlen()) return p.flops();
  double flops = 0;
  for (int64_t b = 0; b < p.seqlens.batch; ++b) {
    const Sequence seq = sequence_of(p.seqlens, b);
    flops += static_cast<double>(p.heads_q) *
             sequence_forward_flops(p.causal, seq.seqlen_q, seq.seqlen_k, p.head_dim);
  }
  return flops;
}

// kSampledRows (sequence, head, row) triples evenly spaced over all (tensor batch, head, row) in
// that order, so they cover every batch and head and many positions, and always include the
// first and last row.
std::vector<RowIndex> sample_rows(const ForwardProblem& p) {
  const SeqlenLayout& layout = p.seqlens;
  const int64_t rows_per_head = layout.total_q;
  const int64_t total = (layout.varlen() ? 1 : layout.batch) * p.heads_q * rows_per_head;
  const int64_t n = std::min<int64_t>(kSampledRows, total);
  std::vector<RowIndex> rows;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t flat = n == 1 ? 0 : i * (total - 1) / (n - 1);
    const int64_t head = flat / rows_per_head % p.heads_q;
    const int64_t row = flat % rows_per_head;
    if (!layout.varlen()) {
      rows.push_back({flat / (p.heads_q * rows_per_head), head, row});
      continue;
    }
    // The sequence holding packed row `row`: the last whose first row is at or before it.
    const int32_t* cu = layout.cu_seqlens_q;
    const int64_t sequence = std::upper_bound(cu, cu + layout.batch + 1, row) - cu - 1;
    rows.push_back({sequence, head, row - cu[sequence]});
  }
  return rows;
}

void check_against_reference(const CaseSpec& s, HostTensors& t, CaseResult& r) {
  const ForwardProblem problem = problem_of(s, t);
  const std::vector<RowIndex> rows = sample_rows(problem);
  std::vector<double> ref_o, ref_lse;
  reference_rows(problem, rows, ref_o, ref_lse);

  const hopattn_dtype out_dtype = source_dtype(s);
  const size_t size = static_cast<size_t>(element_size(dtype_of(out_dtype)));
  double err2 = 0, ref2 = 0, lse_err = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowIndex& row = rows[i];
    const Sequence seq = sequence_of(problem.seqlens, row.sequence);
    const int64_t offset =
        row_offset(problem.o_stride, seq.tensor_batch, seq.q_begin + row.row, row.head);
    for (int64_t d = 0; d < s.head_dim; ++d) {
      const double got = load(out_dtype, t.o.data() + (offset + d) * size);
      const double want = ref_o[i * s.head_dim + d];
      err2 += (got - want) * (got - want);
      ref2 += want * want;
    }
    const double got_lse =
        t.lse[lse_index(problem.seqlens, seq, problem.heads_q, row.head, row.row)];
    if (std::isinf(ref_lse[i]))
      lse_err = std::max(lse_err, std::isinf(got_lse) && got_lse < 0 ? 0.0 : INFINITY);
    else
      lse_err = std::max(lse_err, std::abs(got_lse - ref_lse[i]));
  }
  r.sampled_rows = static_cast<int64_t>(rows.size());
  r.rmse = std::sqrt(err2 / static_cast<double>(rows.size() * s.head_dim));
  // Every sampled row masked out: the reference is all zero and so must the output be.
  r.rel_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  r.lse_max_abs_error = lse_err;
  const size_t count = t.o.size() / size;
  for (size_t i = 0; i < count && !r.output_has_nan; ++i)
    r.output_has_nan = std::isnan(load(out_dtype, t.o.data() + i * size));
  r.pass = !r.output_has_nan && r.rel_error <= rel_error_tolerance(s.dtype) &&
           r.lse_max_abs_error <= lse_tolerance(s.dtype);
}

// The library's line about sm90 in hopattn_build_info(): "sm90: not built", or "sm90: built;
// ...; device: no compute capability 9.0 GPU visible".
std::string sm90_build_line() {
  const std::string info = hopattn_build_info();
  const size_t begin = info.find("sm90:");
  if (begin == std::string::npos) return "";
  const size_t end = info.find('\n', begin);
  return info.substr(begin, end == std::string::npos ? end : end - begin);
}

// Why the sm90 backend cannot run here, in the library's words where it has them.
std::string sm90_why_not() {
  const std::string line = sm90_build_line();
  if (line.find("not built") != std::string::npos)
    return "not in this build, configured without CUDA";
#ifdef HOPATTN_HAVE_CUDA
  const size_t device = line.find("device: ");
  const std::string why = device == std::string::npos ? line : line.substr(device + 8);
  // The library says only that no Hopper is visible; name what is.
  return why + "; " + cuda_device_summary();
#else
  return "hopattn-bench was built without the CUDA runtime (no CUDA compiler at configure time)";
#endif
}

std::string sm90_unavailable_reason() {
  return "the sm90 backend is unavailable: " + sm90_why_not();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

CallArguments host_arguments(HostTensors& t) {
  CallArguments a;
  a.q = t.is_fp8 ? t.fp8.tq : t.tq;
  a.k = t.is_fp8 ? t.fp8.tk : t.tk;
  a.v = t.is_fp8 ? t.fp8.tv : t.tv;
  a.o = t.to;
  a.lse = t.lse.data();
  a.varlen = t.varlen;
  a.q_scales = t.fp8.sq;
  a.k_scales = t.fp8.sk;
  a.v_scales = t.fp8.sv;
  return a;
}

hopattn_status run_forward(const HostTensors& tensors, CallArguments& a,
                           const hopattn_forward_options& options) {
  if (tensors.is_fp8) {
    return hopattn_forward_fp8(&a.q, &a.q_scales, &a.k, &a.k_scales, &a.v, &a.v_scales, &a.o,
                               a.lse, &options);
  }
  return tensors.is_varlen
             ? hopattn_forward_varlen(&a.q, &a.k, &a.v, &a.o, a.lse, &a.varlen, &options)
             : hopattn_forward(&a.q, &a.k, &a.v, &a.o, a.lse, &options);
}

TimedRun time_on_host(HostTensors& t, const hopattn_forward_options& options, int warmup,
                      int iters) {
  TimedRun run;
  CallArguments arguments = host_arguments(t);
  for (int i = 0; i < warmup + iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run.status = run_forward(t, arguments, options);
    const auto stop = std::chrono::steady_clock::now();
    if (run.status != HOPATTN_OK) {
      run.error = hopattn_last_error();
      return run;
    }
    if (i >= warmup)
      run.times_ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return run;
}

double rel_error_tolerance(hopattn_dtype dtype) {
  switch (dtype) {
    case HOPATTN_DTYPE_FLOAT32:
      return 1e-4;
    case HOPATTN_DTYPE_FLOAT16:
      return 5e-3;
    case HOPATTN_DTYPE_BFLOAT16:
      return 2e-2;
    case HOPATTN_DTYPE_FLOAT8_E4M3:
      // Against float64 attention of the unquantised bfloat16 inputs: rounding V to e4m3's 4
      // significant bits alone errs by about 3.6% (RMS) of every element, an error that averages
      // over the keys no better than O itself does, so O's relative error is 3.5-5% on N(0,1)
      // inputs (measured on the CPU; the SM90 kernel also rounds P to e4m3). Twice that passes.
      return 1e-1;
  }
  return 0.0;
}

double lse_tolerance(hopattn_dtype dtype) {
  // Natural-log units; the LSE is float32 for every dtype. FP8 perturbs each score q.k * scale
  // by about 0.05 RMS for N(0,1) inputs (the rounding of q and k, whatever head_dim), all of
  // which reaches the LSE of a causal row that sees a few keys: up to 0.064 measured over 64 rows.
  return dtype == HOPATTN_DTYPE_FLOAT8_E4M3 ? 0.25 : 1e-3;
}

bool sm90_runnable() {
#ifdef HOPATTN_HAVE_CUDA
  return hopattn_backend_available(HOPATTN_BACKEND_SM90) != 0;
#else
  return false;
#endif
}

BackendChoice choose_backend(hopattn_backend requested) {
  BackendChoice choice;
  choice.requested = requested != HOPATTN_BACKEND_AUTO;
  if (requested == HOPATTN_BACKEND_SM90) {
    choice.backend = HOPATTN_BACKEND_SM90;
    choice.available = sm90_runnable();
  } else if (requested == HOPATTN_BACKEND_CPU) {
    choice.backend = HOPATTN_BACKEND_CPU;
  } else {
    choice.backend = sm90_runnable() ? HOPATTN_BACKEND_SM90 : HOPATTN_BACKEND_CPU;
  }
  return choice;
}

std::string backend_reason(const BackendChoice& choice) {
  if (choice.backend == HOPATTN_BACKEND_CPU)
    return choice.requested ? "cpu: asked for with --backend cpu"
                            : "cpu: no Hopper GPU visible (sm90 backend: " + sm90_why_not() + ")";
  if (!choice.available) return "sm90: " + sm90_unavailable_reason();
  return choice.requested ? "sm90: asked for with --backend sm90"
                          : "sm90: a compute capability 9.0 GPU is visible";
}

int usable_cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

std::string set_cpu_threads(int threads) {
  // The CPU backend sizes its thread pool from HOPATTN_NUM_THREADS when it starts (its first call).
  if (threads > 4096) return std::to_string(threads) + " is more than the 4096 threads allowed";
  if (setenv("HOPATTN_NUM_THREADS", std::to_string(threads).c_str(), 1) != 0)
    return std::string("cannot set HOPATTN_NUM_THREADS: ") + std::strerror(errno);
  return "";
}

std::string device_name(hopattn_backend backend) {
#ifdef HOPATTN_HAVE_CUDA
  if (backend == HOPATTN_BACKEND_SM90) return cuda_device_name();
#endif
  (void)backend;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

CaseResult run_case(const CaseSpec& spec) {
  CaseResult r;
  r.spec = spec;
  HostTensors tensors = make_tensors(spec);
  r.flops = flops_of(problem_of(spec, tensors));
  if (is_fp8(spec)) {
    if (const hopattn_status status = quantize_inputs(spec, tensors); status != HOPATTN_OK) {
      r.status = status;
      r.error = std::string("quantising the inputs: ") + hopattn_last_error();
      return r;
    }
  }

  hopattn_forward_options options = hopattn_default_forward_options();
  options.causal = spec.causal ? 1 : 0;
  options.softmax_scale = spec.scale;
  options.backend = spec.backend;
  TimedRun run;
  if (spec.backend == HOPATTN_BACKEND_CPU) {
    run = time_on_host(tensors, options, spec.warmup, spec.iters);
  } else if (!sm90_runnable()) {
    // Said before any device allocation, which would fail with a less useful CUDA error.
    run.status = HOPATTN_ERROR_BACKEND_UNAVAILABLE;
    run.error = sm90_unavailable_reason();
  } else {
#ifdef HOPATTN_HAVE_CUDA
    run = time_on_sm90(tensors, options, spec.warmup, spec.iters);
#endif
  }
  r.status = run.status;
  r.error = run.error;
  r.times_ms = run.times_ms;
  r.median_ms = median(run.times_ms);
  if (r.status == HOPATTN_OK) check_against_reference(spec, tensors, r);
  return r;
}

}  // namespace hopattn::bench
