// hopattn-bench: times hopattn_forward on the best available backend (or the one asked
// for) and checks sampled rows against the float64 reference. `--help` says how.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "bench_report.hpp"
#include "bench_run.hpp"

namespace {

constexpr int kExitFailedCheck = 1;
constexpr int kExitUsage = 2;
constexpr int kExitBackendError = 3;

std::string join_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + std::string(argv[i]);
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hopattn::bench;
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "hopattn-bench: %s\n", e.message.c_str());
    return kExitUsage;
  }
  if (options.help) {
    std::fputs(help_text(), stdout);
    return 0;
  }

  print_header(stdout, options.cases);
  std::vector<CaseResult> results;
  for (const CaseSpec& spec : options.cases) {
    if (options.sweep) print_progress(results.size(), options.cases.size(), case_label(spec));
    results.push_back(run_case(spec));
    if (options.sweep) clear_progress();
    print_row(stdout, results.back());
  }

  if (!options.json_path.empty()) {
    try {
      write_json(options.json_path, results, join_command_line(argc, argv));
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "hopattn-bench: %s\n", e.what());
      return kExitUsage;
    }
  }
  int exit_code = 0;
  for (const CaseResult& r : results) {
    if (r.status != HOPATTN_OK)
      exit_code = kExitBackendError;
    else if (!r.pass && exit_code == 0)
      exit_code = kExitFailedCheck;
  }
  return exit_code;
}
