// Command-line options of hopattn-bench and the list of cases they describe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hopattn/hopattn.h"

namespace hopattn::bench {

// One attention problem to time and check.
struct CaseSpec {
  // Fixed length: batch sequences of seqlen_q queries and seqlen_k keys. Variable length
  // (varlen_lengths not empty): one sequence per entry, as many queries as keys, packed; batch is
  // then the number of sequences and seqlen_q = seqlen_k the total.
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  std::vector<int32_t> varlen_lengths;
  hopattn_dtype dtype = HOPATTN_DTYPE_BFLOAT16;
  bool causal = false;
  float scale = 0.f;                              // 0: the library's default 1/sqrt(head_dim)
  hopattn_backend backend = HOPATTN_BACKEND_CPU;  // resolved: never AUTO
  int warmup = 0, iters = 0;
};

// The backend the cases run on; backend_reason (bench_run.hpp) says why.
struct BackendChoice {
  hopattn_backend backend = HOPATTN_BACKEND_CPU;  // resolved: never AUTO
  bool requested = false;  // named by --backend rather than picked by auto
  bool available = true;   // false only for a requested sm90 that this machine cannot run
};

struct Options {
  bool help = false;
  bool sweep = false;
  std::string json_path;  // empty: no JSON Lines file
  std::string plot_path;  // empty: no plot
  int threads = 0;        // 0: every CPU the process may run on
  BackendChoice backend;
  std::vector<CaseSpec> cases;
};

// Parses argv into options and the cases to run. Throws UsageError naming the option at
// fault and what it allows (for an unknown option, the nearest known one).
Options parse_options(int argc, char** argv);

struct UsageError {
  std::string message;
};

// The process's exit status, documented in --help; when several apply, the largest.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailedCheck = 1,   // a case's output failed the reference check or held NaN
  kExitUsage = 2,         // bad option or value; nothing was run
  kExitOutputError = 3,   // --json or --plot could not be written
  kExitBackendError = 4,  // the backend is unavailable, or the library refused a case
};

const char* help_text();
// --varlen's value: "128,4096,1000", or "random:TOTAL[:MIN:MAX]" (lengths uniform in MIN..MAX,
// default 128..8192, the last one cut so that they sum to TOTAL; a fixed seed).
std::vector<int32_t> parse_varlen(const std::string& option, const std::string& value);
const char* dtype_label(hopattn_dtype dtype);
const char* backend_label(hopattn_backend backend);

}  // namespace hopattn::bench
