# Warnings and sanitizers for every epk target (applied through the epk_options interface target).
add_library(epk_options INTERFACE)
target_compile_options(epk_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers>)
target_include_directories(epk_options INTERFACE ${PROJECT_SOURCE_DIR})

if(EPK_FUZZ)
  # libFuzzer builds (tests/fuzz): every library instrumented for coverage and checked by ASan + UBSan; the fuzz
  # targets themselves link -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt).
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "EPK_FUZZ needs clang (libFuzzer): configure with the 'fuzz' preset")
  endif()
  set(_epk_san -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(EPK_SANITIZE STREQUAL "address")
  set(_epk_san -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(EPK_SANITIZE STREQUAL "thread")
  set(_epk_san -fsanitize=thread -fno-omit-frame-pointer)
endif()
if(_epk_san)
  target_compile_options(epk_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_epk_san}>)
  target_link_options(epk_options INTERFACE ${_epk_san})
endif()
