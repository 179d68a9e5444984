# QUARTET_CUDA (AUTO, ON, OFF) decides whether the CUDA backend (engine/cuda/: kernels,
# cuBLAS, cuDNN, the caching allocator) is built. AUTO builds it where nvcc, cuBLAS and
# cuDNN are found and this machine shows a GPU (an NVIDIA driver's device); ON requires
# the toolkit and builds it with or without a GPU (CI does, so every .cu file compiles);
# OFF skips it. A build with the backend runs on a machine without a GPU: a cuda device is
# then refused at run time with the reason.
#
# There is no GPU to detect while building here, so the architectures are explicit:
# CMAKE_CUDA_ARCHITECTURES defaults to 80;90 (A100, H100/H200).
set(QUARTET_WITH_CUDA OFF)
if(NOT QUARTET_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  set(_quartet_cuda_missing "")
  if(NOT CMAKE_CUDA_COMPILER)
    set(_quartet_cuda_missing "nvcc")
  elseif(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublas)
    set(_quartet_cuda_missing "the CUDA toolkit's cuBLAS")
  else()
    find_library(QUARTET_CUDNN_LIBRARY cudnn
      HINTS ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_ROOT}/lib64 ${CUDAToolkit_LIBRARY_DIR})
    find_path(QUARTET_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
    if(NOT QUARTET_CUDNN_LIBRARY OR NOT QUARTET_CUDNN_INCLUDE_DIR)
      set(_quartet_cuda_missing "cuDNN (libcudnn and cudnn.h next to CUDA ${CUDAToolkit_VERSION})")
    endif()
  endif()
  # A GPU this machine can see: the driver's devices (what nvidia-smi lists).
  file(GLOB _quartet_gpus /dev/nvidia[0-9]* /proc/driver/nvidia/gpus/*)
  if(_quartet_cuda_missing STREQUAL "" AND QUARTET_CUDA STREQUAL "AUTO" AND NOT _quartet_gpus)
    message(STATUS "quartet: the CUDA backend is left out: nvcc is here but no GPU is visible; "
                   "-DQUARTET_CUDA=ON builds it anyway (QUARTET_CMAKE_ARGS=-DQUARTET_CUDA=ON scripts/setup)")
  elseif(_quartet_cuda_missing STREQUAL "")
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures to build for" FORCE)
    endif()
    # CMake 3.25 does not know nvcc 13's C++20 flag.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(QUARTET_WITH_CUDA ON)
  elseif(QUARTET_CUDA STREQUAL "ON")
    message(FATAL_ERROR "QUARTET_CUDA=ON: ${_quartet_cuda_missing} not found")
  else()
    message(STATUS "quartet: CUDA backend OFF (${_quartet_cuda_missing} not found)")
  endif()
endif()
message(STATUS "quartet: CUDA backend ${QUARTET_WITH_CUDA}")
