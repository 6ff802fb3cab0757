#include "sm90/sm90_rules.hpp"

#include <cstdint>
#include <sstream>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace hopattn::sm90 {
namespace {

// TMA global addresses and strides are in 16-byte units.
constexpr int64_t kTmaAlignment = 16;
// Rows per CTA of the grid's smallest tile: the grid is ceil(seqlen_q / 64) * heads_q * batch.
constexpr int64_t kMinBlockM = 64;

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
};

Status check_tma_layout(const TensorView& t, DType dtype) {
  if (reinterpret_cast<uintptr_t>(t.data) % kTmaAlignment != 0) {
    return fail(Status::kInvalidArgument, t.name, ".data is not ", kTmaAlignment,
                "-byte aligned; the SM90 backend loads tiles with TMA, which needs ", kTmaAlignment,
                "-byte aligned addresses");
  }
  const std::pair<const char*, int64_t> strides[] = {{"batch_stride", t.stride.batch},
                                                     {"seq_stride", t.stride.seq},
                                                     {"head_stride", t.stride.head}};
  for (const auto& [field, stride] : strides) {
    const int64_t bytes = stride * element_size(dtype);  // bounded by the API's extent check
    if (bytes % kTmaAlignment != 0) {
      return fail(Status::kInvalidArgument, t.name, ".", field, " is ", stride,
                  " elements = ", bytes,
                  " bytes; the SM90 backend needs strides that are multiples of ", kTmaAlignment,
                  " bytes for TMA");
    }
  }
  return Status::kOk;
}

// A TMA descriptor walks memory with positive strides; broadcast views go to the CPU backend or
// are materialised by the caller.
Status check_no_broadcast(const TensorView& t) {
  const std::pair<const char*, bool> broadcasts[] = {
      {"batch_stride", t.batch > 1 && t.stride.batch == 0},
      {"seq_stride", t.rows > 1 && t.stride.seq == 0},
      {"head_stride", t.heads > 1 && t.stride.head == 0}};
  for (const auto& [field, broadcast] : broadcasts) {
    if (broadcast) {
      return fail(Status::kUnsupported, t.name, ".", field,
                  " is 0 (a broadcast view), which the SM90 backend does not support; pass a "
                  "materialised tensor");
    }
  }
  return Status::kOk;
}

// The kernels index rows, heads, sequences and CTAs with 32-bit integers.
Status check_32_bit_limits(const ForwardProblem& p) {
  const SeqlenLayout& s = p.seqlens;
  const bool varlen = s.varlen();
  const std::pair<const char*, int64_t> sizes[] = {
      {"q.seqlen", s.total_q},
      {"k.seqlen", s.total_k},
      {"q.heads", p.heads_q},
      {varlen ? "varlen->batch + 1" : "q.batch", varlen ? s.batch + 1 : s.batch},
      {"varlen->max_seqlen_q", varlen ? s.seqlen_q : 0},
      {"varlen->max_seqlen_k", varlen ? s.seqlen_k : 0}};
  for (const auto& [name, size] : sizes) {
    if (size > INT32_MAX) {
      return fail(Status::kUnsupported, name, " is ", size,
                  "; the SM90 backend needs it below 2^31 (32-bit indices)");
    }
  }
  const int64_t ctas = (s.seqlen_q + kMinBlockM - 1) / kMinBlockM * p.heads_q * s.batch;
  if (ctas > INT32_MAX) {
    return fail(Status::kUnsupported, "ceil(", varlen ? "varlen->max_seqlen_q" : "q.seqlen", " / ",
                kMinBlockM, ") * q.heads * ", varlen ? "varlen->batch" : "q.batch", " is ", ctas,
                "; the SM90 backend's grid needs it below 2^31");
  }
  return Status::kOk;
}

}  // namespace

Status check_forward_rules(const ForwardProblem& p) {
  const SeqlenLayout& s = p.seqlens;
  const int64_t tensor_batch = s.varlen() ? 1 : s.batch;
  const TensorView tensors[] = {{"q", p.q, p.q_stride, tensor_batch, s.total_q, p.heads_q},
                                {"k", p.k, p.k_stride, tensor_batch, s.total_k, p.heads_kv},
                                {"v", p.v, p.v_stride, tensor_batch, s.total_k, p.heads_kv},
                                {"o", p.o, p.o_stride, tensor_batch, s.total_q, p.heads_q}};
  for (const TensorView& t : tensors) {
    if (t.data == nullptr) continue;  // o of a workspace-size query
    if (Status status = check_tma_layout(t, p.dtype); status != Status::kOk) return status;
  }
  if (Status status = check_32_bit_limits(p); status != Status::kOk) return status;
  for (const TensorView& t : tensors) {
    if (t.data == nullptr) continue;
    if (Status status = check_no_broadcast(t); status != Status::kOk) return status;
  }
  return Status::kOk;
}

}  // namespace hopattn::sm90
