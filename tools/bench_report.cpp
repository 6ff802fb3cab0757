#include "bench_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "hopattn/hopattn.h"

namespace hopattn::bench {
namespace {

std::string shape_of(const CaseSpec& s) {
  char buf[96];
  if (!s.varlen_lengths.empty()) {
    int32_t longest = 0;
    for (int32_t length : s.varlen_lengths) longest = std::max(longest, length);
    std::snprintf(buf, sizeof buf, "varlen(n=%lld,total=%lld,max=%d,%lld,%lld,%lld)",
                  static_cast<long long>(s.batch), static_cast<long long>(s.seqlen_q), longest,
                  static_cast<long long>(s.heads_q), static_cast<long long>(s.heads_kv),
                  static_cast<long long>(s.head_dim));
    return buf;
  }
  std::snprintf(buf, sizeof buf, "(%lld,%lld,%lld,%lld,%lld,%lld)", static_cast<long long>(s.batch),
                static_cast<long long>(s.seqlen_q), static_cast<long long>(s.seqlen_k),
                static_cast<long long>(s.heads_q), static_cast<long long>(s.heads_kv),
                static_cast<long long>(s.head_dim));
  return buf;
}

std::string throughput(const CaseResult& r) {
  // TFLOP/s is the unit GPU attention is quoted in; a CPU is two to three orders slower.
  const bool gpu = r.spec.backend == HOPATTN_BACKEND_SM90;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", r.flops_per_second() / (gpu ? 1e12 : 1e9),
                gpu ? "TFLOP/s" : "GFLOP/s");
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string json_string(const std::string& s) { return "\"" + json_escape(s) + "\""; }

// JSON has no NaN or infinity; an error that could not be computed is null.
std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", x);
  return buf;
}

std::string run_command(const std::string& command) {
  std::string out;
  if (std::FILE* pipe = popen(command.c_str(), "r")) {
    char buf[128];
    while (std::fgets(buf, sizeof buf, pipe)) out += buf;
    if (pclose(pipe) != 0) out.clear();
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Asked of git at run time, so a rebuild is not needed for the commit to be right.
std::string git_commit() {
  const std::string commit =
      run_command("git -C '" HOPATTN_SOURCE_DIR "' rev-parse HEAD 2>/dev/null");
  return commit.empty() ? "unknown" : commit;
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown";
}

}  // namespace

std::string case_label(const CaseSpec& s) {
  return std::string(backend_label(s.backend)) + " " + dtype_label(s.dtype) + " " + shape_of(s) +
         (s.causal ? " causal" : "");
}

void print_header(std::FILE* out, const std::vector<CaseSpec>& cases) {
  std::fprintf(out, "hopattn %s on %s\n", hopattn_version(),
               cases.empty() ? "-" : device_name(cases.front().backend).c_str());
  std::fprintf(out, "%-7s %-38s %-5s %-6s %10s %15s %9s %9s  %s\n", "backend",
               "shape (b,sq,sk,h,hkv,d)", "dtype", "causal", "time (ms)", "throughput", "rel err",
               "rmse", "check");
}

void print_row(std::FILE* out, const CaseResult& r) {
  const CaseSpec& s = r.spec;
  if (r.status != HOPATTN_OK) {
    std::fprintf(out, "%-7s %-38s %-5s %-6s  %s: %s\n", backend_label(s.backend),
                 shape_of(s).c_str(), dtype_label(s.dtype), s.causal ? "yes" : "no",
                 hopattn_status_name(r.status), r.error.c_str());
    return;
  }
  std::fprintf(out, "%-7s %-38s %-5s %-6s %10.3f %15s %9.2e %9.2e  %s\n", backend_label(s.backend),
               shape_of(s).c_str(), dtype_label(s.dtype), s.causal ? "yes" : "no", r.median_ms,
               throughput(r).c_str(), r.rel_error, r.rmse,
               r.pass             ? "PASS"
               : r.output_has_nan ? "FAIL (NaN)"
                                  : "FAIL");
  std::fflush(out);
}

void print_progress(size_t done, size_t total, const std::string& label) {
  constexpr size_t kWidth = 24;
  const size_t filled = total ? done * kWidth / total : kWidth;
  const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '-');
  // Redrawn in place on a terminal; one line per step in a log, where \r would pile up.
  const bool tty = isatty(STDERR_FILENO);
  std::fprintf(stderr, "%s[%s] %zu/%zu %s%s", tty ? "\r\033[K" : "", bar.c_str(), done, total,
               label.c_str(), tty ? "" : "\n");
  std::fflush(stderr);
}

void clear_progress() {
  if (isatty(STDERR_FILENO)) std::fputs("\r\033[K", stderr);
}

void write_json(const std::string& path, const std::vector<CaseResult>& results,
                const std::string& command_line) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("--json: cannot write '" + path + "'");
  out << "{\n  \"tool\": \"hopattn-bench\",\n"
      << "  \"version\": " << json_string(hopattn_version()) << ",\n"
      << "  \"git_commit\": " << json_string(git_commit()) << ",\n"
      << "  \"build_info\": " << json_string(hopattn_build_info()) << ",\n"
      << "  \"command_line\": " << json_string(command_line) << ",\n"
      << "  \"host\": {\"name\": " << json_string(host_name())
      << ", \"cpu\": " << json_string(device_name(HOPATTN_BACKEND_CPU))
      << ", \"hardware_threads\": " << std::thread::hardware_concurrency() << "},\n"
      << "  \"cases\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const CaseResult& r = results[i];
    const CaseSpec& s = r.spec;
    out << (i ? "," : "") << "\n    {\"backend\": " << json_string(backend_label(s.backend))
        << ", \"device\": " << json_string(device_name(s.backend))
        << ", \"dtype\": " << json_string(dtype_label(s.dtype)) << ", \"batch\": " << s.batch
        << ", \"seqlen_q\": " << s.seqlen_q << ", \"seqlen_k\": " << s.seqlen_k
        << ", \"heads_q\": " << s.heads_q << ", \"heads_kv\": " << s.heads_kv
        << ", \"head_dim\": " << s.head_dim << ", \"causal\": " << (s.causal ? "true" : "false")
        << ", \"varlen_lengths\": ";
    if (s.varlen_lengths.empty()) {
      out << "null";
    } else {
      out << "[";
      for (size_t l = 0; l < s.varlen_lengths.size(); ++l)
        out << (l ? ", " : "") << s.varlen_lengths[l];
      out << "]";
    }
    out << ", \"scale\": " << (s.scale > 0 ? json_number(s.scale) : "null")
        << ", \"warmup\": " << s.warmup << ", \"iters\": " << s.iters
        << ",\n     \"status\": " << json_string(hopattn_status_name(r.status))
        << ", \"error\": " << json_string(r.error) << ", \"times_ms\": [";
    for (size_t t = 0; t < r.times_ms.size(); ++t)
      out << (t ? ", " : "") << json_number(r.times_ms[t]);
    out << "], \"median_ms\": " << json_number(r.median_ms)
        << ", \"flops\": " << json_number(r.flops)
        << ", \"flops_per_second\": " << json_number(r.flops_per_second())
        << ",\n     \"sampled_rows\": " << r.sampled_rows
        << ", \"rel_error\": " << json_number(r.rel_error) << ", \"rmse\": " << json_number(r.rmse)
        << ", \"lse_max_abs_error\": " << json_number(r.lse_max_abs_error)
        << ", \"rel_error_tolerance\": " << json_number(rel_error_tolerance(s.dtype))
        << ", \"output_has_nan\": " << (r.output_has_nan ? "true" : "false")
        << ", \"pass\": " << (r.pass ? "true" : "false") << "}";
  }
  out << "\n  ]\n}\n";
  if (!out) throw std::runtime_error("--json: error writing '" + path + "'");
}

}  // namespace hopattn::bench
