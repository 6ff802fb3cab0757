# The CUTLASS/CuTe headers the SM90 kernels compile against, and the one place their version is
# pinned. They come from the nvidia-cutlass wheel on PyPI, which ships them under
# cutlass_library/source/include; `pip download` fetches the wheel (no install, no dependencies).
#
# Used two ways, one implementation:
#   src/sm90/CMakeLists.txt, when it configures the SM90 backend and .deps/cutlass/include lacks them:
#       include(HopattnCutlass)
#       hopattn_fetch_cutlass(<include dir> <python> <error var>)
#   by hand, to fetch ahead (say, before carrying .deps/ to a machine without PyPI):
#       cmake -DDEST=.deps/cutlass/include -DPYTHON=python3 -P cmake/HopattnCutlass.cmake
set(HOPATTN_CUTLASS_WHEEL_VERSION 4.2.0.0)
# The wheel's fourth version field is packaging only; the headers say MAJOR.MINOR.PATCH.
string(REGEX REPLACE "\\.[0-9]+$" "" HOPATTN_CUTLASS_VERSION ${HOPATTN_CUTLASS_WHEEL_VERSION})

# <out_var>: MAJOR.MINOR.PATCH of the CUTLASS headers in <dir>, empty when there are none.
function(hopattn_cutlass_header_version dir out_var)
  set(version "")
  if(EXISTS "${dir}/cutlass/version.h" AND EXISTS "${dir}/cute/tensor.hpp")
    file(STRINGS "${dir}/cutlass/version.h" defines REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) ")
    foreach(part MAJOR MINOR PATCH)
      if("${defines}" MATCHES "#define CUTLASS_${part} ([0-9]+)")
        string(APPEND version "${CMAKE_MATCH_1}.")
      endif()
    endforeach()
    string(REGEX REPLACE "\\.$" "" version "${version}")
  endif()
  set(${out_var} "${version}" PARENT_SCOPE)
endfunction()

# Puts the pinned headers in <dest> unless they are there already. <error_var>: empty on success,
# else what failed.
function(hopattn_fetch_cutlass dest python error_var)
  set(${error_var} "" PARENT_SCOPE)
  hopattn_cutlass_header_version("${dest}" have)
  if(have STREQUAL HOPATTN_CUTLASS_VERSION)
    return()
  endif()
  set(work "${dest}.download")
  file(REMOVE_RECURSE "${work}")
  execute_process(
    COMMAND "${python}" -m pip download --quiet --disable-pip-version-check --no-deps
            -d "${work}" "nvidia-cutlass==${HOPATTN_CUTLASS_WHEEL_VERSION}"
    RESULT_VARIABLE result ERROR_VARIABLE pip_error OUTPUT_QUIET)
  file(GLOB wheel "${work}/nvidia_cutlass-*.whl")
  if(NOT result EQUAL 0 OR NOT wheel)
    string(STRIP "${pip_error}" pip_error)
    string(REGEX REPLACE ".*\n" "" pip_error "${pip_error}")  # pip's last line says why
    file(REMOVE_RECURSE "${work}")
    set(${error_var} "`${python} -m pip download nvidia-cutlass==${HOPATTN_CUTLASS_WHEEL_VERSION}` failed (${result}): ${pip_error}" PARENT_SCOPE)
    return()
  endif()
  file(ARCHIVE_EXTRACT INPUT "${wheel}" DESTINATION "${work}/wheel"
       PATTERNS "cutlass_library/source/include/*")
  file(REMOVE_RECURSE "${dest}")
  get_filename_component(parent "${dest}" DIRECTORY)
  file(MAKE_DIRECTORY "${parent}")
  file(RENAME "${work}/wheel/cutlass_library/source/include" "${dest}")
  file(REMOVE_RECURSE "${work}")
  hopattn_cutlass_header_version("${dest}" have)
  if(NOT have STREQUAL HOPATTN_CUTLASS_VERSION)
    set(${error_var} "the wheel's headers say CUTLASS '${have}', not ${HOPATTN_CUTLASS_VERSION}" PARENT_SCOPE)
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  cmake_minimum_required(VERSION 3.25)
  if(NOT DEST OR NOT PYTHON)
    message(FATAL_ERROR "usage: cmake -DDEST=<include dir> -DPYTHON=<python> -P ${CMAKE_CURRENT_LIST_FILE}")
  endif()
  hopattn_cutlass_header_version("${DEST}" have)
  if(have STREQUAL HOPATTN_CUTLASS_VERSION)
    message(STATUS "CUTLASS: headers ${have} present in ${DEST}")
  else()
    message(STATUS "CUTLASS: fetching nvidia-cutlass==${HOPATTN_CUTLASS_WHEEL_VERSION} headers")
    hopattn_fetch_cutlass("${DEST}" "${PYTHON}" error)
    if(error)
      message(FATAL_ERROR "CUTLASS: ${error}")
    endif()
  endif()
endif()
