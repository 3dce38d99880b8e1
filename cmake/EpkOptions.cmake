# Warnings and sanitizers for every epk target (applied through the epk_options interface target).
add_library(epk_options INTERFACE)
target_compile_options(epk_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers>)
target_include_directories(epk_options INTERFACE ${PROJECT_SOURCE_DIR})

if(EPK_SANITIZE STREQUAL "address")
  set(_epk_san -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(EPK_SANITIZE STREQUAL "thread")
  set(_epk_san -fsanitize=thread -fno-omit-frame-pointer)
endif()
if(_epk_san)
  target_compile_options(epk_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_epk_san}>)
  target_link_options(epk_options INTERFACE ${_epk_san})
endif()
