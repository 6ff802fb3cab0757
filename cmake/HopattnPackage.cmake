# What `cmake --install` puts under the prefix, in three components (a packager or a wheel build
# can take only some):
#   hopattn_runtime      lib/libhopattn.so.0.1.0 and its SONAME link libhopattn.so.0
#   hopattn_development  lib/libhopattn.so, include/hopattn/hopattn.h(pp), the CMake package
#                        (lib/cmake/hopattn: hopattn::hopattn) and lib/pkgconfig/hopattn.pc
#   hopattn_tools        bin/hopattn-bench (tools/CMakeLists.txt)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HOPATTN_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hopattn)

install(TARGETS hopattn EXPORT hopattnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    COMPONENT hopattn_runtime NAMELINK_COMPONENT hopattn_development)
install(FILES ${PROJECT_SOURCE_DIR}/include/hopattn/hopattn.h
              ${PROJECT_SOURCE_DIR}/include/hopattn/hopattn.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hopattn COMPONENT hopattn_development)

install(EXPORT hopattnTargets NAMESPACE hopattn:: DESTINATION ${HOPATTN_CMAKE_INSTALL_DIR}
        COMPONENT hopattn_development)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/hopattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hopattnConfig.cmake INSTALL_DESTINATION ${HOPATTN_CMAKE_INSTALL_DIR})
# The SONAME carries the major version: a 0.x library serves a program built against any 0.y header
# (growable structs: see hopattn.h), so find_package(hopattn 0.1) accepts any 0.y >= 0.1.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hopattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hopattnConfig.cmake ${PROJECT_BINARY_DIR}/hopattnConfigVersion.cmake
        DESTINATION ${HOPATTN_CMAKE_INSTALL_DIR} COMPONENT hopattn_development)

# pkg-config: relative to the .pc file's own folder, so that `cmake --install --prefix DIR` and a
# copied tree both work.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(HOPATTN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(HOPATTN_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(HOPATTN_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH pc_to_prefix "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" pc_to_prefix "${pc_to_prefix}")
  set(HOPATTN_PC_PREFIX "\${pcfiledir}/${pc_to_prefix}")
  set(HOPATTN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(HOPATTN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/hopattn.pc.in ${PROJECT_BINARY_DIR}/hopattn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/hopattn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT hopattn_development)
