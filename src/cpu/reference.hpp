// The float64 reference: attention computed the plain way, one query row at a time, for the
// tests and the benchmark's correctness check. Fixed-length and variable-length batches, through
// core/seqlen.hpp like the backends. Not part of libhopattn.so.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.hpp"

namespace hopattn {

// Query `row` (counted within the sequence) of `head` in sequence `sequence` (a batch entry for
// fixed lengths).
struct RowIndex {
  int64_t sequence = 0, head = 0, row = 0;
};

// Output row and natural-log LSE of `at` attending to the sequence's keys [0, key_end):
// out[head_dim] = 0 and lse = -inf when key_end is 0. The mask is the caller's choice so that
// tests can build deliberately wrong ones; the functions below use visible_key_end.
void reference_row(const ForwardProblem& problem, const RowIndex& at, int64_t key_end, double* out,
                   double& lse);

// Every row: out is (tensor batch, total_q, heads_q, head_dim) contiguous, i.e. (batch, seqlen_q,
// heads_q, head_dim) for fixed lengths and (total_q, heads_q, head_dim) for varlen; lse is laid
// out as the C API's (lse_index). Rows no sequence covers stay 0.
void reference_forward(const ForwardProblem& problem, std::vector<double>& out,
                       std::vector<double>& lse);

// Selected rows: out is (rows.size(), head_dim), lse (rows.size()), in the order of `rows`.
void reference_rows(const ForwardProblem& problem, const std::vector<RowIndex>& rows,
                    std::vector<double>& out, std::vector<double>& lse);

// The gradients of the forward, in float64 from q, k, v and d_o alone (problem.o and problem.lse
// are not read): per row, P recomputed as the softmax of the scores the row sees, then
// dV = P^T dO, dP = dO V^T, D_i = sum_j P_ij dP_ij, dS = P * (dP - D), dQ = scale dS K,
// dK = scale dS^T Q; GQA sums dK and dV over the query heads of each kv head. dq is laid out as
// reference_forward's out, dk and dv as (tensor batch, total_k, heads_kv, head_dim) contiguous.
// Rows that see no key contribute nothing; rows no sequence covers (seqused_k's tails) stay 0.
void reference_backward(const BackwardProblem& problem, std::vector<double>& dq,
                        std::vector<double>& dk, std::vector<double>& dv);

}  // namespace hopattn
