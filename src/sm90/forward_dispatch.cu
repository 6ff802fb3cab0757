// The SM90 backend's entry points: what this build contains, whether the current device can run
// it, and the dispatch from (dtype, head_dim) to a compiled instantiation.
#include <climits>
#include <string>

#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include "core/error.hpp"
#include "sm90/sm90_backend.hpp"

namespace hopattn::sm90 {

// Defined in instantiations/, one translation unit per (dtype, head_dim).
template <class Element, int kHeadDim>
hopattn_status launch_forward(AttentionProblem const& problem);

namespace {

template <class Element>
hopattn_status dispatch_head_dim(AttentionProblem const& problem) {
  switch (problem.head_dim) {
    case 64: return launch_forward<Element, 64>(problem);
    case 96: return launch_forward<Element, 96>(problem);
    case 128: return launch_forward<Element, 128>(problem);
    case 192: return launch_forward<Element, 192>(problem);
    case 256: return launch_forward<Element, 256>(problem);
    default:
      return set_error(HOPATTN_ERROR_UNSUPPORTED,
                       "head_dim " + std::to_string(problem.head_dim) +
                           " is not supported by the sm90 backend (supported: 64, 96, 128, 192, 256)");
  }
}

// Kernel limits past the API's own: 32-bit row and column indices, a 1-d grid of CTAs.
hopattn_status check_kernel_limits(AttentionProblem const& p) {
  const int64_t m_blocks = (p.seqlen_q + 63) / 64;
  if (p.seqlen_q > INT32_MAX || p.seqlen_k > INT32_MAX || p.heads_q > INT32_MAX || p.batch > INT32_MAX ||
      m_blocks * p.heads_q * p.batch > INT32_MAX) {
    return set_error(HOPATTN_ERROR_UNSUPPORTED,
                     "sm90: seqlen, heads and batch must each fit in 32 bits and "
                     "ceil(seqlen_q / 64) * heads_q * batch must be below 2^31");
  }
  // A TMA descriptor walks memory with positive strides; broadcast (stride 0) views go to the CPU
  // backend or are materialised by the caller.
  const Strides* strides[] = {&p.q_stride, &p.k_stride, &p.v_stride, &p.o_stride};
  const int64_t seqlens[] = {p.seqlen_q, p.seqlen_k, p.seqlen_k, p.seqlen_q};
  const int64_t heads[] = {p.heads_q, p.heads_kv, p.heads_kv, p.heads_q};
  const char* names[] = {"q", "k", "v", "o"};
  for (int i = 0; i < 4; ++i) {
    const bool broadcast = (p.batch > 1 && strides[i]->batch == 0) ||
                           (seqlens[i] > 1 && strides[i]->seq == 0) ||
                           (heads[i] > 1 && strides[i]->head == 0);
    if (broadcast) {
      return set_error(HOPATTN_ERROR_UNSUPPORTED,
                       std::string(names[i]) +
                           ": a zero stride (broadcast view) is not supported by the sm90 backend; "
                           "pass a materialised tensor");
    }
  }
  return HOPATTN_OK;
}

hopattn_status check_device(AttentionProblem const& p) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return set_error(HOPATTN_ERROR_BACKEND_UNAVAILABLE,
                     std::string("sm90: no CUDA device: ") + cudaGetErrorString(error));
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    return set_error(HOPATTN_ERROR_BACKEND_UNAVAILABLE,
                     "sm90: the current device " + std::to_string(device) + " has compute capability " +
                         std::to_string(major) + "." + std::to_string(minor) +
                         "; the kernels need 9.0 (H100/H200)");
  }
  const void* tensors[] = {p.q, p.k, p.v, p.o};
  const char* names[] = {"q", "k", "v", "o"};
  for (int i = 0; i < 4; ++i) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, tensors[i]) != cudaSuccess) {
      cudaGetLastError();
      continue;  // memory space is the API validation's concern
    }
    if (attributes.type == cudaMemoryTypeDevice && attributes.device != device) {
      return set_error(HOPATTN_ERROR_INVALID_ARGUMENT,
                       std::string(names[i]) + ".data is on device " + std::to_string(attributes.device) +
                           " but the current device is " + std::to_string(device));
    }
  }
  return HOPATTN_OK;
}

}  // namespace

bool built() { return true; }

bool supports(hopattn_dtype dtype, int64_t head_dim) {
  const bool dtype_ok = dtype == HOPATTN_DTYPE_BFLOAT16 || dtype == HOPATTN_DTYPE_FLOAT16;
  const bool head_dim_ok =
      head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 192 || head_dim == 256;
  return dtype_ok && head_dim_ok;
}

bool device_available() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();  // leave no sticky error behind for the caller
    return false;
  }
  return major == 9 && minor == 0;
}

hopattn_status forward(AttentionProblem const& problem) {
  if (hopattn_status status = check_kernel_limits(problem); status != HOPATTN_OK) return status;
  if (hopattn_status status = check_device(problem); status != HOPATTN_OK) return status;
  switch (problem.dtype) {
    case HOPATTN_DTYPE_BFLOAT16: return dispatch_head_dim<cutlass::bfloat16_t>(problem);
    case HOPATTN_DTYPE_FLOAT16: return dispatch_head_dim<cutlass::half_t>(problem);
    default:
      return set_error(HOPATTN_ERROR_UNSUPPORTED,
                       "dtype float32 is not supported by the sm90 backend (supported: bfloat16, float16)");
  }
}

}  // namespace hopattn::sm90
