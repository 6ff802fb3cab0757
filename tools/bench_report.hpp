// What hopattn-bench prints: the results table, the sweep progress bar and the JSON file.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench_run.hpp"

namespace hopattn::bench {

// What the header line and the JSON header say about the run as a whole.
struct RunInfo {
  BackendChoice backend;
  std::string backend_reason;  // backend_reason(backend)
  std::string command_line;
  int threads = 0;   // --threads; 0 if not given
  size_t cases = 0;  // the number planned, so a reader can tell a cut-short file
};

void print_header(std::FILE* out, const RunInfo& run);
void print_row(std::FILE* out, const CaseResult& result);
// "[#####-----] 3/12 label" on stderr before a case runs, redrawn in place on a terminal.
void print_progress(size_t done, size_t total, const std::string& label);
// Erases the bar on a terminal, before a table row is printed.
void clear_progress();
std::string case_label(const CaseSpec& spec);

// --json's file, JSON Lines: a header object, then one object per case, each line flushed
// as it is written so that an interrupted run keeps what finished. Every method throws
// std::runtime_error naming the file when it cannot be opened or written.
class JsonLinesWriter {
 public:
  explicit JsonLinesWriter(const std::string& path);  // opens and truncates now
  ~JsonLinesWriter();
  JsonLinesWriter(const JsonLinesWriter&) = delete;
  JsonLinesWriter& operator=(const JsonLinesWriter&) = delete;

  void write_header(const RunInfo& run);
  void write_case(size_t index, const CaseResult& result);
  void close();
  const std::string& path() const { return path_; }

 private:
  void write_line(const std::string& line);

  std::string path_;
  std::FILE* file_ = nullptr;
};

// --plot, through tools/plot_bench.py (next to the executable, in ../share/hopattn/ from it,
// or in the source tree) run by python3. check_plot, before any case runs: the script, python3
// and matplotlib are there and the PNG can be written; draw_plot reads a JSON Lines file.
// Both throw std::runtime_error saying what is missing.
void check_plot(const std::string& png_path);
void draw_plot(const std::string& jsonl_path, const std::string& png_path);

}  // namespace hopattn::bench
