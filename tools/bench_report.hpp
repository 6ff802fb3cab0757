// What hopattn-bench prints: the results table, the sweep progress bar and the JSON file.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench_run.hpp"

namespace hopattn::bench {

void print_header(std::FILE* out, const std::vector<CaseSpec>& cases);
void print_row(std::FILE* out, const CaseResult& result);
// "[#####-----] 3/12 label" on stderr before a case runs, redrawn in place on a terminal.
void print_progress(size_t done, size_t total, const std::string& label);
// Erases the bar on a terminal, before a table row is printed.
void clear_progress();
std::string case_label(const CaseSpec& spec);

// Throws std::runtime_error naming the file if it cannot be written.
void write_json(const std::string& path, const std::vector<CaseResult>& results,
                const std::string& command_line);

}  // namespace hopattn::bench
