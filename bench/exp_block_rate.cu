// The forward softmax's exponentials block on its own: per thread 2 rows x kColumns scores, each
// exp2(score * c - m) with the row sum in four chains per row, as softmax.cuh's fused path computes
// it, repeated on the same registers (the results stay in (0, 1]). No GEMM, no other warp's softmax:
// what one warp per SM sub-partition (128 threads a block), or two (256), takes for the block when
// nothing else shares the sub-partition, against the timeline's in-kernel reading. `kSumsAfter`:
// every exponential first and the sums after a warp-uniform branch (the layout ptxas gives
// `latesum2`), so its MUFUs issue back to back.
//   nvcc -O3 -std=c++17 -arch=sm_90a -ftz=true -o /tmp/exp_block_rate bench/exp_block_rate.cu && /tmp/exp_block_rate
#include <cstdio>

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

template <int kColumns, bool kSumsAfter>
__global__ void exponentials(float* sink, long long* cycles, int iterations, float c, float m, int uniform_one) {
  float s[kRows][kColumns];
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kColumns; ++j) s[r][j] = 0.001f * float((threadIdx.x + 7 * j + r) % 997);
  float row_sum[kRows] = {0.f, 0.f};
  __syncthreads();
  const long long start = clock64();
  // As softmax.cuh: a warp vote picks the fused exponent form (always, here) or the exact one.
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
  for (int it = 0; it < iterations; ++it) {
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
  __syncthreads();
  const long long stop = clock64();
  float total = row_sum[0] + row_sum[1];
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kColumns; ++j) total += s[r][j];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = total;
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
  return failed;
}
