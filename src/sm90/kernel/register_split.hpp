// The one rule for how a warp-specialised kernel may split its registers between the producer
// warpgroup and the consumer warpgroups (setmaxnreg), read by the forward and backward configs.
//
// setmaxnreg only moves registers inside what the CTA was given at launch. With
// __launch_bounds__(threads, 1) ptxas gives every thread the register file's share, rounded down to
// the allocation unit of 8 (168 for 384 threads, 128 for 512); a consumer's setmaxnreg.inc then waits
// until the producer's .dec has freed enough. A split that asks for more than the launch allocation
// compiles, and hangs: 32 + 2 x 240 per thread of three warpgroups needs 65,536 registers against
// 168 x 384 = 64,512 (measured on the H200: every call of such a build hung).
#pragma once

namespace hopattn::sm90 {

constexpr int kRegisterFile = 65536;  // 32-bit registers per SM
constexpr int kWarpgroupThreads = 128;

// Registers per thread that ptxas allots a kernel of `threads` threads at one CTA per SM.
constexpr int launch_registers_per_thread(int threads) {
  const int share = kRegisterFile / threads / 8 * 8;
  return share < 255 ? share : 255;
}

// Whether setmaxnreg can give one producer warpgroup `producer` registers per thread and each of
// `consumer_warpgroups` warpgroups `consumer`; both must be multiples of 8 in [24, 256].
constexpr bool register_split_fits(int producer, int consumer, int consumer_warpgroups) {
  const int threads = (1 + consumer_warpgroups) * kWarpgroupThreads;
  const auto settable = [](int registers) { return registers % 8 == 0 && registers >= 24 && registers <= 256; };
  return settable(producer) && settable(consumer) &&
         kWarpgroupThreads * (producer + consumer_warpgroups * consumer) <=
             launch_registers_per_thread(threads) * threads;
}

}  // namespace hopattn::sm90
