#include "sm90/sm90_rules.hpp"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace hopattn::sm90 {
namespace {

// TMA global addresses and strides are in 16-byte units; strides stay below 2^40 bytes.
constexpr int64_t kTmaAlignment = 16;
constexpr int64_t kTmaStrideLimitBytes = int64_t{1} << 40;
// Rows per CTA of the grid's smallest tile: the grid is ceil(seqlen_q / 64) * heads_q * batch.
constexpr int64_t kMinBlockM = 64;
// The FP8 kernel applies K's descales per chunk of gcd(its key tile, 128) keys, which never spans
// two K scale blocks only if each block is a multiple of 128 rows.
constexpr int64_t kFp8KeyScaleRows = 128;

template <class... Pieces>
Status fail(Status status, const Pieces&... pieces) {
  std::ostringstream message;
  (message << ... << pieces);
  return set_error(status, message.str());
}

struct TensorView {
  const char* name;
  const void* data;
  Strides stride;
  int64_t batch, rows, heads;  // sizes of the tensor (not of one sequence)
  DType dtype;
};

struct StridedDimension {
  const char* field;
  int64_t stride, size;
};

std::array<StridedDimension, 3> dimensions_of(const TensorView& t) {
  return {{{"batch_stride", t.stride.batch, t.batch},
           {"seq_stride", t.stride.seq, t.rows},
           {"head_stride", t.stride.head, t.heads}}};
}

Status check_tma_layout(const TensorView& t) {
  const DType dtype = t.dtype;
  if (reinterpret_cast<uintptr_t>(t.data) % kTmaAlignment != 0) {
    return fail(Status::kInvalidArgument, t.name, ".data is not ", kTmaAlignment,
                "-byte aligned; the SM90 backend loads tiles with TMA, which needs ", kTmaAlignment,
                "-byte aligned addresses");
  }
  // Every stride goes into the TMA descriptor, also a size-1 dimension's that is never stepped.
  for (const auto& [field, stride, size] : dimensions_of(t)) {
    if (stride == 0 && size == 1) {  // a zero stride of a larger dimension is a broadcast, below
      return fail(Status::kUnsupported, t.name, ".", field,
                  " is 0; the SM90 backend's TMA descriptors need positive strides, also for a "
                  "dimension of size 1 (any positive multiple of 16 bytes will do there)");
    }
    int64_t bytes = 0;
    if (stride < 0 || __builtin_mul_overflow(stride, element_size(dtype), &bytes)) {
      return fail(Status::kInvalidArgument, t.name, ".", field, " is ", stride,
                  "; the SM90 backend needs strides >= 0 whose size in bytes fits in int64");
    }
    if (bytes % kTmaAlignment != 0) {
      return fail(Status::kInvalidArgument, t.name, ".", field, " is ", stride,
                  " elements = ", bytes,
                  " bytes; the SM90 backend needs strides that are multiples of ", kTmaAlignment,
                  " bytes for TMA");
    }
    if (bytes >= kTmaStrideLimitBytes) {
      return fail(Status::kUnsupported, t.name, ".", field, " is ", stride, " elements = ", bytes,
                  " bytes; the SM90 backend's TMA descriptors need strides below 2^40 bytes");
    }
  }
  return Status::kOk;
}

// A TMA descriptor walks memory with positive strides; broadcast views go to the CPU backend or
// are materialised by the caller.
Status check_no_broadcast(const TensorView& t) {
  for (const auto& [field, stride, size] : dimensions_of(t)) {
    if (size > 1 && stride == 0) {
      return fail(Status::kUnsupported, t.name, ".", field,
                  " is 0 (a broadcast view), which the SM90 backend does not support; pass a "
                  "materialised tensor");
    }
  }
  return Status::kOk;
}

// Every size below 2^31: the kernels index with 32-bit integers.
Status check_below_2_to_31(std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  for (const auto& [name, size] : sizes) {
    if (size > INT32_MAX) {
      return fail(Status::kUnsupported, name, " is ", size,
                  "; the SM90 backend needs it below 2^31 (32-bit indices)");
    }
  }
  return Status::kOk;
}

// The kernels index rows, heads, sequences and CTAs with 32-bit integers; this also keeps every
// TMA global dimension (rows, heads, batch; heads_kv <= heads_q) within the driver's 2^32.
Status check_32_bit_limits(const SeqlenLayout& s, int64_t heads_q) {
  const bool varlen = s.varlen();
  if (Status status = check_below_2_to_31(
          {{"q.seqlen", s.total_q},
           {"k.seqlen", s.total_k},
           {"q.heads", heads_q},
           {varlen ? "varlen->batch + 1" : "q.batch", varlen ? s.batch + 1 : s.batch},
           {"varlen->max_seqlen_q", varlen ? s.seqlen_q : 0},
           {"varlen->max_seqlen_k", varlen ? s.seqlen_k : 0}});
      status != Status::kOk) {
    return status;
  }
  const int64_t ctas = (s.seqlen_q + kMinBlockM - 1) / kMinBlockM * heads_q * s.batch;
  if (ctas > INT32_MAX) {
    return fail(Status::kUnsupported, "ceil(", varlen ? "varlen->max_seqlen_q" : "q.seqlen", " / ",
                kMinBlockM, ") * q.heads * ", varlen ? "varlen->batch" : "q.batch", " is ", ctas,
                "; the SM90 backend's grid needs it below 2^31");
  }
  return Status::kOk;
}

// The rules over a call's tensors as the TMA descriptors see them (a varlen batch is one batch
// entry of total rows), q-shaped ones with total_q rows and heads_q heads, k-shaped ones with
// total_k and heads_kv. A null tensor (an output of a workspace-size query) is skipped.
Status check_tensors(std::initializer_list<TensorView> tensors, const SeqlenLayout& s,
                     int64_t heads_q) {
  for (const TensorView& t : tensors) {
    if (t.data == nullptr) continue;
    if (Status status = check_tma_layout(t); status != Status::kOk) return status;
  }
  if (Status status = check_32_bit_limits(s, heads_q); status != Status::kOk) return status;
  for (const TensorView& t : tensors) {
    if (t.data == nullptr) continue;
    if (Status status = check_no_broadcast(t); status != Status::kOk) return status;
  }
  return Status::kOk;
}

}  // namespace

Status check_forward_rules(const ForwardProblem& p) {
  const SeqlenLayout& s = p.seqlens;
  const int64_t tensor_batch = s.varlen() ? 1 : s.batch;
  return check_tensors({{"q", p.q, p.q_stride, tensor_batch, s.total_q, p.heads_q, p.dtype},
                        {"k", p.k, p.k_stride, tensor_batch, s.total_k, p.heads_kv, p.dtype},
                        {"v", p.v, p.v_stride, tensor_batch, s.total_k, p.heads_kv, p.dtype},
                        {"o", p.o, p.o_stride, tensor_batch, s.total_q, p.heads_q, p.dtype}},
                       s, p.heads_q);
}

Status check_backward_rules(const BackwardProblem& p) {
  const SeqlenLayout& s = p.seqlens;
  const int64_t tensor_batch = s.varlen() ? 1 : s.batch;
  const DType d = p.dtype;
  return check_tensors({{"q", p.q, p.q_stride, tensor_batch, s.total_q, p.heads_q, d},
                        {"k", p.k, p.k_stride, tensor_batch, s.total_k, p.heads_kv, d},
                        {"v", p.v, p.v_stride, tensor_batch, s.total_k, p.heads_kv, d},
                        {"o", p.o, p.o_stride, tensor_batch, s.total_q, p.heads_q, d},
                        {"d_o", p.d_o, p.d_o_stride, tensor_batch, s.total_q, p.heads_q, d},
                        {"dq", p.dq, p.dq_stride, tensor_batch, s.total_q, p.heads_q, d},
                        {"dk", p.dk, p.dk_stride, tensor_batch, s.total_k, p.heads_kv, d},
                        {"dv", p.dv, p.dv_stride, tensor_batch, s.total_k, p.heads_kv, d}},
                       s, p.heads_q);
}

Status check_forward_fp8_rules(const Fp8ForwardProblem& p) {
  const SeqlenLayout& s = p.seqlens;
  const int64_t tensor_batch = s.varlen() ? 1 : s.batch;
  constexpr DType e4m3 = DType::kFloat8E4M3;
  // V given transposed: its TMA view (mainloop.cuh) steps head_dim rows by the pitch, in the place
  // of the row stride (validation has checked its strides against the layout).
  Strides v_stride = p.v_stride;
  if (p.v_layout == Fp8Layout::kVTransposed) {
    const VTransposedLayout vt = VTransposedLayout::of(s.total_k, p.heads_kv, p.head_dim);
    v_stride = {vt.batch_stride(), vt.pitch, vt.head_stride()};
    // The kernel's TMA view counts positions up to the pitch in 32 bits.
    if (Status status = check_below_2_to_31({{"v's pitch (k.seqlen rounded up to a multiple of 16)", vt.pitch}});
        status != Status::kOk) {
      return status;
    }
  }
  if (Status status =
          check_tensors({{"q", p.q, p.q_stride, tensor_batch, s.total_q, p.heads_q, e4m3},
                         {"k", p.k, p.k_stride, tensor_batch, s.total_k, p.heads_kv, e4m3},
                         {"v", p.v, v_stride, tensor_batch, s.total_k, p.heads_kv, e4m3},
                         {"o", p.o, p.o_stride, tensor_batch, s.total_q, p.heads_q, p.dtype}},
                        s, p.heads_q);
      status != Status::kOk) {
    return status;
  }
  // Scales with null data: the workspace query, which has none.
  if (p.k_scales.data != nullptr && p.k_scales.scaling == Fp8Scaling::kBlock &&
      p.k_scales.block_rows % kFp8KeyScaleRows != 0) {
    return fail(Status::kUnsupported, "k_scales->block_rows is ", p.k_scales.block_rows,
                "; the SM90 FP8 kernel needs K block scales over a multiple of ", kFp8KeyScaleRows,
                " rows, so that none changes within one of the key chunks it descales (or K "
                "scales per tensor or per head; the CPU backend takes any block_rows)");
  }
  if (p.v_scales.data != nullptr && p.v_scales.scaling == Fp8Scaling::kBlock) {
    return fail(Status::kUnsupported,
                "v_scales->scaling is HOPATTN_FP8_SCALE_BLOCK; the SM90 FP8 kernel takes V scales "
                "per tensor or per head (HOPATTN_FP8_SCALE_TENSOR or HOPATTN_FP8_SCALE_HEAD), "
                "which it folds into the output; the CPU backend takes block V scales");
  }
  return Status::kOk;
}

Status check_quantize_rules(const QuantizeProblem& p) {
  return check_below_2_to_31({{"x.batch", p.batch},
                              {"x.seqlen", p.seqlen},
                              {"x.heads", p.heads},
                              {"x.head_dim", p.head_dim},
                              {"the number of scales", p.scale_count()}});
}

}  // namespace hopattn::sm90
