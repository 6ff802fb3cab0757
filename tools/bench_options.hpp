// Command-line options of hopattn-bench and the list of cases they describe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hopattn/hopattn.h"

namespace hopattn::bench {

// One attention problem to time and check.
struct CaseSpec {
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  hopattn_dtype dtype = HOPATTN_DTYPE_BFLOAT16;
  bool causal = false;
  float scale = 0.f;                              // 0: the library's default 1/sqrt(head_dim)
  hopattn_backend backend = HOPATTN_BACKEND_CPU;  // resolved: never AUTO
  int warmup = 0, iters = 0;
};

struct Options {
  bool help = false;
  bool sweep = false;
  std::string json_path;  // empty: no JSON file
  std::vector<CaseSpec> cases;
};

// Parses argv into options and the cases to run. Throws UsageError naming the option at
// fault and what it allows.
Options parse_options(int argc, char** argv);

struct UsageError {
  std::string message;
};

const char* help_text();
const char* dtype_label(hopattn_dtype dtype);
const char* backend_label(hopattn_backend backend);

}  // namespace hopattn::bench
