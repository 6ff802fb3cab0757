#include "api/backend_choice.hpp"

#include "api/tensor_rules.hpp"
#include "core/dtype.hpp"
#include "cpu/cpu_backend.hpp"

namespace hopattn {
namespace {

// AUTO: SM90 for device memory, CPU for host memory, an error for a mix.
Status choose_backend_by_memory(const std::vector<NamedPointer>& pointers,
                                const SystemQueries& system, hopattn_backend& backend) {
  const MemorySpace first = system.memory_space_of(pointers.front().pointer);
  for (const NamedPointer& p : pointers) {
    const MemorySpace space = system.memory_space_of(p.pointer);
    if (space == MemorySpace::Unknown) {
      return invalid("backend AUTO: the CUDA runtime cannot tell whether ", p.name,
                     " is host or device memory; set options.backend explicitly");
    }
    if (space != first) {
      return invalid("backend AUTO: ", p.name, " is ", memory_space_name(space), " but ",
                     pointers.front().name, " is ", memory_space_name(first),
                     "; all tensors must be in one memory space");
    }
  }
  backend = first == MemorySpace::Device ? HOPATTN_BACKEND_SM90 : HOPATTN_BACKEND_CPU;
  return Status::kOk;
}

}  // namespace

const char* backend_name(hopattn_backend backend) {
  switch (backend) {
    case HOPATTN_BACKEND_AUTO: return "AUTO";
    case HOPATTN_BACKEND_CPU: return "CPU";
    case HOPATTN_BACKEND_SM90: return "SM90";
  }
  return "unknown";
}

Status resolve_backend(hopattn_backend requested, const std::vector<NamedPointer>& pointers,
                       const SystemQueries& system, hopattn_backend& backend) {
  backend = requested;
  if (requested == HOPATTN_BACKEND_AUTO) {
    if (Status s = choose_backend_by_memory(pointers, system, backend); s != Status::kOk) return s;
  }
  if (backend == HOPATTN_BACKEND_SM90) {
    if (!system.sm90_built()) {
      return fail(
          Status::kBackendUnavailable,
          "the SM90 backend is not in this build (it was configured without CUDA)",
          requested == HOPATTN_BACKEND_AUTO ? "; backend AUTO chose it for device memory" : "");
    }
    if (!system.sm90_device_available()) {
      return fail(Status::kBackendUnavailable,
                  "the SM90 backend needs a compute capability 9.0 GPU (H100/H200) as the "
                  "current CUDA device, and there is none");
    }
  }
  if (requested == HOPATTN_BACKEND_AUTO) return Status::kOk;  // one memory space, the right one
  return check_memory_space(backend, pointers, system);
}

Status check_memory_space(hopattn_backend backend, const std::vector<NamedPointer>& pointers,
                          const SystemQueries& system) {
  const bool sm90 = backend == HOPATTN_BACKEND_SM90;
  const MemorySpace wrong = sm90 ? MemorySpace::Host : MemorySpace::Device;
  for (const NamedPointer& p : pointers) {
    if (p.pointer != nullptr && system.memory_space_of(p.pointer) == wrong) {
      return invalid(p.name, " is ", memory_space_name(wrong), "; the ", backend_name(backend),
                     " backend needs ", sm90 ? "device memory" : "host memory");
    }
  }
  return Status::kOk;
}

Status check_backend_work(hopattn_backend backend, int64_t work, const std::string& formula) {
  if (backend != HOPATTN_BACKEND_CPU || (work >= 0 && work <= kCpuMaxWorkPerCall)) {
    return Status::kOk;
  }
  return fail(Status::kUnsupported, "the call's work, ", formula, " = ",
              work < 0 ? std::string("more than 2^63") : std::to_string(work),
              " multiply-adds, exceeds the CPU backend's limit of 2^44 = ", kCpuMaxWorkPerCall,
              " per call; split the call (broadcast inputs count every row they repeat)");
}

Status check_backend_supports(hopattn_backend backend, DType dtype, int64_t head_dim,
                              const SystemQueries& system) {
  if (backend == HOPATTN_BACKEND_CPU) {
    if (!cpu::supports(dtype, head_dim)) {
      return fail(Status::kUnsupported, "head_dim ", head_dim,
                  " is not supported by the CPU backend (it supports any head_dim from 1 to ",
                  cpu::kMaxHeadDim, ")");
    }
    return Status::kOk;
  }
  if (!system.sm90_supports(dtype, head_dim)) {
    return fail(Status::kUnsupported, "dtype ", dtype_name(dtype), " with head_dim ", head_dim,
                " is not supported by the SM90 backend (it supports ", system.sm90_supported_list(),
                "; the CPU backend supports every dtype with head_dim 1 to ", cpu::kMaxHeadDim,
                ")");
  }
  return Status::kOk;
}

Status check_backend_supports_backward(hopattn_backend backend, DType dtype, int64_t head_dim,
                                       const SystemQueries& system) {
  if (backend == HOPATTN_BACKEND_CPU) return check_backend_supports(backend, dtype, head_dim, system);
  if (!system.sm90_supports_backward(dtype, head_dim)) {
    return fail(Status::kUnsupported, "dtype ", dtype_name(dtype), " with head_dim ", head_dim,
                " is not supported by the SM90 backend's backward pass (it supports ",
                system.sm90_backward_supported_list(),
                "; the CPU backend supports every dtype with head_dim 1 to ", cpu::kMaxHeadDim,
                ")");
  }
  return Status::kOk;
}

Status check_backend_supports_fp8(hopattn_backend backend, DType out_dtype, int64_t head_dim,
                                  const SystemQueries& system) {
  if (backend == HOPATTN_BACKEND_CPU) {
    return check_backend_supports(backend, out_dtype, head_dim, system);
  }
  if (!system.sm90_supports_fp8(out_dtype, head_dim)) {
    return fail(Status::kUnsupported, "output dtype ", dtype_name(out_dtype), " with head_dim ",
                head_dim, " is not supported by the SM90 backend's FP8 forward (it supports ",
                system.sm90_fp8_supported_list(),
                "; the CPU backend supports bfloat16 and float16 outputs with head_dim 1 to ",
                cpu::kMaxHeadDim, ")");
  }
  return Status::kOk;
}

}  // namespace hopattn
