// The forward softmax's exponentials block on its own: per thread 2 rows x kColumns scores, each
// exp2(score * c - m) with the row sum in four chains per row, as softmax.cuh's fused path computes
// it, repeated on the same registers (the results stay in (0, 1]). No GEMM, no other warp's softmax:
// what one warp per SM sub-partition (128 threads a block), or two (256), takes for the block when
// nothing else shares the sub-partition, against the timeline's in-kernel reading. `kSumsAfter`:
// every exponential first and the sums after a warp-uniform branch (the layout ptxas gives
// `latesum2`), so its MUFUs issue back to back. Then the main layout on one warp a sub-partition
// beside a warpgroup that issues batches of eight HGMMA 64x128x16, from shared memory (SS, as
// Q K^T) or with A from its registers (RS, as P V), as pipe_rates.cu does for single instructions:
// what the tensor cores' work beside it costs the block.
//   nvcc -O3 -std=c++17 -arch=sm_90a -ftz=true -I.deps/cutlass/include -o /tmp/exp_block_rate \
//     bench/exp_block_rate.cu && /tmp/exp_block_rate
#include <cstdio>

#include "gemm_neighbour.cuh"

constexpr int kSms = 132;
constexpr int kRows = 2;
constexpr int kChains = 4;

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t e = (call);                                                            \
    if (e != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e));                  \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

// One repetition of the block on the thread's scores, in place. As softmax.cuh: a warp vote picks the
// fused exponent form (always, here) or the exact one.
template <int kColumns, bool kSumsAfter>
__device__ __forceinline__ void exponential_block(float (&s)[kRows][kColumns], float (&row_sum)[kRows], float c,
                                                  float m, int uniform_one) {
  auto exponentials = [&](auto exponent_of) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      [[maybe_unused]] float chain[kChains] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < kColumns; ++j) {
        s[r][j] = exp2f(exponent_of(s[r][j]));
        if constexpr (!kSumsAfter) chain[j % kChains] += s[r][j];
      }
      if constexpr (!kSumsAfter) row_sum[r] = row_sum[r] * 0.5f + ((chain[0] + chain[1]) + (chain[2] + chain[3]));
    }
  };
  if (__all_sync(0xffffffff, uniform_one != 0)) {
    exponentials([&](float x) { return fmaf(x, c, -m); });
  } else {
    exponentials([&](float x) { return (x - m) * c; });
  }
  if constexpr (kSumsAfter) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float chain[kChains] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < kColumns; ++j) chain[j % kChains] += s[r][j];
      row_sum[r] = row_sum[r] * 0.5f + ((chain[0] + chain[1]) + (chain[2] + chain[3]));
    }
  }
}

template <int kColumns>
__device__ __forceinline__ void initial_scores(float (&s)[kRows][kColumns]) {
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kColumns; ++j) s[r][j] = 0.001f * float((threadIdx.x + 7 * j + r) % 997);
}

template <int kColumns>
__device__ __forceinline__ float keep_live(float (&s)[kRows][kColumns], float (&row_sum)[kRows]) {
  float total = row_sum[0] + row_sum[1];
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kColumns; ++j) total += s[r][j];
  return total;
}

template <int kColumns, bool kSumsAfter>
__global__ void exponentials(float* sink, long long* cycles, int iterations, float c, float m, int uniform_one) {
  float s[kRows][kColumns];
  initial_scores(s);
  float row_sum[kRows] = {0.f, 0.f};
  __syncthreads();
  const long long start = clock64();
  for (int it = 0; it < iterations; ++it) exponential_block<kColumns, kSumsAfter>(s, row_sum, c, m, uniform_one);
  __syncthreads();
  const long long stop = clock64();
  sink[blockIdx.x * blockDim.x + threadIdx.x] = keep_live(s, row_sum);
  if (threadIdx.x == 0) cycles[blockIdx.x] = stop - start;
}

template <int kColumns, bool kSumsAfter>
int measure(const char* name, int threads, float* sink, long long* cycles) {
  constexpr int kIterations = 256;
  long long host[kSms];
  for (int launch = 0; launch < 2; ++launch) {  // the first warms up
    exponentials<kColumns, kSumsAfter><<<kSms, threads>>>(sink, cycles, kIterations, 1.f, 2.f, 1);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaMemcpy(host, cycles, sizeof(host), cudaMemcpyDeviceToHost));
  long long total = 0;
  for (long long c : host) total += c;
  const double per_block = double(total) / kSms / kIterations;
  std::printf("%-28s %d scores a thread, %d warp(s) a sub-partition: %6.0f cycles a block, %5.1f a MUFU\n", name,
              kRows * kColumns, threads / 128, per_block, per_block / (kRows * kColumns));
  return 0;
}

enum class Beside { kNothing, kSsGemms, kRsGemms };

// Warpgroup 1 runs the block `iterations` times; warpgroup 0 issues GEMM batches until it is done.
template <Beside kBeside>
__global__ void __launch_bounds__(256) exponentials_beside(float* sink, long long* cycles, long long* batches,
                                                           int iterations, float c, float m, int uniform_one) {
  constexpr int kColumns = 48;
  extern __shared__ __align__(1024) char smem[];
  if (gemm_neighbour::run_beside<kBeside == Beside::kRsGemms>(smem, kBeside != Beside::kNothing, sink, batches)) return;
  float s[kRows][kColumns];
  initial_scores(s);
  float row_sum[kRows] = {0.f, 0.f};
  const long long start = clock64();
  for (int it = 0; it < iterations; ++it) exponential_block<kColumns, false>(s, row_sum, c, m, uniform_one);
  const long long stop = clock64();
  gemm_neighbour::finish(smem);
  if (threadIdx.x == 128) cycles[blockIdx.x] = stop - start;
  sink[blockIdx.x * blockDim.x + threadIdx.x] = keep_live(s, row_sum);
}

template <Beside kBeside>
int measure_beside(const char* name, float* sink, long long* cycles, long long* batches) {
  constexpr int kIterations = 256, kSmem = gemm_neighbour::kSharedBytes;
  CHECK(cudaFuncSetAttribute(exponentials_beside<kBeside>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  for (int launch = 0; launch < 2; ++launch) {  // the first warms up
    exponentials_beside<kBeside><<<kSms, 256, kSmem>>>(sink, cycles, batches, kIterations, 1.f, 2.f, 1);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
  }
  long long host[kSms], host_batches[kSms];
  CHECK(cudaMemcpy(host, cycles, sizeof(host), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(host_batches, batches, sizeof(host_batches), cudaMemcpyDeviceToHost));
  long long total = 0, total_batches = 0;
  for (int i = 0; i < kSms; ++i) total += host[i], total_batches += host_batches[i];
  const double per_block = double(total) / kSms / kIterations;
  std::printf("%-28s 96 scores a thread, 1 warp a sub-partition: %6.0f cycles a block, %5.1f a MUFU", name, per_block,
              per_block / 96);
  if (kBeside != Beside::kNothing && total_batches > 0)
    std::printf(" (%.0f cycles a batch of 8 HGMMA)", double(total) / double(total_batches));
  std::printf("\n");
  return 0;
}

int main() {
  float* sink;
  long long* cycles;
  CHECK(cudaMalloc(&sink, kSms * 256 * sizeof(float)));
  CHECK(cudaMalloc(&cycles, kSms * sizeof(long long)));
  int failed = 0;
  for (int threads : {128, 256}) {
    failed |= measure<48, false>("sums beside (main)", threads, sink, cycles);
    failed |= measure<48, true>("sums after (latesum2)", threads, sink, cycles);
    failed |= measure<32, false>("sums beside (main)", threads, sink, cycles);
  }
  long long* batches;
  CHECK(cudaMalloc(&batches, kSms * sizeof(long long)));
  CHECK(cudaMemset(batches, 0, kSms * sizeof(long long)));
  failed |= measure_beside<Beside::kNothing>("main, other warpgroup idle", sink, cycles, batches);
  failed |= measure_beside<Beside::kSsGemms>("main, beside SS HGMMAs", sink, cycles, batches);
  failed |= measure_beside<Beside::kRsGemms>("main, beside RS HGMMAs", sink, cycles, batches);
  return failed;
}
