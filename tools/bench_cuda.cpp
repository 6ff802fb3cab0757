#include <cuda_runtime.h>

#include <string>

#include "bench_device.hpp"

namespace hopattn::bench {
namespace {

// Owns one device allocation; the benchmark's buffers are freed on every exit path.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() { cudaFree(ptr); }
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

struct Stream {
  cudaStream_t stream = nullptr;
  ~Stream() { cudaStreamDestroy(stream); }
};

bool failed(cudaError_t err, const char* what, TimedRun& run) {
  if (err == cudaSuccess) return false;
  run.status = HOPATTN_ERROR_CUDA;
  run.error = std::string(what) + ": " + cudaGetErrorString(err);
  return true;
}

template <class T>
bool upload(const std::vector<T>& host, DeviceBuffer& device, TimedRun& run) {
  const size_t bytes = host.size() * sizeof(T);
  return !failed(cudaMalloc(&device.ptr, bytes), "cudaMalloc", run) &&
         !failed(cudaMemcpy(device.ptr, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy",
                 run);
}

template <class T>
bool download(const DeviceBuffer& device, std::vector<T>& host, TimedRun& run) {
  return !failed(
      cudaMemcpy(host.data(), device.ptr, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
      "cudaMemcpy", run);
}

}  // namespace

TimedRun time_on_sm90(HostTensors& tensors, const hopattn_forward_options& host_options, int warmup,
                      int iters) {
  TimedRun run;
  DeviceBuffer q, k, v, o, lse, cu_seqlens, q_scales, k_scales, v_scales;
  Events events;
  Stream stream;
  // An FP8 case uploads its e4m3 codes and scales in place of the bfloat16 inputs.
  const Fp8Inputs& fp8 = tensors.fp8;
  const bool is_fp8 = tensors.is_fp8;
  if (!upload(is_fp8 ? fp8.q : tensors.q, q, run) || !upload(is_fp8 ? fp8.k : tensors.k, k, run) ||
      !upload(is_fp8 ? fp8.v : tensors.v, v, run) || !upload(tensors.o, o, run) ||
      !upload(tensors.lse, lse, run) ||
      (tensors.is_varlen && !upload(tensors.cu_seqlens, cu_seqlens, run)) ||
      (is_fp8 && (!upload(fp8.q_scales, q_scales, run) || !upload(fp8.k_scales, k_scales, run) ||
                  !upload(fp8.v_scales, v_scales, run))) ||
      failed(cudaStreamCreateWithFlags(&stream.stream, cudaStreamNonBlocking), "stream", run) ||
      failed(cudaEventCreate(&events.start), "cudaEventCreate", run) ||
      failed(cudaEventCreate(&events.stop), "cudaEventCreate", run))
    return run;

  CallArguments arguments = host_arguments(tensors);
  arguments.q.data = q.ptr;
  arguments.k.data = k.ptr;
  arguments.v.data = v.ptr;
  arguments.o.data = o.ptr;
  arguments.lse = static_cast<float*>(lse.ptr);
  // The SM90 backend reads the prefix sums and the scales on the device.
  arguments.varlen.cu_seqlens_q = arguments.varlen.cu_seqlens_k =
      static_cast<const int32_t*>(cu_seqlens.ptr);
  arguments.q_scales.data = static_cast<const float*>(q_scales.ptr);
  arguments.k_scales.data = static_cast<const float*>(k_scales.ptr);
  arguments.v_scales.data = static_cast<const float*>(v_scales.ptr);
  hopattn_forward_options options = host_options;
  options.cuda_stream = stream.stream;
  for (int i = 0; i < warmup + iters; ++i) {
    if (failed(cudaEventRecord(events.start, stream.stream), "cudaEventRecord", run)) return run;
    run.status = run_forward(tensors, arguments, options);
    if (run.status != HOPATTN_OK) {
      run.error = hopattn_last_error();
      return run;
    }
    float ms = 0.f;
    if (failed(cudaEventRecord(events.stop, stream.stream), "cudaEventRecord", run) ||
        failed(cudaEventSynchronize(events.stop), "kernel", run) ||
        failed(cudaEventElapsedTime(&ms, events.start, events.stop), "cudaEventElapsedTime", run))
      return run;
    if (i >= warmup) run.times_ms.push_back(ms);
  }
  if (download(o, tensors.o, run)) download(lse, tensors.lse, run);
  return run;
}

std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "unknown GPU";
  return prop.name;
}

std::string cuda_device_summary() {
  int device = 0;
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) {
    cudaGetLastError();  // no sticky error for the library's later calls
    return std::string("CUDA: ") + cudaGetErrorString(err);
  }
  return "CUDA sees " + std::string(prop.name) + ", compute capability " +
         std::to_string(prop.major) + "." + std::to_string(prop.minor);
}

}  // namespace hopattn::bench
