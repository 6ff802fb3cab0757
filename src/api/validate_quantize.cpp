// hopattn_quantize_fp8's rules: its options (struct_size, scaling, block_rows, hadamard, backend,
// layout), x and out (the shared tensor rules, out's in its layout, then dtypes and shapes), the
// scales array, the overlap of the outputs with x and each other, and the backend: AUTO picks
// SM90 for device memory, whose own rules (sm90_rules.hpp: 32-bit sizes) follow.
#include <cstddef>
#include <vector>

#include "api/abi.hpp"
#include "api/backend_choice.hpp"
#include "api/call_rules.hpp"
#include "api/tensor_rules.hpp"
#include "api/validate.hpp"
#include "core/dtype.hpp"
#include "core/hadamard.hpp"
#include "sm90/sm90_rules.hpp"

namespace hopattn {

const size_t kQuantizeOptionsFirstSize =
    offsetof(hopattn_quantize_options, cuda_stream) + sizeof(void*);

namespace {

Status check_options(const hopattn_quantize_options& options) {
  if (Status s = check_fp8_scaling(enum_value(options.scaling), options.block_rows, "options");
      s != Status::kOk) {
    return s;
  }
  const int backend = enum_value(options.backend);
  if (backend != HOPATTN_BACKEND_AUTO && backend != HOPATTN_BACKEND_CPU &&
      backend != HOPATTN_BACKEND_SM90) {
    return invalid("options->backend is ", backend, "; allowed: 0 (AUTO), 1 (CPU), 2 (SM90)");
  }
  const int layout = enum_value(options.layout);
  if (Status s = check_fp8_layout(layout, "options->layout"); s != Status::kOk) return s;
  // The rotation keeps Q K^T, but a rotated V would rotate O.
  if (layout == HOPATTN_FP8_LAYOUT_V_TRANSPOSED && options.hadamard != 0) {
    return invalid("options->hadamard is ", options.hadamard,
                   " but options->layout is 1 (HOPATTN_FP8_LAYOUT_V_TRANSPOSED), V's layout, and V "
                   "is never rotated: set hadamard = 0 (its default is 1)");
  }
  return Status::kOk;
}

// named_out: out, in options->layout.
Status check_tensors(const hopattn_tensor& x, const NamedTensor& named_out, bool hadamard) {
  for (const NamedTensor& t : {NamedTensor{&x, "x"}, named_out}) {
    if (Status s = check_tensor(t); s != Status::kOk) return s;
  }
  const hopattn_tensor& out = *named_out.tensor;
  if (Status s = check_attention_dtype({&x, "x"}, "hopattn_quantize_fp8"); s != Status::kOk) {
    return s;
  }
  if (enum_value(out.dtype) != HOPATTN_DTYPE_FLOAT8_E4M3) {
    return invalid("out.dtype is ", dtype_name(dtype_of(out.dtype)),
                   "; hopattn_quantize_fp8 writes float8_e4m3 (HOPATTN_DTYPE_FLOAT8_E4M3)");
  }
  if (out.batch != x.batch || out.seqlen != x.seqlen || out.heads != x.heads ||
      out.head_dim != x.head_dim) {
    return invalid("out is ", shape_of(out), " but x is ", shape_of(x), "; out must have x's shape");
  }
  if (hadamard && !is_power_of_two(x.head_dim)) {
    return invalid("x.head_dim is ", x.head_dim,
                   " but options->hadamard is set; the Hadamard rotation needs a power-of-two "
                   "head_dim (or hadamard = 0)");
  }
  return check_output_does_not_overlap(named_out);
}

}  // namespace

hopattn_quantize_options default_quantize_options() { return hopattn_default_quantize_options(); }

Status init_quantize_options(hopattn_quantize_options* options, size_t struct_size) {
  return init_growable(options, struct_size, default_quantize_options(), kQuantizeOptionsFirstSize,
                       "options", "hopattn_quantize_options");
}

Status validate_quantize(const hopattn_tensor* x, const hopattn_tensor* out, float* scales,
                         const hopattn_quantize_options* options_or_null,
                         const SystemQueries& system, QuantizeCall& call) {
  hopattn_quantize_options options = default_quantize_options();
  if (options_or_null != nullptr) {
    if (Status s = read_growable(*options_or_null, default_quantize_options(),
                                 kQuantizeOptionsFirstSize, "options", "hopattn_quantize_options",
                                 "hopattn_default_quantize_options",
                                 "hopattn_init_quantize_options", options);
        s != Status::kOk) {
      return s;
    }
  }
  if (Status s = check_options(options); s != Status::kOk) return s;
  if (x == nullptr) return invalid("x is NULL");
  if (out == nullptr) return invalid("out is NULL");
  const bool hadamard = options.hadamard != 0;
  const Fp8Layout out_layout = static_cast<Fp8Layout>(enum_value(options.layout));
  const NamedTensor named_out{out, "out", out_layout};
  if (Status s = check_tensors(*x, named_out, hadamard); s != Status::kOk) return s;
  const int scaling = enum_value(options.scaling);
  int64_t scale_count = 0;
  if (Status s = check_fp8_scales_array(scales, *x, scaling, options.block_rows,
                                        {"scales", "", "block_rows"}, scale_count);
      s != Status::kOk) {
    return s;
  }
  if (Status s = check_outputs_do_not_overlap(
          {byte_range_of({x, "x"})},
          {byte_range_of(named_out), float_range_of("scales", scales, scale_count)});
      s != Status::kOk) {
    return s;
  }
  if (Status s = resolve_backend(options.backend,
                                 {{x->data, "x.data"}, {out->data, "out.data"}, {scales, "scales"}},
                                 system, call.backend);
      s != Status::kOk) {
    return s;
  }

  QuantizeProblem& p = call.problem;
  p.dtype = dtype_of(x->dtype);
  p.batch = x->batch;
  p.seqlen = x->seqlen;
  p.heads = x->heads;
  p.head_dim = x->head_dim;
  p.x = x->data;
  p.out = out->data;
  p.scales = scales;
  p.x_stride = {x->batch_stride, x->seq_stride, x->head_stride};
  p.out_stride = {out->batch_stride, out->seq_stride, out->head_stride};
  p.scaling = static_cast<Fp8Scaling>(scaling);
  p.block_rows = p.scaling == Fp8Scaling::kBlock ? options.block_rows : x->seqlen;
  p.out_layout = out_layout;
  p.hadamard = hadamard;
  p.seed = options.seed;
  p.cuda_stream = options.cuda_stream;
  return call.backend == HOPATTN_BACKEND_SM90 ? sm90::check_quantize_rules(p) : Status::kOk;
}

}  // namespace hopattn
