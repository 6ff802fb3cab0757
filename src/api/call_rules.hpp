// Rules shared by the calls of every operation (forward, backward, FP8) that are not about one
// tensor: the growable structs and their hopattn_init_*, the options every operation has (backend,
// scale), the varlen metadata, the CPU backend's work count, the FP8 scale arrays and the caller's
// workspace. Each operation's own rules (validate_forward.cpp, validate_backward.cpp,
// validate_quantize.cpp, validate_forward_fp8.cpp) call these with its argument names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "api/system_queries.hpp"
#include "api/tensor_rules.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

// The library allocates below this alignment itself (cudaMallocAsync gives 256 bytes), and the
// backends may carve the workspace into vectorised buffers.
constexpr uintptr_t kWorkspaceAlignment = 256;

// The caller's struct as this library knows it: the first struct_size bytes the caller wrote,
// the defaults for fields added after its hopattn.h. A caller's hopattn.h newer than the library
// may have fields past sizeof(Struct); their defaults are zero bytes (hopattn.h's rule), so any
// other byte there asks for something this library would silently ignore, and is refused.
template <class Struct>
Status read_growable(const Struct& given, const Struct& defaults, size_t first_size,
                     const char* argument, const char* type, const char* default_function,
                     const char* init_function, Struct& out) {
  if (given.struct_size < first_size) {
    return invalid(argument, "->struct_size is ", given.struct_size, "; it must be sizeof(", type,
                   ") as the caller's hopattn.h defines it (at least ", first_size,
                   "): initialise the struct with ", default_function, "() or ", init_function,
                   "()");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(&given);
  for (size_t byte = sizeof(Struct); byte < given.struct_size; ++byte) {
    if (bytes[byte] != 0) {
      return invalid(argument, "->struct_size is ", given.struct_size, " and byte ", byte,
                     " is not zero: the caller's hopattn.h has fields that this library's ", type,
                     " (", sizeof(Struct), " bytes) does not, and one of them is set; use a "
                     "hopattn library at least as new as the header, or leave those fields at "
                     "their defaults");
    }
  }
  out = defaults;
  std::memcpy(&out, &given,
              given.struct_size < sizeof(Struct) ? given.struct_size : sizeof(Struct));
  out.struct_size = sizeof(Struct);
  return Status::kOk;
}

// hopattn_init_*: the defaults in the caller's first struct_size bytes, zero (the defaults of
// fields from a newer hopattn.h) past the fields this library knows, and nothing past them.
template <class Struct>
Status init_growable(Struct* out, size_t struct_size, Struct defaults, size_t first_size,
                     const char* argument, const char* type) {
  if (out == nullptr) return invalid(argument, " is NULL; it must point to the caller's ", type);
  if (struct_size < first_size) {
    return invalid("struct_size is ", struct_size, "; it must be sizeof(", type,
                   ") as the caller's hopattn.h defines it (at least ", first_size, ")");
  }
  defaults.struct_size = struct_size;
  std::memcpy(out, &defaults, struct_size < sizeof(Struct) ? struct_size : sizeof(Struct));
  if (struct_size > sizeof(Struct)) {
    std::memset(reinterpret_cast<unsigned char*>(out) + sizeof(Struct), 0, struct_size - sizeof(Struct));
  }
  return Status::kOk;
}

// options.backend (read as an integer) and options.softmax_scale.
Status check_backend_and_scale(int backend, float softmax_scale);

// The bytes of the LSE of a call with query tensor q: (batch, heads_q, seqlen_q) float32 values,
// for varlen batch 1 and seqlen_q = total_q. Only once check_lse has accepted it.
int64_t lse_bytes(const hopattn_tensor& q);
// A non-null lse: 4-byte aligned, and lse_bytes(q) fit in int64 and the address space.
Status check_lse(const hopattn_tensor& q, const float* lse);

// *given as this library knows it (a growable struct); NULL is refused ("varlen is NULL").
Status read_varlen(const hopattn_varlen* given, hopattn_varlen& varlen);

// What can be checked of varlen without reading its arrays.
Status check_varlen_arguments(const hopattn_varlen& varlen);

// The metadata arrays in the memory space of the backend the tensors chose (AUTO decides by the
// tensors), where that backend reads them.
Status check_varlen_memory_space(const hopattn_varlen& varlen, hopattn_backend backend,
                                 const SystemQueries& system);

// The CPU backend reads the metadata itself (host memory), so it can be checked in full:
// prefix sums from 0, non-decreasing, lengths <= max_seqlen, ending at the tensors' rows;
// 0 <= seqused_k[b] <= the key length.
Status check_varlen_metadata(const hopattn_varlen& varlen, int64_t total_q, int64_t total_k);

// Multiply-adds of Q K^T (check_backend_work), or -1 on int64 overflow: fixed lengths from the
// shapes, varlen (non-null) from the metadata (checked on the CPU, whose bound this is).
int64_t call_work(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_varlen* varlen,
                  std::string& formula);

// FP8 scales (hopattn_quantize_fp8's output, hopattn_forward_fp8's q/k/v_scales): the scaling, read
// as an integer, one of hopattn_fp8_scaling, and for HOPATTN_FP8_SCALE_BLOCK block_rows > 0.
// `owner` names the struct holding the fields: "options" or "k_scales" (-> "k_scales->scaling").
Status check_fp8_scaling(int scaling, int64_t block_rows, const std::string& owner);

// An hopattn_fp8_layout read as an integer (`name`: "options->fp8_v_layout", "options->layout"):
// HOPATTN_FP8_LAYOUT_ROWS or HOPATTN_FP8_LAYOUT_V_TRANSPOSED.
Status check_fp8_layout(int layout, const char* name);

// How the scales of a (validated) tensor t are named and counted in messages.
struct Fp8ScalesNames {
  std::string data;          // the array: "scales", "k_scales->data"
  std::string of;            // the tensor's sizes as the message names them: "" or "k."
  std::string block_rows;    // "block_rows", "k_scales->block_rows"
};

// The float32 array of t's scales in `scaling`'s layout (a valid scaling, with block_rows > 0 for
// BLOCK): non-null, 4-byte aligned, its `count` values within the address space.
Status check_fp8_scales_array(const float* data, const hopattn_tensor& t, int scaling,
                              int64_t block_rows, const Fp8ScalesNames& names, int64_t& count);

// A workspace the caller passed (non-null): large enough, aligned, in the backend's memory space.
// `size_function` names the query that answers `needed`, for the message.
Status check_workspace(const void* workspace, size_t workspace_bytes, hopattn_backend backend,
                       size_t needed, const char* size_function, const SystemQueries& system);

}  // namespace hopattn
