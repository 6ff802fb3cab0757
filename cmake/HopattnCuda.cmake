# Whether the SM90 backend is built, and for which architecture.
#
#   HOPATTN_ENABLE_CUDA=OFF   the CPU-only switch: no nvcc, no CUTLASS, no kernels (a build of
#                             seconds instead of minutes); hopattn_build_info() says so.
#   HOPATTN_CUDA_ARCHS        the kernels use wgmma and setmaxnreg, which exist on sm_90a only,
#                             so 90a is the one value accepted; the variable is there to say so
#                             (and to refuse a CMAKE_CUDA_ARCHITECTURES-style list with a reason).
#
# Sets HOPATTN_HAVE_CUDA (ON when a CUDA compiler was found and enabled) and
# HOPATTN_CUDA_GENCODE (the nvcc flags of HOPATTN_CUDA_ARCHS).

option(HOPATTN_ENABLE_CUDA "Build the SM90 (Hopper) backend when a CUDA compiler is found" ON)
set(HOPATTN_CUDA_ARCHS "90a" CACHE STRING
    "CUDA architectures of the SM90 kernels; they need sm_90a (wgmma, setmaxnreg): 90a only")
set_property(CACHE HOPATTN_CUDA_ARCHS PROPERTY STRINGS 90a)

set(HOPATTN_HAVE_CUDA OFF)
if(NOT HOPATTN_ENABLE_CUDA)
  message(STATUS "hopattn: HOPATTN_ENABLE_CUDA=OFF: building the CPU backend only")
  return()
endif()

if(NOT HOPATTN_CUDA_ARCHS STREQUAL "90a")
  message(FATAL_ERROR
    "hopattn: HOPATTN_CUDA_ARCHS is '${HOPATTN_CUDA_ARCHS}', but the SM90 kernels use wgmma and "
    "setmaxnreg, which exist only on sm_90a (H100, H200, GH200): the one value accepted is 90a. "
    "Other GPUs are not supported; to build without the GPU backend use -DHOPATTN_ENABLE_CUDA=OFF.")
endif()
set(HOPATTN_CUDA_GENCODE -gencode=arch=compute_90a,code=sm_90a)

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "hopattn: no CUDA compiler found; building without the SM90 backend "
                 "(-DCMAKE_CUDA_COMPILER=/path/to/nvcc to use one)")
  return()
endif()
# The sm90 target passes HOPATTN_CUDA_GENCODE itself; a default architecture from CMake would add
# a second, wrong one.
set(CMAKE_CUDA_ARCHITECTURES OFF)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(HOPATTN_HAVE_CUDA ON)
