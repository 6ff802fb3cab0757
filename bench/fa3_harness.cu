// FlashAttention-3's bf16 head_dim-128 forward called without torch, for A/Bs against FA3 itself:
// its kernel built from its source (scripts/build_fa3_harness.sh), unchanged or with one edit, and
// timed beside hopattn's builds by bench/ab_kernels.py. The parameters are those FA3's mha_fwd sets
// for fixed-length batches in (batch, seqlen, heads, 128) layout without splits, paging or softcap.
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include "flash.h"

// Returns 0, 1 where the semaphore could not be cleared, 2 where the launch failed.
extern "C" int fa3_harness_forward(void* q, void* k, void* v, void* o, float* lse, int batch, int seqlen,
                                   int heads, int kv_heads, int causal, int* tile_semaphore, int num_sm,
                                   float softmax_scale, cudaStream_t stream) {
  constexpr int kHeadDim = 128;
  Flash_fwd_params p = {};
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
  p.b = p.b_k = batch;
  p.h = heads;
  p.h_k = kv_heads;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.seqlen_q_rounded = p.seqlen_k_rounded = (seqlen + 127) / 128 * 128;
  p.d = p.d_rounded = p.dv = p.dv_rounded = kHeadDim;
  p.scale_softmax = softmax_scale;
  p.p_dropout = p.rp_dropout = 1.f;  // keep probability 1: no dropout
  p.p_dropout_in_uint8_t = 255;
  p.is_causal = causal != 0;
  p.window_size_left = seqlen - 1;
  p.window_size_right = causal ? 0 : seqlen - 1;
  p.arch = 90;
  p.num_sm = num_sm;
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
