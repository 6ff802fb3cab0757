// What only the CUDA runtime can tell about an SM90 call, checked before anything is launched: a
// Hopper device is current, every pointer is memory that device can use, and the stream is one of
// that device's streams. The forward and the backward dispatch run it with their own pointers. And
// the device's shape, which the launches size their grids and tile orders by.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/types.hpp"

namespace hopattn::sm90 {

// A pointer of the call and its name in the C API ("q.data", "lse", "options->workspace").
struct DevicePointer {
  const void* pointer;  // null: absent, skipped
  const char* name;
};

// The current device's SM count and L2 size, read once per device (the grids' size and tile order).
struct DeviceShape {
  int sm_count = 0;
  int64_t l2_bytes = 0;
};
Status current_device_shape(DeviceShape& shape);

// Reports a failure through set_error: kBackendUnavailable without a compute-capability 9.0
// current device, kInvalidArgument for memory the runtime cannot classify, host memory, memory of
// another device, or a stream that is not the current device's.
Status check_device(std::initializer_list<DevicePointer> pointers, void* cuda_stream);

}  // namespace hopattn::sm90
