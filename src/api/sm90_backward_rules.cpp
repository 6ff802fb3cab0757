#include "api/sm90_backward_rules.hpp"

#include <string>

#include "core/error.hpp"
#include "sm90/sm90_rules.hpp"

namespace hopattn {
namespace {

// The forward problem of the same shapes, with no tensor: every rule on a null tensor is skipped.
ForwardProblem shapes_of(const BackwardProblem& p) {
  ForwardProblem f;
  f.dtype = p.dtype;
  f.seqlens = p.seqlens;
  f.heads_q = p.heads_q;
  f.heads_kv = p.heads_kv;
  f.head_dim = p.head_dim;
  f.causal = p.causal;
  f.softmax_scale = p.softmax_scale;
  return f;
}

// The rules for one tensor in the slot of the forward tensor with its shape ("q" or "k"), the
// message's leading "q." / "k." replaced by the tensor's own name.
Status check_in_slot(const BackwardProblem& p, const void* data, const Strides& stride,
                     bool query_shaped, const char* name) {
  if (data == nullptr) return Status::kOk;
  ForwardProblem f = shapes_of(p);
  if (query_shaped) {
    f.q = data;
    f.q_stride = stride;
  } else {
    f.k = data;
    f.k_stride = stride;
  }
  const Status status = sm90::check_forward_rules(f);
  if (status == Status::kOk) return status;
  const std::string slot = query_shaped ? "q" : "k";
  std::string message = last_error();
  if (message.compare(0, slot.size(), slot) == 0) message = name + message.substr(slot.size());
  return set_error(status, message);
}

}  // namespace

Status check_sm90_backward_rules(const BackwardProblem& p) {
  ForwardProblem f = shapes_of(p);
  f.q = p.q;
  f.k = p.k;
  f.v = p.v;
  f.o = const_cast<void*>(p.o);  // read by the rules only, never written
  f.q_stride = p.q_stride;
  f.k_stride = p.k_stride;
  f.v_stride = p.v_stride;
  f.o_stride = p.o_stride;
  if (Status s = sm90::check_forward_rules(f); s != Status::kOk) return s;
  struct Extra {
    const void* data;
    Strides stride;
    bool query_shaped;
    const char* name;
  };
  const Extra extras[] = {{p.d_o, p.d_o_stride, true, "d_o"},
                          {p.dq, p.dq_stride, true, "dq"},
                          {p.dk, p.dk_stride, false, "dk"},
                          {p.dv, p.dv_stride, false, "dv"}};
  for (const Extra& e : extras) {
    if (Status s = check_in_slot(p, e.data, e.stride, e.query_shaped, e.name); s != Status::kOk) {
      return s;
    }
  }
  return Status::kOk;
}

}  // namespace hopattn
