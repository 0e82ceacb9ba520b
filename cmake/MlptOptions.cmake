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
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(MLPT_HAVE_CUDA ON)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "52")
      set(CMAKE_CUDA_ARCHITECTURES 90)  # H100/H200; override with -DCMAKE_CUDA_ARCHITECTURES
    endif()
  elseif(MLPT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MLPT_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "mlpt: CUDA backend ${MLPT_HAVE_CUDA}")
