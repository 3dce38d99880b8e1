# nvcc for every epk build, the repository's and the Python package's (client/python/CMakeLists.txt), included once a
# CUDA compiler was found: Hopper (sm_90) SASS plus PTX so newer GPUs can JIT, explicit, never autodetected; C++20
# passed by hand (CMake 3.25 has no CUDA20 dialect flags for nvcc: codec/cuda/CMakeLists.txt declares them empty).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
endif()
enable_language(CUDA)
string(APPEND CMAKE_CUDA_FLAGS " -std=c++20")
find_package(CUDAToolkit REQUIRED)
