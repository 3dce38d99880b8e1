# Dependencies come from Debian's packages (scripts/setup.sh installs them) plus the CUDA toolkit.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(Boost 1.74 REQUIRED)                 # Asio is header-only
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)

# liburing: the device machine has no headers, so link it statically when the archive exists.
find_path(LIBURING_INCLUDE_DIR liburing.h REQUIRED)
find_library(LIBURING_STATIC NAMES liburing.a)
find_library(LIBURING_SHARED NAMES uring REQUIRED)
add_library(epk_uring INTERFACE)
target_include_directories(epk_uring INTERFACE ${LIBURING_INCLUDE_DIR})
if(LIBURING_STATIC)
  target_link_libraries(epk_uring INTERFACE ${LIBURING_STATIC})
else()
  target_link_libraries(epk_uring INTERFACE ${LIBURING_SHARED})
endif()

if(EPK_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

# Binaries also run on the GPU machine, which lacks some of these libraries: prefer static archives and header-only
# forms (xxhash and liburing from .a, spdlog and fmt header-only).
find_library(XXHASH_STATIC NAMES libxxhash.a)
add_library(epk_xxhash INTERFACE)
target_include_directories(epk_xxhash INTERFACE ${XXHASH_INCLUDE_DIRS})
if(XXHASH_STATIC)
  target_link_libraries(epk_xxhash INTERFACE ${XXHASH_STATIC})
else()
  target_link_libraries(epk_xxhash INTERFACE PkgConfig::XXHASH)
endif()
add_library(epk_logging INTERFACE)
target_link_libraries(epk_logging INTERFACE spdlog::spdlog_header_only fmt::fmt-header-only)
