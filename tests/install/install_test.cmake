# Driver of the install tests (tests/install/CMakeLists.txt): cmake -DMODE=... -P install_test.cmake
#   MODE=package           installs BUILD_DIR to WORK_DIR/prefix, checks the files, then builds and
#                          runs consumers through find_package(hopattn), pkg-config and a plain
#                          compiler line, and the installed hopattn-bench.
#   MODE=add_subdirectory  configures, builds and runs a parent project holding hopattn.
cmake_minimum_required(VERSION 3.25)

# Runs a command; on failure prints what it said and stops.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what}: failed (${result})\n  ${ARGN}\n${out}")
  endif()
  string(STRIP "${out}" out)
  string(FIND "${out}" "\n" last_newline REVERSE)
  math(EXPR last_line_start "${last_newline} + 1")
  string(SUBSTRING "${out}" ${last_line_start} -1 last_line)
  message(STATUS "${what}: ok ${last_line}")
endfunction()

# Configures, builds and runs consumer_cpp of the consumer project in TESTS_DIR/<project>.
function(build_and_run_consumer project)
  set(build "${WORK_DIR}/${project}")
  step("configure ${project} consumer"
    ${CMAKE_COMMAND} -S "${TESTS_DIR}/${project}" -B "${build}" -G "${GENERATOR}"
    -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release
    ${ARGN})
  step("build ${project} consumer" ${CMAKE_COMMAND} --build "${build}")
  step("run ${project} consumer" "${build}/consumer_cpp")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

if(MODE STREQUAL "add_subdirectory")
  build_and_run_consumer(add_subdirectory
    -DHOPATTN_SOURCE_DIR=${HOPATTN_SOURCE_DIR} -DHOPATTN_ENABLE_CUDA=OFF)
  return()
elseif(NOT MODE STREQUAL "package")
  message(FATAL_ERROR "MODE is '${MODE}': package or add_subdirectory")
endif()

set(prefix "${WORK_DIR}/prefix")
set(install_args)
if(CONFIG)
  list(APPEND install_args --config ${CONFIG})
endif()
step("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}" ${install_args})

set(expected
  ${LIBDIR}/libhopattn.so.${VERSION} ${LIBDIR}/libhopattn.so.${SOVERSION} ${LIBDIR}/libhopattn.so
  ${INCLUDEDIR}/hopattn/hopattn.h ${INCLUDEDIR}/hopattn/hopattn.hpp
  ${LIBDIR}/cmake/hopattn/hopattnConfig.cmake ${LIBDIR}/cmake/hopattn/hopattnConfigVersion.cmake
  ${LIBDIR}/cmake/hopattn/hopattnTargets.cmake ${LIBDIR}/pkgconfig/hopattn.pc)
if(WITH_TOOLS)
  list(APPEND expected ${BINDIR}/hopattn-bench)
endif()
foreach(file IN LISTS expected)
  if(NOT EXISTS "${prefix}/${file}")
    message(FATAL_ERROR "cmake --install did not install ${file}")
  endif()
endforeach()
file(READ_SYMLINK "${prefix}/${LIBDIR}/libhopattn.so" namelink)
file(READ_SYMLINK "${prefix}/${LIBDIR}/libhopattn.so.${SOVERSION}" sonamelink)
if(NOT namelink STREQUAL "libhopattn.so.${SOVERSION}" OR NOT sonamelink STREQUAL "libhopattn.so.${VERSION}")
  message(FATAL_ERROR "libhopattn.so -> ${namelink} -> ${sonamelink}: expected "
                      "libhopattn.so.${SOVERSION} -> libhopattn.so.${VERSION}")
endif()
if(OBJDUMP)
  execute_process(COMMAND ${OBJDUMP} -p "${prefix}/${LIBDIR}/libhopattn.so.${VERSION}"
                  OUTPUT_VARIABLE headers)
  if(NOT headers MATCHES "SONAME +libhopattn\\.so\\.${SOVERSION}\n")
    message(FATAL_ERROR "libhopattn.so.${VERSION} has no SONAME libhopattn.so.${SOVERSION}")
  endif()
endif()
message(STATUS "installed: libhopattn.so -> .so.${SOVERSION} (SONAME) -> .so.${VERSION}, headers, CMake package, pkg-config")

# 1. CMake: find_package(hopattn) -> hopattn::hopattn, the C++ header.
build_and_run_consumer(find_package -DCMAKE_PREFIX_PATH=${prefix})

# 2. pkg-config, as a Makefile would use it.
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found: run scripts/setup.sh (Debian package pkg-config)")
endif()
set(ENV{PKG_CONFIG_PATH} "${prefix}/${LIBDIR}/pkgconfig")
execute_process(COMMAND ${PKG_CONFIG} --modversion hopattn OUTPUT_VARIABLE pc_version
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT pc_version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion hopattn says '${pc_version}', expected ${VERSION}")
endif()
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs hopattn OUTPUT_VARIABLE pc_flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE result)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
step("build the pkg-config consumer (cc consumer.c $(pkg-config --cflags --libs hopattn))"
  ${C_COMPILER} "${TESTS_DIR}/consumer.c" ${pc_flags} "-Wl,-rpath,${prefix}/${LIBDIR}"
  -o "${WORK_DIR}/consumer_pkgconfig")
step("run the pkg-config consumer" "${WORK_DIR}/consumer_pkgconfig")

# 3. The plain compiler line of the README.
step("build with cc -I$PREFIX/include -L$PREFIX/lib -lhopattn"
  ${C_COMPILER} "${TESTS_DIR}/consumer.c" "-I${prefix}/${INCLUDEDIR}" "-L${prefix}/${LIBDIR}" -lhopattn
  "-Wl,-rpath,${prefix}/${LIBDIR}" -o "${WORK_DIR}/consumer_plain")
step("run the plain-compiler consumer" "${WORK_DIR}/consumer_plain")

# 4. The installed tool finds the installed library through its RUNPATH.
if(WITH_TOOLS)
  step("run the installed hopattn-bench --help" "${prefix}/${BINDIR}/hopattn-bench" --help)
endif()
