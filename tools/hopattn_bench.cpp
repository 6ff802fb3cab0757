// hopattn-bench: times hopattn_forward on the best available backend (or the one asked
// for) and checks sampled rows against the float64 reference. `--help` says how.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "bench_report.hpp"
#include "bench_run.hpp"

namespace {

using namespace hopattn::bench;

std::string join_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + std::string(argv[i]);
  return line;
}

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "hopattn-bench: %s\n", message.c_str());
  return code;
}

// A JSON Lines file for --plot when --json names none; removed when the run ends.
struct ScratchFile {
  std::string path;
  ~ScratchFile() {
    if (!path.empty()) std::remove(path.c_str());
  }
  void create() {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir && *dir ? dir : "/tmp") + "/hopattn-bench-XXXXXX";
    const int fd = mkstemp(pattern.data());
    if (fd < 0) throw std::runtime_error("--plot: cannot create a file in " + pattern);
    close(fd);
    path = pattern;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageError& e) {
    return fail(kExitUsage, e.message);
  }
  if (options.help) {
    std::fputs(help_text(), stdout);
    return kExitOk;
  }
  // Before anything asks the library about the CPU backend, which starts its threads.
  if (options.threads > 0) {
    if (const std::string error = set_cpu_threads(options.threads); !error.empty())
      return fail(kExitUsage, "--threads: " + error);
  }
  RunInfo run;
  run.backend = options.backend;
  run.backend_reason = backend_reason(options.backend);
  run.command_line = join_command_line(argc, argv);
  run.threads = options.threads;
  run.cases = options.cases.size();
  if (!options.backend.available)
    return fail(kExitBackendError, "--backend " + run.backend_reason + "; no case was run");

  // Every output is opened before the first case, so a bad path costs no run time.
  std::unique_ptr<JsonLinesWriter> json;
  ScratchFile scratch;
  try {
    if (!options.plot_path.empty()) check_plot(options.plot_path);
    if (options.json_path.empty() && !options.plot_path.empty()) scratch.create();
    const std::string& json_path = options.json_path.empty() ? scratch.path : options.json_path;
    if (!json_path.empty()) {
      json = std::make_unique<JsonLinesWriter>(json_path);
      json->write_header(run);
    }
  } catch (const std::runtime_error& e) {
    return fail(kExitOutputError, std::string(e.what()) + "; no case was run");
  }

  print_header(stdout, run);
  int exit_code = kExitOk;
  for (size_t i = 0; i < options.cases.size(); ++i) {
    const CaseSpec& spec = options.cases[i];
    if (options.sweep) print_progress(i, options.cases.size(), case_label(spec));
    const CaseResult result = run_case(spec);
    if (options.sweep) clear_progress();
    print_row(stdout, result);
    if (result.status != HOPATTN_OK)
      exit_code = std::max<int>(exit_code, kExitBackendError);
    else if (!result.pass)
      exit_code = std::max<int>(exit_code, kExitFailedCheck);
    if (!json) continue;
    try {
      json->write_case(i, result);
    } catch (const std::runtime_error& e) {
      return fail(std::max<int>(exit_code, kExitOutputError),
                  std::string(e.what()) + "; stopped after " + std::to_string(i + 1) + " of " +
                      std::to_string(options.cases.size()) + " cases");
    }
  }

  try {
    if (json) json->close();
    if (!options.plot_path.empty()) draw_plot(json->path(), options.plot_path);
  } catch (const std::runtime_error& e) {
    return fail(std::max<int>(exit_code, kExitOutputError), e.what());
  }
  return exit_code;
}
