#include "bench_options.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include "bench_run.hpp"

namespace hopattn::bench {
namespace {

// The main job, one per backend: a long-context forward on the GPU, and a problem that
// finishes in about a second per run on a small CPU.
struct BackendDefaults {
  int64_t batch, seqlen, heads, head_dim;
  int warmup, iters;
};
constexpr BackendDefaults kSm90Defaults{2, 8192, 16, 128, 3, 20};
constexpr BackendDefaults kCpuDefaults{1, 2048, 16, 128, 1, 5};
const std::vector<int64_t> kSweepSeqlens{1024, 2048, 4096};

// What the command line said; unset fields take the backend's defaults.
struct Raw {
  std::vector<int64_t> batch, seqlen_q, seqlen_k, heads, heads_kv, head_dim;
  std::vector<hopattn_dtype> dtype;
  bool causal = false;
  float scale = 0.f;
  hopattn_backend backend = HOPATTN_BACKEND_AUTO;
  int iters = 0;
  int warmup = -1;  // -1: the backend's default
  std::vector<int32_t> varlen;
};

[[noreturn]] void fail(const std::string& option, const std::string& what) {
  throw UsageError{option + ": " + what};
}

std::vector<std::string> split_list(const std::string& option, const std::string& value) {
  std::vector<std::string> items;
  std::stringstream stream(value);
  for (std::string item; std::getline(stream, item, ',');) {
    if (item.empty()) fail(option, "empty item in list '" + value + "'");
    items.push_back(item);
  }
  if (items.empty()) fail(option, "needs a value");
  return items;
}

int64_t parse_integer(const std::string& option, const std::string& text, int64_t min,
                      const char* what) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || errno != 0 || value < min)
    fail(option, std::string("must be a ") + what + ", got '" + text + "'");
  return value;
}

int64_t parse_positive(const std::string& option, const std::string& text) {
  return parse_integer(option, text, 1, "positive integer");
}

int parse_count(const std::string& option, const std::string& text, int64_t min) {
  const int64_t value =
      parse_integer(option, text, min, min > 0 ? "positive integer" : "non-negative integer");
  if (value > INT_MAX) fail(option, "must be at most " + std::to_string(INT_MAX));
  return static_cast<int>(value);
}

// Optimal string alignment distance: edits, with a swap of two neighbours counting as one, so
// that --warmpu is one step from --warmup.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The known options nearest to `given`: those it abbreviates, else the closest within a third
// of its length (at least 2 edits); none when nothing is that close.
std::vector<std::string> nearest_options(const std::string& given,
                                         const std::vector<std::string>& known) {
  std::vector<std::string> extended;
  for (const std::string& name : known)
    if (given.size() > 3 && name.rfind(given, 0) == 0) extended.push_back(name);
  if (!extended.empty()) return extended;
  std::string best;
  size_t best_distance = std::max<size_t>(2, given.size() / 3) + 1;
  for (const std::string& name : known) {
    const size_t distance = edit_distance(given, name);
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best.empty() ? std::vector<std::string>{} : std::vector<std::string>{best};
}

std::vector<int64_t> parse_positive_list(const std::string& option, const std::string& value) {
  std::vector<int64_t> values;
  for (const std::string& item : split_list(option, value))
    values.push_back(parse_positive(option, item));
  return values;
}

hopattn_dtype parse_dtype(const std::string& option, const std::string& text) {
  if (text == "fp32") return HOPATTN_DTYPE_FLOAT32;
  if (text == "bf16") return HOPATTN_DTYPE_BFLOAT16;
  if (text == "fp16") return HOPATTN_DTYPE_FLOAT16;
  if (text == "e4m3") return HOPATTN_DTYPE_FLOAT8_E4M3;
  fail(option, "'" + text + "' is not one of fp32, bf16, fp16, e4m3");
}

hopattn_backend parse_backend(const std::string& option, const std::string& text) {
  if (text == "auto") return HOPATTN_BACKEND_AUTO;
  if (text == "cpu") return HOPATTN_BACKEND_CPU;
  if (text == "sm90") return HOPATTN_BACKEND_SM90;
  fail(option, "'" + text + "' is not one of auto, cpu, sm90");
}

float parse_scale(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const float value = std::strtof(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(value > 0.f) || value == HUGE_VALF)
    fail(option, "must be a positive finite number, got '" + text + "'");
  return value;
}

// Every case: the product of the listed values. Without --seqlen-k each case's seqlen_k is
// its seqlen_q; --sweep adds the default sequence lengths and both mask modes.
std::vector<CaseSpec> expand_cases(const Raw& raw, bool sweep, hopattn_backend backend) {
  if (!raw.varlen.empty()) {
    const std::pair<const char*, bool> conflicts[] = {{"--batch", !raw.batch.empty()},
                                                      {"--seqlen-q", !raw.seqlen_q.empty()},
                                                      {"--seqlen-k", !raw.seqlen_k.empty()},
                                                      {"--sweep", sweep}};
    for (const auto& [option, given] : conflicts) {
      if (given) fail("--varlen", std::string("cannot be combined with ") + option +
                                      " (the lengths give the batch)");
    }
    for (hopattn_dtype dtype : raw.dtype) {
      if (dtype == HOPATTN_DTYPE_FLOAT8_E4M3)
        fail("--varlen", "cannot be combined with --dtype e4m3 (hopattn_forward_fp8 takes "
                         "fixed-length batches)");
    }
  }
  const BackendDefaults& d = backend == HOPATTN_BACKEND_SM90 ? kSm90Defaults : kCpuDefaults;
  auto or_default = [](const std::vector<int64_t>& given, std::vector<int64_t> fallback) {
    return given.empty() ? fallback : given;
  };
  const auto seqlens_q = or_default(raw.seqlen_q, sweep ? kSweepSeqlens : std::vector{d.seqlen});
  const auto dtypes = raw.dtype.empty() ? std::vector{HOPATTN_DTYPE_BFLOAT16} : raw.dtype;
  std::vector<bool> causal_modes{raw.causal};
  if (sweep && !raw.causal) causal_modes = {false, true};

  std::vector<CaseSpec> cases;
  for (int64_t batch : or_default(raw.batch, {d.batch}))
    for (int64_t heads : or_default(raw.heads, {d.heads}))
      for (int64_t head_dim : or_default(raw.head_dim, {d.head_dim}))
        for (hopattn_dtype dtype : dtypes)
          for (int64_t seqlen_q : seqlens_q)
            for (int64_t seqlen_k : or_default(raw.seqlen_k, {seqlen_q}))
              for (int64_t heads_kv : or_default(raw.heads_kv, {heads}))
                for (bool causal : causal_modes) {
                  CaseSpec c;
                  c.batch = batch;
                  c.seqlen_q = seqlen_q;
                  c.seqlen_k = seqlen_k;
                  c.heads_q = heads;
                  c.heads_kv = heads_kv;
                  c.head_dim = head_dim;
                  c.dtype = dtype;
                  c.causal = causal;
                  c.scale = raw.scale;
                  c.backend = backend;
                  c.warmup = raw.warmup >= 0 ? raw.warmup : d.warmup;
                  c.iters = raw.iters > 0 ? raw.iters : d.iters;
                  if (!raw.varlen.empty()) {
                    c.varlen_lengths = raw.varlen;
                    c.batch = static_cast<int64_t>(raw.varlen.size());
                    c.seqlen_q = c.seqlen_k = 0;
                    for (int32_t length : raw.varlen) c.seqlen_q = c.seqlen_k += length;
                  }
                  cases.push_back(c);
                }
  return cases;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options options;
  Raw raw;
  using Setter = std::function<void(const std::string& option, const std::string& value)>;
  const std::map<std::string, bool*> flags{{"--help", &options.help},
                                           {"-h", &options.help},
                                           {"--sweep", &options.sweep},
                                           {"--causal", &raw.causal}};
  auto list_of = [](std::vector<int64_t>& field) -> Setter {
    return
        [&field](const std::string& o, const std::string& v) { field = parse_positive_list(o, v); };
  };
  const std::map<std::string, Setter> valued{
      {"--batch", list_of(raw.batch)},
      {"--seqlen-q", list_of(raw.seqlen_q)},
      {"--seqlen-k", list_of(raw.seqlen_k)},
      {"--heads", list_of(raw.heads)},
      {"--heads-kv", list_of(raw.heads_kv)},
      {"--head-dim", list_of(raw.head_dim)},
      {"--iters", [&](auto& o, auto& v) { raw.iters = parse_count(o, v, 1); }},
      {"--warmup", [&](auto& o, auto& v) { raw.warmup = parse_count(o, v, 0); }},
      {"--threads", [&](auto& o, auto& v) { options.threads = parse_count(o, v, 1); }},
      {"--scale", [&](auto& o, auto& v) { raw.scale = parse_scale(o, v); }},
      {"--backend", [&](auto& o, auto& v) { raw.backend = parse_backend(o, v); }},
      {"--varlen", [&](auto& o, auto& v) { raw.varlen = parse_varlen(o, v); }},
      {"--dtype",
       [&](auto& o, auto& v) {
         raw.dtype.clear();
         for (const std::string& item : split_list(o, v)) raw.dtype.push_back(parse_dtype(o, item));
       }},
      {"--json",
       [&](auto& o, auto& v) {
         if (v.empty()) fail(o, "needs a file name");
         options.json_path = v;
       }},
      {"--plot", [&](auto& o, auto& v) {
         if (v.empty()) fail(o, "needs a file name");
         options.plot_path = v;
       }}};
  const auto unknown = [&](const std::string& option) {
    if (option.empty() || option[0] != '-')
      fail("'" + option + "'", "unexpected argument: options start with -- (see --help)");
    std::vector<std::string> known;
    for (const auto& entry : flags) known.push_back(entry.first);
    for (const auto& entry : valued) known.push_back(entry.first);
    std::string hint;
    for (const std::string& name : nearest_options(option, known))
      hint += (hint.empty() ? "; did you mean " : " or ") + name;
    fail(option, "unknown option" + (hint.empty() ? "" : hint + "?") + " (see --help)");
  };

  for (int i = 1; i < argc; ++i) {
    // --option=value and --option value are the same.
    std::string option = argv[i], value;
    const size_t eq = option.find('=');
    const bool inline_value = option.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = option.substr(eq + 1);
      option.resize(eq);
    }
    if (const auto flag = flags.find(option); flag != flags.end()) {
      if (inline_value) fail(option, "takes no value");
      *flag->second = true;
    } else if (const auto setter = valued.find(option); setter != valued.end()) {
      if (!inline_value) {
        if (i + 1 >= argc) fail(option, "needs a value");
        value = argv[++i];
      }
      setter->second(option, value);
    } else {
      unknown(option);
    }
  }
  if (options.help) return options;
  options.backend = choose_backend(raw.backend);
  if (options.threads > 0 && options.backend.backend != HOPATTN_BACKEND_CPU)
    fail("--threads", "sets the CPU backend's threads, but the cases run on " +
                          std::string(backend_label(options.backend.backend)) +
                          " (add --backend cpu)");
  options.cases = expand_cases(raw, options.sweep, options.backend.backend);
  return options;
}

std::vector<int32_t> parse_varlen(const std::string& option, const std::string& value) {
  // A listed length may be 0 (an empty sequence); TOTAL, MIN and MAX are positive.
  const auto length_of = [&](const std::string& text) {
    const int64_t length = text == "0" ? 0 : parse_positive(option, text);
    if (length > INT32_MAX) fail(option, "a length must fit in int32, got '" + text + "'");
    return static_cast<int32_t>(length);
  };
  if (value.rfind("random:", 0) != 0) {
    std::vector<int32_t> lengths;
    int64_t total = 0;
    for (const std::string& item : split_list(option, value)) {
      lengths.push_back(length_of(item));
      total += lengths.back();
    }
    if (total > INT32_MAX) fail(option, "the lengths must sum to less than 2^31");
    if (total == 0) fail(option, "the lengths must not all be 0");
    return lengths;
  }
  std::vector<std::string> fields;
  std::stringstream stream(value.substr(7));
  for (std::string field; std::getline(stream, field, ':');) fields.push_back(field);
  if (fields.size() != 1 && fields.size() != 3)
    fail(option, "random takes TOTAL or TOTAL:MIN:MAX, got '" + value + "'");
  const int32_t total = static_cast<int32_t>(parse_positive(option, fields[0]));
  const int32_t min = fields.size() == 3 ? length_of(fields[1]) : 128;
  const int32_t max = fields.size() == 3 ? length_of(fields[2]) : 8192;
  if (min < 1 || min > max) fail(option, "needs 1 <= MIN <= MAX in '" + value + "'");
  std::mt19937_64 rng(20240711);
  std::uniform_int_distribution<int32_t> uniform(min, max);
  std::vector<int32_t> lengths;
  for (int64_t sum = 0; sum < total;) {
    const int32_t length = static_cast<int32_t>(std::min<int64_t>(uniform(rng), total - sum));
    lengths.push_back(length);
    sum += length;
  }
  return lengths;
}

const char* help_text() {
  return R"(usage: hopattn-bench [options]

Times hopattn_forward (hopattn_forward_fp8 for --dtype e4m3) and checks sampled output rows
against a float64 reference.
Without options it runs the main job on the best available backend:
  sm90 (a Hopper GPU is visible): bf16, batch 2, seqlen 8192, heads 16, head_dim 128
  cpu  (otherwise):               bf16, batch 1, seqlen 2048, heads 16, head_dim 128
The header says which backend runs and why. Inputs are N(0,1). Time is the median over
--iters runs after --warmup runs (sm90: timed with CUDA events; cpu: with steady_clock).

exit status (when several apply, the largest):
  0  every case ran and passed its check
  1  a case failed its check or its output holds NaN
  2  bad option or value (nothing was run)
  3  --json or --plot cannot be written (checked before any case runs), or python3 with
     matplotlib is missing for --plot
  4  the backend is unavailable (e.g. --backend sm90 without a Hopper GPU; nothing was run)
     or the library refused a case

options (those marked LIST take comma-separated values; every combination is run):
  --batch LIST          batch size
  --seqlen-q LIST       query sequence length
  --seqlen-k LIST       key/value sequence length (default: equal to seqlen-q)
  --heads LIST          query heads
  --heads-kv LIST       key/value heads, dividing --heads (default: equal to heads)
  --head-dim LIST       head dimension
  --dtype LIST          fp32, bf16, fp16 or e4m3 (default bf16). e4m3 times the FP8 forward
                        (hopattn_forward_fp8, bf16 output) on bf16 inputs quantised before
                        the timed runs, Q and K rotated (a power-of-two head_dim) with one
                        scale per 128 rows, V one per head; it is checked against float64
                        attention of the unquantised bf16 inputs, within FP8's accuracy
                        (relative error 0.1, LSE 0.25). Not with --varlen
  --causal              bottom-right aligned causal mask
  --scale X             softmax scale > 0 (default 1/sqrt(head_dim))
  --backend NAME        auto, cpu or sm90 (default auto: sm90 if available, else cpu)
  --varlen LIST         a variable-length batch (hopattn_forward_varlen): one sequence per
                        length, as many keys as queries, e.g. 128,4096,1000; or
                        random:TOTAL[:MIN:MAX], lengths drawn from MIN..MAX (default
                        128..8192, fixed seed) until they sum to TOTAL tokens. Not with
                        --batch, --seqlen-q, --seqlen-k or --sweep. FLOPs are summed per
                        sequence.
  --iters N             timed runs per case (default 20 on sm90, 5 on cpu)
  --warmup N            untimed runs before them, 0 or more (default 3 on sm90, 1 on cpu)
  --threads N           run the cpu backend on N threads (sets HOPATTN_NUM_THREADS before
                        the library starts its thread pool; cpu backend only)
  --sweep               seqlen 1024, 2048, 4096 (unless --seqlen-q is given), each with and
                        without the causal mask (only with it if --causal is given);
                        progress on stderr
  --json FILE           write JSON Lines to FILE: first a header object ("type": "header":
                        host, build, version, git commit, command line, backend and why),
                        then one object per case ("type": "case": parameters, times, FLOPs,
                        errors, check), each written and flushed as its case finishes, so an
                        interrupted run keeps the finished cases. FILE is opened (and
                        truncated) before any case runs
  --plot FILE           after the run, draw throughput against seqlen of the cases just run
                        into the PNG FILE, with tools/plot_bench.py (python3 and matplotlib,
                        both checked before any case runs)
  -h, --help            this text
)";
}

const char* dtype_label(hopattn_dtype dtype) {
  switch (dtype) {
    case HOPATTN_DTYPE_FLOAT32:
      return "fp32";
    case HOPATTN_DTYPE_BFLOAT16:
      return "bf16";
    case HOPATTN_DTYPE_FLOAT16:
      return "fp16";
    case HOPATTN_DTYPE_FLOAT8_E4M3:
      return "e4m3";
  }
  return "?";
}

const char* backend_label(hopattn_backend backend) {
  switch (backend) {
    case HOPATTN_BACKEND_AUTO:
      return "auto";
    case HOPATTN_BACKEND_CPU:
      return "cpu";
    case HOPATTN_BACKEND_SM90:
      return "sm90";
  }
  return "?";
}

}  // namespace hopattn::bench
