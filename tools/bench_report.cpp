#include "bench_report.hpp"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
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

extern "C" char** environ;

// Runs argv (argv[0] searched on PATH) with stdout and stderr captured in `output`. Returns
// its exit status, 128 + the signal that ended it, or -1 when it could not start (`output`
// then says why).
int run_captured(const std::vector<std::string>& args, std::string& output) {
  output.clear();
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    output = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawn_error != 0) {
    close(pipe_fds[0]);
    output = args[0] + ": " + std::strerror(spawn_error);
    return -1;
  }
  char buf[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) != 0;) {
    if (n > 0)
      output.append(buf, static_cast<size_t>(n));
    else if (errno != EINTR)
      break;
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!output.empty() && (output.back() == '\n' || output.back() == '\r')) output.pop_back();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string directory_of_executable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  const std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The first of: beside the executable, an installed share/hopattn/, the source tree's tools/.
std::string plot_script() {
  const std::string exe_dir = directory_of_executable();
  const std::string candidates[] = {exe_dir + "/plot_bench.py",
                                    exe_dir + "/../share/hopattn/plot_bench.py",
                                    HOPATTN_SOURCE_DIR "/tools/plot_bench.py"};
  for (const std::string& candidate : candidates)
    if (is_file(candidate)) return candidate;
  std::string tried;
  for (const std::string& candidate : candidates) tried += (tried.empty() ? "" : ", ") + candidate;
  throw std::runtime_error("--plot: plot_bench.py not found (looked at " + tried + ")");
}

}  // namespace

std::string case_label(const CaseSpec& s) {
  return std::string(backend_label(s.backend)) + " " + dtype_label(s.dtype) + " " + shape_of(s) +
         (s.causal ? " causal" : "");
}

void print_header(std::FILE* out, const RunInfo& run) {
  const hopattn_backend backend = run.backend.backend;
  std::string cpus;
  if (backend == HOPATTN_BACKEND_CPU) {
    if (run.threads > 0) {
      cpus = " (" + std::to_string(run.threads) + (run.threads == 1 ? " thread" : " threads") +
             ", set by --threads)";
    } else {
      const int count = usable_cpu_count();
      cpus = " (" + std::to_string(count) + (count == 1 ? " CPU" : " CPUs") + ")";
    }
  }
  std::fprintf(out, "hopattn %s on %s%s\nbackend %s\n", hopattn_version(),
               device_name(backend).c_str(), cpus.c_str(), run.backend_reason.c_str());
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

JsonLinesWriter::JsonLinesWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr)
    throw std::runtime_error("--json: cannot open '" + path +
                             "' for writing: " + std::strerror(errno));
}

JsonLinesWriter::~JsonLinesWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void JsonLinesWriter::write_line(const std::string& line) {
  if (file_ == nullptr) throw std::runtime_error("--json: '" + path_ + "' is closed");
  if (std::fputs(line.c_str(), file_) == EOF || std::fputc('\n', file_) == EOF ||
      std::fflush(file_) != 0)
    throw std::runtime_error("--json: error writing '" + path_ + "': " + std::strerror(errno));
}

void JsonLinesWriter::close() {
  std::FILE* file = file_;
  file_ = nullptr;
  if (file != nullptr && std::fclose(file) != 0)
    throw std::runtime_error("--json: error closing '" + path_ + "': " + std::strerror(errno));
}

void JsonLinesWriter::write_header(const RunInfo& run) {
  const hopattn_backend backend = run.backend.backend;
  std::string line = "{\"type\": \"header\", \"tool\": \"hopattn-bench\"";
  line += ", \"version\": " + json_string(hopattn_version());
  line += ", \"git_commit\": " + json_string(git_commit());
  line += ", \"build_info\": " + json_string(hopattn_build_info());
  line += ", \"command_line\": " + json_string(run.command_line);
  line += ", \"host\": {\"name\": " + json_string(host_name()) +
          ", \"cpu\": " + json_string(device_name(HOPATTN_BACKEND_CPU)) +
          ", \"hardware_threads\": " + std::to_string(std::thread::hardware_concurrency()) +
          ", \"usable_cpus\": " + std::to_string(usable_cpu_count()) + "}";
  line += ", \"backend\": " + json_string(backend_label(backend));
  line += ", \"backend_reason\": " + json_string(run.backend_reason);
  line += ", \"device\": " + json_string(device_name(backend));
  line += ", \"threads\": " + (run.threads > 0 ? std::to_string(run.threads) : "null");
  line += ", \"cases\": " + std::to_string(run.cases) + "}";
  write_line(line);
}

void JsonLinesWriter::write_case(size_t index, const CaseResult& r) {
  const CaseSpec& s = r.spec;
  std::string line = "{\"type\": \"case\", \"index\": " + std::to_string(index);
  line += ", \"backend\": " + json_string(backend_label(s.backend));
  line += ", \"device\": " + json_string(device_name(s.backend));
  line += ", \"dtype\": " + json_string(dtype_label(s.dtype));
  line += ", \"batch\": " + std::to_string(s.batch);
  line += ", \"seqlen_q\": " + std::to_string(s.seqlen_q);
  line += ", \"seqlen_k\": " + std::to_string(s.seqlen_k);
  line += ", \"heads_q\": " + std::to_string(s.heads_q);
  line += ", \"heads_kv\": " + std::to_string(s.heads_kv);
  line += ", \"head_dim\": " + std::to_string(s.head_dim);
  line += ", \"causal\": " + std::string(s.causal ? "true" : "false");
  line += ", \"varlen_lengths\": ";
  if (s.varlen_lengths.empty()) {
    line += "null";
  } else {
    line += "[";
    for (size_t l = 0; l < s.varlen_lengths.size(); ++l)
      line += (l ? ", " : "") + std::to_string(s.varlen_lengths[l]);
    line += "]";
  }
  line += ", \"scale\": " + (s.scale > 0 ? json_number(s.scale) : "null");
  line += ", \"warmup\": " + std::to_string(s.warmup);
  line += ", \"iters\": " + std::to_string(s.iters);
  line += ", \"status\": " + json_string(hopattn_status_name(r.status));
  line += ", \"error\": " + json_string(r.error);
  line += ", \"times_ms\": [";
  for (size_t t = 0; t < r.times_ms.size(); ++t)
    line += (t ? ", " : "") + json_number(r.times_ms[t]);
  line += "], \"median_ms\": " + json_number(r.median_ms);
  line += ", \"flops\": " + json_number(r.flops);
  line += ", \"flops_per_second\": " + json_number(r.flops_per_second());
  line += ", \"sampled_rows\": " + std::to_string(r.sampled_rows);
  line += ", \"rel_error\": " + json_number(r.rel_error);
  line += ", \"rmse\": " + json_number(r.rmse);
  line += ", \"lse_max_abs_error\": " + json_number(r.lse_max_abs_error);
  line += ", \"rel_error_tolerance\": " + json_number(rel_error_tolerance(s.dtype));
  line += ", \"lse_tolerance\": " + json_number(lse_tolerance(s.dtype));
  line += ", \"output_has_nan\": " + std::string(r.output_has_nan ? "true" : "false");
  line += ", \"pass\": " + std::string(r.pass ? "true" : "false") + "}";
  write_line(line);
}

void check_plot(const std::string& png_path) {
  const std::string script = plot_script();
  std::string output;
  const int status = run_captured({"python3", script, "--check"}, output);
  if (status != 0)
    throw std::runtime_error("--plot: " + (status < 0 ? output + " (python3 is needed)" : output));
  // Whether the PNG can be written, without leaving a file behind if there was none.
  struct stat st {};
  const bool existed = stat(png_path.c_str(), &st) == 0;
  std::FILE* probe = std::fopen(png_path.c_str(), "a");
  if (probe == nullptr)
    throw std::runtime_error("--plot: cannot open '" + png_path +
                             "' for writing: " + std::strerror(errno));
  std::fclose(probe);
  if (!existed) std::remove(png_path.c_str());
}

void draw_plot(const std::string& jsonl_path, const std::string& png_path) {
  std::string output;
  const int status = run_captured({"python3", plot_script(), jsonl_path, png_path}, output);
  if (status != 0) throw std::runtime_error("--plot: " + output);
}

}  // namespace hopattn::bench
