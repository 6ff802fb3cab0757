// FlashAttention-3's bf16 forward and backward at one head_dim (FA3_HARNESS_HEAD_DIM: 64, 128 or 256)
// called without torch, for A/Bs against FA3 itself: its kernels built from its source
// (scripts/build_fa3_harness.sh), unchanged or with one edit, and timed beside hopattn's builds by
// bench/ab_kernels.py. The parameters are those FA3's mha_fwd and mha_bwd set for fixed-length
// batches in (batch, seqlen, heads, head_dim) layout without splits, paging or softcap; the
// backward's for equal head counts, not deterministic.
#include <cstddef>

#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include "flash.h"

#ifndef FA3_HARNESS_HEAD_DIM
#define FA3_HARNESS_HEAD_DIM 128
#endif

namespace {
constexpr int kHeadDim = FA3_HARNESS_HEAD_DIM;
static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
              "the harness knows FA3's backward blocks at these head_dims only");

// What mha_fwd and mha_bwd both set (set_params_fprop): q, k, v, o and the LSE in (batch, seqlen,
// heads, head_dim) layout, the lengths, the scale, no dropout, the causal mask or none.
void set_forward_fields(Flash_fwd_params& p, void* q, void* k, void* v, void* o, float* lse, int batch, int seqlen,
                        int heads, int kv_heads, bool causal, int num_sm, float softmax_scale) {
  p.is_bf16 = true;
  p.q_ptr = q;
  p.k_ptr = k;
  p.v_ptr = v;
  p.o_ptr = o;
  p.softmax_lse_ptr = lse;
  p.q_row_stride = p.o_row_stride = int64_t(heads) * kHeadDim;
  p.k_row_stride = p.v_row_stride = int64_t(kv_heads) * kHeadDim;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = kHeadDim;
  p.v_dim_stride = 1;
  p.q_batch_stride = p.o_batch_stride = int64_t(seqlen) * p.q_row_stride;
  p.k_batch_stride = p.v_batch_stride = int64_t(seqlen) * p.k_row_stride;
  p.b = batch;
  p.h = heads;
  p.h_k = kv_heads;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.seqlen_q_rounded = p.seqlen_k_rounded = (seqlen + 127) / 128 * 128;
  p.d = p.d_rounded = p.dv = p.dv_rounded = kHeadDim;
  p.scale_softmax = softmax_scale;
  p.p_dropout = p.rp_dropout = 1.f;  // keep probability 1: no dropout
  p.p_dropout_in_uint8_t = 255;
  p.is_causal = causal;
  p.window_size_left = seqlen - 1;
  p.window_size_right = causal ? 0 : seqlen - 1;
  p.arch = 90;
  p.num_sm = num_sm;
}
}  // namespace

// Returns 0, 1 where the semaphore could not be cleared, 2 where the launch failed.
extern "C" int fa3_harness_forward(void* q, void* k, void* v, void* o, float* lse, int batch, int seqlen,
                                   int heads, int kv_heads, int causal, int* tile_semaphore, int num_sm,
                                   float softmax_scale, cudaStream_t stream) {
  Flash_fwd_params p = {};
  set_forward_fields(p, q, k, v, o, lse, batch, seqlen, heads, kv_heads, causal != 0, num_sm, softmax_scale);
  p.b_k = batch;
  p.num_splits = 1;
  p.varlen_sort_batches = true;
  p.head_swizzle = p.is_causal;
  if (causal) {  // FA3's causal scheduler takes tiles from a counter that starts at 0 every call
    if (cudaMemsetAsync(tile_semaphore, 0, sizeof(int), stream) != cudaSuccess) return 1;
    p.tile_count_semaphore = tile_semaphore;
  }
  run_mha_fwd_<90, cutlass::bfloat16_t, kHeadDim, kHeadDim, false, false, false, false>(p, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

namespace {

constexpr size_t kAlignment = 256;

size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// The query rows of FA3's backward blocks on sm90 (mha_bwd's kBlockM_sm90 without softcap, as its
// flash_bwd_launch_template.h instantiates them): 128 at head_dim 64, 64 causal and 80 otherwise at
// 128, 64 at 256.
constexpr int backward_block_m(bool causal) {
  return kHeadDim == 64 ? 128 : kHeadDim == 128 ? (causal ? 64 : 80) : 64;
}

// mha_bwd's buffers beside the gradients.
struct BackwardWorkspace {
  int block_m, seqlen_q_rounded;
  size_t row_floats, dq_accum_floats, semaphore_ints;

  BackwardWorkspace(int batch, int seqlen, int heads, bool causal) {
    block_m = backward_block_m(causal);
    seqlen_q_rounded = (seqlen + block_m - 1) / block_m * block_m;
    row_floats = size_t(batch) * heads * seqlen_q_rounded;  // D = rowsum(dO * O), and the LSE in log2
    dq_accum_floats = row_floats * kHeadDim;
    semaphore_ints = size_t((seqlen + block_m - 1) / block_m) * batch * heads;
  }
  size_t bytes() const {
    return 2 * aligned(row_floats * 4) + aligned(dq_accum_floats * 4) + aligned(semaphore_ints * 4);
  }
};

}  // namespace

extern "C" size_t fa3_harness_backward_workspace_bytes(int batch, int seqlen, int heads, int causal) {
  return BackwardWorkspace(batch, seqlen, heads, causal != 0).bytes();
}

// `workspace`: fa3_harness_backward_workspace_bytes of device memory, used as mha_bwd's torch::empty
// buffers are (FA3's preprocess clears dQ's accumulator). Returns 0, or 2 where the launch failed.
extern "C" int fa3_harness_backward(void* q, void* k, void* v, void* o, void* d_o, float* lse, void* dq, void* dk,
                                    void* dv, int batch, int seqlen, int heads, int causal, int num_sm,
                                    float softmax_scale, void* workspace, cudaStream_t stream) {
  const BackwardWorkspace w(batch, seqlen, heads, causal != 0);
  char* next = static_cast<char*>(workspace);
  auto take = [&](size_t bytes) {
    void* taken = next;
    next += aligned(bytes);
    return taken;
  };
  Flash_bwd_params p = {};
  set_forward_fields(p, q, k, v, o, lse, batch, seqlen, heads, heads, causal != 0, num_sm, softmax_scale);
  p.seqlen_q_rounded = w.seqlen_q_rounded;  // the backward's query blocks, not 128
  p.total_q = p.total_k = batch * seqlen;
  // dO, dQ, dK and dV in q's layout.
  p.do_ptr = d_o;
  p.dq_ptr = dq;
  p.dk_ptr = dk;
  p.dv_ptr = dv;
  p.do_row_stride = p.dq_row_stride = p.dk_row_stride = p.dv_row_stride = p.q_row_stride;
  p.do_head_stride = p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = kHeadDim;
  p.do_batch_stride = p.dq_batch_stride = p.dk_batch_stride = p.dv_batch_stride = p.q_batch_stride;
  p.dsoftmax_sum = take(w.row_floats * 4);
  p.softmax_lse_log2_ptr = take(w.row_floats * 4);
  p.dq_accum_ptr = take(w.dq_accum_floats * 4);
  p.dq_semaphore = static_cast<int*>(take(w.semaphore_ints * 4));
  run_mha_bwd_<90, cutlass::bfloat16_t, kHeadDim, false>(p, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
