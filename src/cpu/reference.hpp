// The float64 reference: attention computed the plain way, one query row at a time, for the
// tests and the benchmark's correctness check. Not part of libhopattn.so.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.hpp"

namespace hopattn {

struct RowIndex {
  int64_t batch = 0, head = 0, row = 0;
};

// Output row and natural-log LSE of query `row` of (batch, head) attending to keys
// [0, key_end): out[head_dim] = 0 and lse = -inf when key_end is 0. The mask is the caller's
// choice so that tests can build deliberately wrong ones; the functions below use
// visible_key_end.
void reference_row(const AttentionProblem& problem, int64_t batch, int64_t head, int64_t row,
                   int64_t key_end, double* out, double& lse);

// Every row: out is (batch, seqlen_q, heads_q, head_dim) contiguous, lse (batch, heads_q,
// seqlen_q) contiguous as in the C API.
void reference_forward(const AttentionProblem& problem, std::vector<double>& out,
                       std::vector<double>& lse);

// Selected rows: out is (rows.size(), head_dim), lse (rows.size()), in the order of `rows`.
void reference_rows(const AttentionProblem& problem, const std::vector<RowIndex>& rows,
                    std::vector<double>& out, std::vector<double>& lse);

}  // namespace hopattn
