// The FP8 forward on the CPU (hopattn_forward_fp8): the CPU forward's algorithm (forward.cpp) on
// the dequantised inputs, code * scale in float32 (Fp8Scales::index gives each row's scale), with
// no rounding of P: the reference the SM90 kernel's numerics are measured against.
//
// Dequantised where the algorithm converts its inputs anyway: as each task loads rows of q, k
// and v into its float32 tiles (a transposed V's rows gathered from its head_dim columns, so the
// tiles, and the results, are those of V in rows bit for bit). No float32 copy of a tensor is
// made, per (batch, head) or whole, so the memory is the tiles' whatever the shapes (a broadcast
// view of many rows would otherwise be materialised), and the threads split the work as in the
// 16-bit forward.
#include "cpu/cpu_backend.hpp"
#include "cpu/forward_inputs.hpp"

namespace hopattn::cpu {

Status forward_fp8(const Fp8ForwardProblem& problem) {
  Fp8Inputs fp8{&problem.q_scales, &problem.k_scales, &problem.v_scales, std::nullopt};
  if (problem.v_layout == Fp8Layout::kVTransposed) {
    fp8.v_transposed =
        VTransposedLayout::of(problem.seqlens.total_k, problem.heads_kv, problem.head_dim);
  }
  return run_forward(problem, DType::kFloat8E4M3, fp8);
}

}  // namespace hopattn::cpu
