// hopattn_quantize_fp8's rules: its options (struct_size, scaling, block_rows, hadamard, backend),
// x and out (the shared tensor rules, then dtypes and shapes), the scales array, the overlap of
// the outputs with x and each other, and the backend (only the CPU quantises yet).
#include <cstddef>
#include <vector>

#include "api/abi.hpp"
#include "api/backend_choice.hpp"
#include "api/call_rules.hpp"
#include "api/tensor_rules.hpp"
#include "api/validate.hpp"
#include "core/dtype.hpp"
#include "core/hadamard.hpp"

namespace hopattn {

const size_t kQuantizeOptionsFirstSize =
    offsetof(hopattn_quantize_options, cuda_stream) + sizeof(void*);

namespace {

Status check_options(const hopattn_quantize_options& options) {
  const int scaling = enum_value(options.scaling);
  if (scaling != HOPATTN_FP8_SCALE_TENSOR && scaling != HOPATTN_FP8_SCALE_HEAD &&
      scaling != HOPATTN_FP8_SCALE_BLOCK) {
    return invalid("options->scaling is ", scaling,
                   "; allowed: 0 (HOPATTN_FP8_SCALE_TENSOR), 1 (HOPATTN_FP8_SCALE_HEAD), "
                   "2 (HOPATTN_FP8_SCALE_BLOCK)");
  }
  if (scaling == HOPATTN_FP8_SCALE_BLOCK && options.block_rows <= 0) {
    return invalid("options->block_rows is ", options.block_rows,
                   "; with HOPATTN_FP8_SCALE_BLOCK it must be > 0 (rows per scale; the FP8 "
                   "kernel's tile is 128)");
  }
  const int backend = enum_value(options.backend);
  if (backend != HOPATTN_BACKEND_AUTO && backend != HOPATTN_BACKEND_CPU &&
      backend != HOPATTN_BACKEND_SM90) {
    return invalid("options->backend is ", backend, "; allowed: 0 (AUTO), 1 (CPU), 2 (SM90)");
  }
  return Status::kOk;
}

Status check_tensors(const hopattn_tensor& x, const hopattn_tensor& out, bool hadamard) {
  for (const NamedTensor& t : {NamedTensor{&x, "x"}, NamedTensor{&out, "out"}}) {
    if (Status s = check_tensor(t); s != Status::kOk) return s;
  }
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
  return check_output_does_not_overlap({&out, "out"});
}

// scales: scale_count float32 values, 4-byte aligned, within the address space.
Status check_scales(const float* scales, const hopattn_tensor& x, int scaling, int64_t block_rows,
                    int64_t& count) {
  const char* layout = scaling == HOPATTN_FP8_SCALE_TENSOR ? "1 (HOPATTN_FP8_SCALE_TENSOR)"
                       : scaling == HOPATTN_FP8_SCALE_HEAD
                           ? "batch * heads (HOPATTN_FP8_SCALE_HEAD)"
                           : "batch * heads * ceil(seqlen / block_rows) (HOPATTN_FP8_SCALE_BLOCK)";
  if (scales == nullptr) return invalid("scales is NULL; it must point to ", layout, " float32 values");
  if (reinterpret_cast<uintptr_t>(scales) % alignof(float) != 0) {
    return invalid("scales is not 4-byte aligned; it must point to float32 values");
  }
  count = 1;
  const int64_t blocks = scaling == HOPATTN_FP8_SCALE_BLOCK ? (x.seqlen - 1) / block_rows + 1 : 1;
  int64_t bytes = 0;
  if (scaling != HOPATTN_FP8_SCALE_TENSOR &&
      (__builtin_mul_overflow(x.batch, x.heads, &count) ||
       __builtin_mul_overflow(count, blocks, &count))) {
    count = -1;
  }
  if (count < 0 || __builtin_mul_overflow(count, static_cast<int64_t>(sizeof(float)), &bytes) ||
      runs_past_address_space(scales, bytes)) {
    return invalid("scales: ", layout, " float32 values do not fit in the address space");
  }
  return Status::kOk;
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
  if (Status s = check_tensors(*x, *out, hadamard); s != Status::kOk) return s;
  const int scaling = enum_value(options.scaling);
  int64_t scale_count = 0;
  if (Status s = check_scales(scales, *x, scaling, options.block_rows, scale_count);
      s != Status::kOk) {
    return s;
  }
  const auto scales_begin = reinterpret_cast<uintptr_t>(scales);
  if (Status s = check_outputs_do_not_overlap(
          {byte_range_of({x, "x"})},
          {byte_range_of({out, "out"}),
           {"scales", scales_begin, scales_begin + static_cast<uint64_t>(scale_count) * 4}});
      s != Status::kOk) {
    return s;
  }
  if (Status s = resolve_backend(options.backend,
                                 {{x->data, "x.data"}, {out->data, "out.data"}, {scales, "scales"}},
                                 system, call.backend);
      s != Status::kOk) {
    return s;
  }
  if (call.backend == HOPATTN_BACKEND_SM90) {
    return fail(Status::kUnsupported,
                "the sm90 backend has no FP8 quantisation yet; use the CPU backend "
                "(options->backend = HOPATTN_BACKEND_CPU, tensors in host memory)");
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
  p.hadamard = hadamard;
  p.seed = options.seed;
  p.cuda_stream = options.cuda_stream;
  return Status::kOk;
}

}  // namespace hopattn
