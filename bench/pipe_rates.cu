// The issue rate of the softmax step's instruction kinds on one SM sub-partition (SMSP): alone, mixed
// with MUFU.EX2, and beside a warpgroup that issues HGMMAs as the other warpgroup of the pingpong
// does: the numbers a model of the key loop needs (which pipe an instruction waits for, which
// kinds share one, what the other warpgroup's GEMMs cost it). Each thread runs eight chains, each
// reading one other chain's last value, so latency does not bound the rate; one block per SM;
// clock64 around the loop.
//   nvcc -O3 -std=c++17 -arch=sm_90a -I.deps/cutlass/include -o /tmp/pipe_rates bench/pipe_rates.cu
//   /tmp/pipe_rates      (the performance log quotes its output on the H200: bench/results/pipe_rates_h200.txt)
#include <cstdio>

#include "gemm_neighbour.cuh"

constexpr int kSms = 132;                 // the H100 / H200 SXM: one block on each
constexpr int kMaxThreadsPerBlock = 256;  // 2 warps per SMSP, or 2 warpgroups

enum class Kind { kEx2, kMax, kFma, kConvertBf16x2, kEx2AndConvert, kEx2AndMax, kEx2AndFma };

template <Kind kKind>
__device__ __forceinline__ void issue(float& x, float neighbour) {
  if constexpr (kKind == Kind::kEx2) {
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(x) : "f"(-x));
  } else if constexpr (kKind == Kind::kMax) {
    asm volatile("max.f32 %0, %1, %2;" : "=f"(x) : "f"(x), "f"(neighbour));
  } else if constexpr (kKind == Kind::kFma) {
    asm volatile("fma.rn.ftz.f32 %0, %1, %2, %3;" : "=f"(x) : "f"(x), "f"(0.999f), "f"(neighbour));
  } else {
    unsigned packed;
    asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(x), "f"(neighbour));
    x = __uint_as_float(packed);
  }
}

// The mixed kinds alternate MUFU.EX2 (even chains) with the other kind (odd chains).
template <Kind kKind>
__global__ void chains(float* sink, long long* cycles, int iterations) {
  constexpr Kind kOther = kKind == Kind::kEx2AndConvert ? Kind::kConvertBf16x2
                          : kKind == Kind::kEx2AndMax   ? Kind::kMax
                          : kKind == Kind::kEx2AndFma   ? Kind::kFma
                                                        : kKind;
  constexpr bool kMixed = kOther != kKind;
  float x[8];
  for (int i = 0; i < 8; ++i) x[i] = -0.001f * float(threadIdx.x + i);
  __syncthreads();
  const long long start = clock64();
  for (int it = 0; it < iterations; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (kMixed && i % 2 == 0) {
        issue<Kind::kEx2>(x[i], 0.f);
      } else {
        issue<kOther>(x[i], x[(i + 1) % 8]);
      }
    }
  }
  __syncthreads();
  const long long stop = clock64();
  float sum = 0.f;
  for (int i = 0; i < 8; ++i) sum += x[i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the chains live
  if (threadIdx.x == 0) cycles[blockIdx.x] = stop - start;
}

template <Kind kKind>
void measure(char const* name, float* sink, long long* cycles) {
  constexpr int kIterations = 4096;
  for (int warps_per_smsp : {1, 2}) {
    const int threads = 4 * 32 * warps_per_smsp;
    chains<kKind><<<kSms, threads>>>(sink, cycles, kIterations);  // warm-up
    chains<kKind><<<kSms, threads>>>(sink, cycles, kIterations);
    cudaError_t status = cudaGetLastError();
    if (status == cudaSuccess) status = cudaDeviceSynchronize();
    long long elapsed = 0;
    cudaMemcpy(&elapsed, cycles, sizeof(elapsed), cudaMemcpyDeviceToHost);
    const double per_instruction = double(elapsed) / (double(kIterations) * 8 * warps_per_smsp);
    printf("%-12s %d warp(s)/SMSP: %5.2f cycles per warp instruction (%s)\n", name, warps_per_smsp,
           per_instruction, cudaGetErrorString(status));
  }
}

// Beside the chains of warpgroup 1, warpgroup 0 issues batches of eight HGMMA 64x128x16 (Q K^T's
// shape at head_dim 128) from shared memory, waiting for each, until the chains are done.
template <Kind kKind>
__global__ void __launch_bounds__(kMaxThreadsPerBlock) chains_beside_gemms(bool gemms, float* sink, long long* cycles,
                                                           long long* batches, int iterations) {
  extern __shared__ __align__(1024) char smem[];
  if (gemm_neighbour::run_beside</*kAInRegisters=*/false>(smem, gemms, sink, batches)) return;
  float x[8];
  for (int i = 0; i < 8; ++i) x[i] = -0.001f * float(threadIdx.x + i);
  const long long start = clock64();
  for (int it = 0; it < iterations; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) issue<kKind>(x[i], x[(i + 1) % 8]);
  }
  const long long stop = clock64();
  gemm_neighbour::finish(smem);
  if (threadIdx.x == 128) cycles[blockIdx.x] = stop - start;
  float sum = 0.f;
  for (int i = 0; i < 8; ++i) sum += x[i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

template <Kind kKind>
void measure_beside_gemms(char const* name, float* sink, long long* cycles, long long* batches) {
  constexpr int kIterations = 8192, kSmem = gemm_neighbour::kSharedBytes;
  cudaFuncSetAttribute(chains_beside_gemms<kKind>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  for (bool gemms : {false, true}) {
    chains_beside_gemms<kKind><<<kSms, kMaxThreadsPerBlock, kSmem>>>(gemms, sink, cycles, batches, kIterations);  // warm-up
    chains_beside_gemms<kKind><<<kSms, kMaxThreadsPerBlock, kSmem>>>(gemms, sink, cycles, batches, kIterations);
    cudaError_t status = cudaGetLastError();
    if (status == cudaSuccess) status = cudaDeviceSynchronize();
    long long elapsed = 0, batch_count = 0;
    cudaMemcpy(&elapsed, cycles, sizeof(elapsed), cudaMemcpyDeviceToHost);
    cudaMemcpy(&batch_count, batches, sizeof(batch_count), cudaMemcpyDeviceToHost);
    printf("%-12s 1 warp/SMSP, %s: %5.2f cycles per warp instruction", name,
           gemms ? "beside HGMMAs" : "other idle   ", double(elapsed) / (double(kIterations) * 8));
    if (gemms && batch_count > 0) printf(" (%.0f cycles per batch of 8 HGMMA)", double(elapsed) / double(batch_count));
    printf(" (%s)\n", cudaGetErrorString(status));
  }
}

int main() {
  float* sink = nullptr;
  long long* cycles = nullptr;
  if (cudaMalloc(&sink, kSms * kMaxThreadsPerBlock * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&cycles, kSms * sizeof(long long)) != cudaSuccess) {
    printf("cudaMalloc failed\n");
    return 1;
  }
  measure<Kind::kEx2>("MUFU.EX2", sink, cycles);
  measure<Kind::kMax>("FMNMX", sink, cycles);
  measure<Kind::kFma>("FFMA", sink, cycles);
  measure<Kind::kConvertBf16x2>("F2FP.BF16", sink, cycles);
  measure<Kind::kEx2AndConvert>("EX2 + F2FP", sink, cycles);
  measure<Kind::kEx2AndMax>("EX2 + FMNMX", sink, cycles);
  measure<Kind::kEx2AndFma>("EX2 + FFMA", sink, cycles);
  long long* batches = nullptr;
  if (cudaMalloc(&batches, kSms * sizeof(long long)) != cudaSuccess) {
    printf("cudaMalloc failed\n");
    return 1;
  }
  cudaMemset(batches, 0, kSms * sizeof(long long));
  measure_beside_gemms<Kind::kEx2>("MUFU.EX2", sink, cycles, batches);
  measure_beside_gemms<Kind::kFma>("FFMA", sink, cycles, batches);
  measure_beside_gemms<Kind::kMax>("FMNMX", sink, cycles, batches);
  measure_beside_gemms<Kind::kConvertBf16x2>("F2FP.BF16", sink, cycles, batches);
  return 0;
}
