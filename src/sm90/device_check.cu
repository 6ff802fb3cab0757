#include "sm90/device_check.hpp"

#include <atomic>
#include <cstdio>
#include <string>

#include <cuda_runtime.h>

#include "core/error.hpp"
#include "sm90/dispatch_common.hpp"

namespace hopattn::sm90 {

namespace {

std::string runtime_error(cudaError_t error) {
  cudaGetLastError();  // the query must not fail the caller's next CUDA call
  return cudaGetErrorString(error);
}

std::string address(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", pointer);
  return text;
}

Status check_pointer(DevicePointer p, int device) {
  cudaPointerAttributes attributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, p.pointer);
  const std::string what = std::string(p.name) + " (" + address(p.pointer) + ")";
  if (error != cudaSuccess) {
    return set_error(Status::kInvalidArgument,
                     what + " is not memory the CUDA runtime can classify (cudaPointerGetAttributes: " +
                         runtime_error(error) + "); the sm90 backend needs device memory");
  }
  switch (attributes.type) {
    case cudaMemoryTypeManaged: return Status::kOk;  // any device may use it
    case cudaMemoryTypeDevice:
      if (attributes.device == device) return Status::kOk;
      return set_error(Status::kInvalidArgument, what + " is on device " + std::to_string(attributes.device) +
                                                     " but the current device is " + std::to_string(device));
    case cudaMemoryTypeHost:
    case cudaMemoryTypeUnregistered: break;
  }
  return set_error(Status::kInvalidArgument, what + " is host memory; the sm90 backend needs device memory");
}

Status check_stream(void* cuda_stream, int device) {
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  // NULL and the two special handles name a stream of whichever device is current.
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return Status::kOk;
  // A stream being captured into a CUDA graph refuses cudaStreamGetDevice, and the refusal ends the
  // capture; cudaStreamIsCapturing is allowed there and still tells a stream from no stream.
  const auto not_a_stream = [&](const char* query, cudaError_t error) {
    return set_error(Status::kInvalidArgument, "options->cuda_stream (" + address(cuda_stream) +
                                                   ") is not a CUDA stream (" + query + ": " +
                                                   runtime_error(error) + ")");
  };
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t error = cudaStreamIsCapturing(stream, &capture);
  if (error != cudaSuccess) return not_a_stream("cudaStreamIsCapturing", error);
  if (capture != cudaStreamCaptureStatusNone) return Status::kOk;
  int stream_device = -1;
  error = cudaStreamGetDevice(stream, &stream_device);
  if (error != cudaSuccess) return not_a_stream("cudaStreamGetDevice", error);
  if (stream_device == device) return Status::kOk;
  return set_error(Status::kInvalidArgument, "options->cuda_stream belongs to device " +
                                                 std::to_string(stream_device) + " but the current device is " +
                                                 std::to_string(device));
}

}  // namespace

Status check_device(std::initializer_list<DevicePointer> pointers, void* cuda_stream) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    return set_error(Status::kBackendUnavailable, "sm90: no CUDA device: " + runtime_error(error));
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    return set_error(Status::kBackendUnavailable,
                     "sm90: the current device " + std::to_string(device) + " has compute capability " +
                         std::to_string(major) + "." + std::to_string(minor) + "; the kernels need 9.0 (H100/H200)");
  }
  for (const DevicePointer& p : pointers) {
    if (p.pointer == nullptr) continue;
    if (Status status = check_pointer(p, device); status != Status::kOk) return status;
  }
  return check_stream(cuda_stream, device);
}

Status current_device_shape(DeviceShape& shape) {
  // Asked once per device (a device's shape never changes). Threads that race here write the same
  // values; sm_count is published last, so a reader that sees it also sees l2_bytes.
  struct CachedShape {
    std::atomic<int> sm_count{0};
    std::atomic<int64_t> l2_bytes{0};
  };
  constexpr int kMaxDevices = 64;
  static CachedShape cache[kMaxDevices];
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return cuda_failure("cudaGetDevice", error);
  if (device < kMaxDevices) {
    if (const int sm_count = cache[device].sm_count.load(std::memory_order_acquire); sm_count > 0) {
      shape = {sm_count, cache[device].l2_bytes.load(std::memory_order_relaxed)};
      return Status::kOk;
    }
  }
  int sm_count = 0, l2_bytes = 0;
  error = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (error == cudaSuccess) error = cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device);
  if (error != cudaSuccess) return cuda_failure("cudaDeviceGetAttribute", error);
  shape = {sm_count, l2_bytes};
  if (device < kMaxDevices) {
    cache[device].l2_bytes.store(l2_bytes, std::memory_order_relaxed);
    cache[device].sm_count.store(sm_count, std::memory_order_release);
  }
  return Status::kOk;
}

}  // namespace hopattn::sm90
