# Project-wide compile options: warnings, sanitizers, and whether the CUDA backend builds.
add_library(mlpt_warnings INTERFACE)
target_compile_options(mlpt_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wno-missing-field-initializers>)

if(MLPT_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# CUDA: AUTO builds it when nvcc is there (default location /usr/local/cuda).
set(MLPT_HAVE_CUDA OFF)
if(NOT MLPT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # H100/H200 unless -DCMAKE_CUDA_ARCHITECTURES or CUDAARCHS says otherwise; set before
    # enable_language, which would otherwise take nvcc's default (sm_52, or sm_75 from CUDA 13).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures to build for")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(MLPT_HAVE_CUDA ON)
  elseif(MLPT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MLPT_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "mlpt: CUDA backend ${MLPT_HAVE_CUDA}")

# NCCL (with the CUDA toolkit or beside it): the nccl weight transport and the reference model's
# GPU communicator build only where it is found.
set(MLPT_HAVE_NCCL OFF)
if(MLPT_HAVE_CUDA)
  find_path(MLPT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(MLPT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(MLPT_NCCL_INCLUDE_DIR AND MLPT_NCCL_LIBRARY)
    set(MLPT_HAVE_NCCL ON)
  endif()
endif()
message(STATUS "mlpt: NCCL ${MLPT_HAVE_NCCL}")

# GPU tests (ctest label `gpu`) are registered only when a GPU is visible at configure time
# (nvidia-smi lists one) or MLPT_GPU_TESTS=1 asks for them; otherwise their folders register one
# test that reports SKIP, so a machine without a GPU never counts them as passed.
set(MLPT_GPU_VISIBLE OFF)
if(MLPT_HAVE_CUDA)
  if("$ENV{MLPT_GPU_TESTS}" STREQUAL "1")
    set(MLPT_GPU_VISIBLE ON)
  else()
    find_program(MLPT_NVIDIA_SMI nvidia-smi)
    if(MLPT_NVIDIA_SMI)
      execute_process(COMMAND ${MLPT_NVIDIA_SMI} -L RESULT_VARIABLE smi_rc OUTPUT_VARIABLE smi_out ERROR_QUIET)
      if(smi_rc EQUAL 0 AND smi_out MATCHES "GPU [0-9]+:")
        set(MLPT_GPU_VISIBLE ON)
      endif()
    endif()
  endif()
endif()
message(STATUS "mlpt: GPU tests ${MLPT_GPU_VISIBLE}")
