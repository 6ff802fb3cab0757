// The SM90 backend's entry points: what this build contains (the generated kernel table), whether
// the current device can run it, and the dispatch of a validated problem to its kernel. The
// argument rules of this backend live in sm90_rules.cpp, which validation runs before this.
#include <string>

#include <cuda.h>
#include <cuda_runtime.h>
#include <cutlass/cuda_host_adapter.hpp>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "sm90/kernel_table.hpp"
#include "sm90/launch.cuh"
#include "sm90/sm90_backend.hpp"
#include "sm90/sm90_rules.hpp"

namespace hopattn::sm90 {

namespace {

const KernelEntry* find_kernel(Operation operation, DType dtype, int64_t head_dim) {
  for (int i = 0; i < kKernelCount; ++i) {
    const KernelEntry& entry = kKernels[i];
    if (entry.operation == operation && entry.dtype == dtype && entry.head_dim == head_dim) return &entry;
  }
  return nullptr;
}

struct DevicePointer {
  const void* pointer;
  const char* name;  // the C names validation uses
};

// Every device pointer the kernel reads or writes must be on the current device. A pointer whose
// attributes cannot be read is an error, not a pass: the launch would fault on it.
Status check_pointer_devices(ForwardProblem const& p, int device) {
  const DevicePointer pointers[] = {{p.q, "q.data"},
                                    {p.k, "k.data"},
                                    {p.v, "v.data"},
                                    {p.o, "o.data"},
                                    {p.lse, "lse"},
                                    {p.seqlens.cu_seqlens_q, "varlen->cu_seqlens_q"},
                                    {p.seqlens.cu_seqlens_k, "varlen->cu_seqlens_k"},
                                    {p.seqlens.seqused_k, "varlen->seqused_k"},
                                    {p.workspace, "options->workspace"}};
  for (const auto& [pointer, name] : pointers) {
    if (pointer == nullptr) continue;  // optional, and absent
    cudaPointerAttributes attributes{};
    const cudaError_t error = cudaPointerGetAttributes(&attributes, pointer);
    if (error != cudaSuccess) {
      cudaGetLastError();
      return set_error(Status::kCuda, std::string("sm90: cannot tell which device holds ") + name +
                                          ": cudaPointerGetAttributes failed: " + cudaGetErrorString(error));
    }
    // Host and managed memory were judged by validation (memory_space_of); only device memory
    // belongs to one device.
    if (attributes.type == cudaMemoryTypeDevice && attributes.device != device) {
      return set_error(Status::kInvalidArgument, std::string(name) + " is on device " +
                                                     std::to_string(attributes.device) +
                                                     " but the current device is " + std::to_string(device));
    }
  }
  return Status::kOk;
}

// cudaStreamGetFlags, not cudaStreamQuery: it reads no work state, so it neither reports an
// earlier kernel's failure as the stream's nor invalidates a CUDA graph capture in progress on
// the stream. A handle that is no stream at all may still crash inside the driver.
Status check_stream(void* handle, int device) {
  auto stream = static_cast<cudaStream_t>(handle);
  unsigned int flags = 0;
  cudaError_t error = cudaStreamGetFlags(stream, &flags);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return set_error(error == cudaErrorInvalidResourceHandle || error == cudaErrorInvalidValue
                         ? Status::kInvalidArgument
                         : Status::kCuda,
                     std::string("options.cuda_stream is not a usable CUDA stream: cudaStreamGetFlags failed: ") +
                         cudaGetErrorString(error));
  }
#if CUDART_VERSION >= 12080
  int stream_device = device;
  error = cudaStreamGetDevice(stream, &stream_device);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return set_error(Status::kCuda,
                     std::string("options.cuda_stream: cudaStreamGetDevice failed: ") + cudaGetErrorString(error));
  }
  if (stream_device != device) {
    return set_error(Status::kInvalidArgument, "options.cuda_stream belongs to device " +
                                                   std::to_string(stream_device) + " but the current device is " +
                                                   std::to_string(device));
  }
#else
  (void)device;
#endif
  return Status::kOk;
}

Status check_device(ForwardProblem const& p) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return set_error(Status::kBackendUnavailable, std::string("sm90: no CUDA device: ") + cudaGetErrorString(error));
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    return set_error(Status::kBackendUnavailable,
                     "sm90: the current device " + std::to_string(device) + " has compute capability " +
                         std::to_string(major) + "." + std::to_string(minor) + "; the kernels need 9.0 (H100/H200)");
  }
  if (Status status = check_pointer_devices(p, device); status != Status::kOk) return status;
  return check_stream(p.cuda_stream, device);
}

CUtensorMapDataType tma_data_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::kBFloat16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kFloat16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  }
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
}

// CuTe's make_tma_copy (sm90/kernel/tma.hpp) only prints when the driver refuses a descriptor
// (its assert is compiled out by NDEBUG), and the kernel would then launch with a zeroed one. So
// each tensor's global address, dimensions and strides, exactly as the kernel's descriptors take
// them, are first encoded here into a probe descriptor with a plain 16-byte box (the box, swizzle
// and rank of the real ones are fixed per kernel at compile time, not by the call). sm90_rules.hpp
// lists the limits validation enforces so that this cannot fail; this is the check that it does not.
Status probe_tma_descriptors(ForwardProblem const& p) {
  const int64_t element = element_size(p.dtype);
  const int64_t tensor_batch = p.seqlens.varlen() ? 1 : p.seqlens.batch;
  struct Probe {
    const char* name;
    const void* data;
    int64_t rows, heads;
    Strides stride;
  };
  const Probe probes[] = {{"q", p.q, p.seqlens.total_q, p.heads_q, p.q_stride},
                          {"k", p.k, p.seqlens.total_k, p.heads_kv, p.k_stride},
                          {"v", p.v, p.seqlens.total_k, p.heads_kv, p.v_stride},
                          {"o", p.o, p.seqlens.total_q, p.heads_q, p.o_stride}};
  for (const Probe& t : probes) {
    // (head_dim, rows, heads, batch), head_dim contiguous: the order of tma.hpp's gmem view.
    const cuuint64_t dims[4] = {cuuint64_t(p.head_dim), cuuint64_t(t.rows), cuuint64_t(t.heads),
                                cuuint64_t(tensor_batch)};
    const cuuint64_t strides[3] = {cuuint64_t(t.stride.seq * element), cuuint64_t(t.stride.head * element),
                                   cuuint64_t(t.stride.batch * element)};
    const cuuint32_t box[4] = {cuuint32_t(16 / element), 1, 1, 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    CUtensorMap descriptor{};
    const CUresult result = cutlass::call_cuTensorMapEncodeTiled(
        &descriptor, tma_data_type(p.dtype), 4, const_cast<void*>(t.data), dims, strides, box, element_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS) {
      return set_error(Status::kCuda,
                       std::string("sm90: the driver refused the TMA descriptor of ") + t.name +
                           " (cuTensorMapEncodeTiled returned CUresult " + std::to_string(int(result)) +
                           "; dims (head_dim, rows, heads, batch) = (" + std::to_string(dims[0]) + ", " +
                           std::to_string(dims[1]) + ", " + std::to_string(dims[2]) + ", " +
                           std::to_string(dims[3]) + "), byte strides (seq, head, batch) = (" +
                           std::to_string(strides[0]) + ", " + std::to_string(strides[1]) + ", " +
                           std::to_string(strides[2]) + "))");
    }
  }
  return Status::kOk;
}

}  // namespace

Status current_device_shape(DeviceShape& shape) {
  constexpr int kMaxDevices = 64;
  static DeviceShape cache[kMaxDevices];  // a device's shape never changes; a race rewrites the same values
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return cuda_failure("cudaGetDevice", error);
  if (device < kMaxDevices && cache[device].sm_count > 0) {
    shape = cache[device];
    return Status::kOk;
  }
  int sm_count = 0, l2_bytes = 0;
  error = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (error == cudaSuccess) error = cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device);
  if (error != cudaSuccess) return cuda_failure("cudaDeviceGetAttribute", error);
  shape = {sm_count, l2_bytes};
  if (device < kMaxDevices) cache[device] = shape;
  return Status::kOk;
}

bool built() { return true; }

bool supports(DType dtype, int64_t head_dim) { return find_kernel(Operation::kForward, dtype, head_dim) != nullptr; }

std::string supported_list() {
  std::string list;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    std::string dims;
    for (int i = 0; i < kKernelCount; ++i) {
      if (kKernels[i].dtype == dtype) dims += (dims.empty() ? "" : "/") + std::to_string(kKernels[i].head_dim);
    }
    if (!dims.empty()) list += (list.empty() ? "" : "; ") + std::string(dtype_name(dtype)) + " with head_dim " + dims;
  }
  return list.empty() ? "nothing" : list;
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

// Rounded up to the 256-byte alignment the API asks of a caller's workspace.
size_t forward_workspace_size(const ForwardProblem& problem) {
  const size_t bytes = forward_kernel_workspace_bytes(problem);
  return (bytes + 255) / 256 * 256;
}

Status forward(ForwardProblem const& validated) {
  if (Status status = check_device(validated); status != Status::kOk) return status;
  // The strides of size-1 dimensions replaced by ones every TMA descriptor takes (sm90_rules.hpp).
  const ForwardProblem problem = tma_ready(validated);
  if (Status status = probe_tma_descriptors(problem); status != Status::kOk) return status;
  const KernelEntry* kernel = find_kernel(Operation::kForward, problem.dtype, problem.head_dim);
  if (kernel == nullptr) {
    return set_error(Status::kUnsupported, std::string("dtype ") + dtype_name(problem.dtype) + " with head_dim " +
                                               std::to_string(problem.head_dim) +
                                               " is not in this build's sm90 kernels (" + supported_list() + ")");
  }
  const size_t workspace_bytes = forward_workspace_size(problem);
  if (workspace_bytes == 0 || problem.workspace != nullptr) return kernel->launch(problem, problem.workspace);

  // No workspace from the caller: stream-ordered memory from the device's pool, freed behind the
  // kernel on the same stream, so the call stays asynchronous.
  auto stream = static_cast<cudaStream_t>(problem.cuda_stream);
  void* workspace = nullptr;
  cudaError_t error = cudaMallocAsync(&workspace, workspace_bytes, stream);
  if (error != cudaSuccess) return cuda_failure("cudaMallocAsync of the workspace", error);
  const Status status = kernel->launch(problem, workspace);
  error = cudaFreeAsync(workspace, stream);
  if (status == Status::kOk && error != cudaSuccess) return cuda_failure("cudaFreeAsync of the workspace", error);
  return status;
}

}  // namespace hopattn::sm90
