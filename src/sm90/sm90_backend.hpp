// The Hopper (sm_90a) backend as the dispatcher sees it. Built from src/sm90/ when CUDA is
// found; otherwise src/sm90/sm90_unavailable.cpp answers that it is not in this build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/problem.hpp"

namespace hopattn::sm90 {

// The kernels this build contains, whether or not a device is present.
bool built();
bool supports(DType dtype, int64_t head_dim);
// "bfloat16 with head_dim 64/96/128/192/256; float16 with ..." or "nothing": for messages.
std::string supported_list();
// A compute-capability 9.0 device is current on this thread.
bool device_available();
// Bytes of workspace forward(problem) needs; 0 when none.
size_t forward_workspace_size(const ForwardProblem& problem);
// Runs on problem.cuda_stream. The problem is validated (including sm90_rules.hpp); failures are
// reported through hopattn::set_error and returned.
Status forward(const ForwardProblem& problem);

// The backward kernels this build contains (a subset of the forward's dtype x head_dim).
bool supports_backward(DType dtype, int64_t head_dim);
// Bytes of workspace backward(problem) needs (the float32 dq accumulator, the row dot products
// D = rowsum(dO * O), scheduler state); 0 when none.
size_t backward_workspace_size(const BackwardProblem& problem);
// As forward(): a validated problem, run on problem.cuda_stream.
Status backward(const BackwardProblem& problem);

// FP8 attention (hopattn_forward_fp8): the head_dims of the FP8 kernels for output dtype
// `out_dtype`, from the generated table, and the rules of sm90_rules.cpp on the scales.
bool supports_fp8(DType out_dtype, int64_t head_dim);
// "bfloat16 with head_dim 64/128/256; float16 with ..." or "nothing": for messages.
std::string fp8_supported_list();
size_t forward_fp8_workspace_size(const Fp8ForwardProblem& problem);
// As forward(): a validated problem, run on problem.cuda_stream.
Status forward_fp8(const Fp8ForwardProblem& problem);

// FP8 quantisation on the GPU, bit for bit the CPU backend's codes and scales; asynchronous on
// problem.cuda_stream (its workspace, one float per scale, allocated stream-ordered).
Status quantize_fp8(const QuantizeProblem& problem);

}  // namespace hopattn::sm90
