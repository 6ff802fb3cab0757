# HOPATTN_SANITIZE: a -fsanitize= list (address,undefined or thread) for every target of this
# build, for the sanitizer stages of scripts/sanitize.sh. Findings abort the process
# (-fno-sanitize-recover=all) so that a test fails on the first one; frame pointers and line
# tables keep the reports readable in an optimised build.
set(HOPATTN_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined or thread")
if(HOPATTN_SANITIZE)
  message(STATUS "hopattn: built with -fsanitize=${HOPATTN_SANITIZE}")
  add_compile_options(-fsanitize=${HOPATTN_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=${HOPATTN_SANITIZE})
  # GCC's TSan instruments function entry, the ifunc resolver of cpu/forward.cpp's
  # target_clones included; the resolver runs while the program is relocated, before the TSan
  # runtime exists, and crashes. Accesses stay instrumented; reports show fewer caller frames.
  if(HOPATTN_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(--param=tsan-instrument-func-entry-exit=0)
  endif()
endif()
