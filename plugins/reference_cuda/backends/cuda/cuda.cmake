# The CUDA backend's ops as their own static library (mlpt_ref_cuda_ops), built only when the CUDA
# toolchain is found (MLPT_HAVE_CUDA); the CPU-only build never sees it. Included from
# plugins/reference_cuda/CMakeLists.txt. CUDA files compile with warnings as errors; the target
# architectures come from CMAKE_CUDA_ARCHITECTURES (90 = H100/H200 by default, MlptOptions.cmake).
if(NOT MLPT_HAVE_CUDA)
  return()
endif()

file(GLOB MLPT_REF_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cu ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
# Device buffers staged through the host for an MPI communicator (no NCCL needed).
list(APPEND MLPT_REF_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/parallel/host_staging.cpp)
add_library(mlpt_ref_cuda_ops STATIC ${MLPT_REF_CUDA_SOURCES})
# Headers are included as "backends/cuda/<op>.hpp".
target_include_directories(mlpt_ref_cuda_ops PUBLIC ${CMAKE_CURRENT_LIST_DIR}/../..)
target_link_libraries(mlpt_ref_cuda_ops PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt mlpt_reference_model
                      PRIVATE mlpt_warnings)
target_compile_options(mlpt_ref_cuda_ops PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror,-Wno-missing-field-initializers
                             --expt-relaxed-constexpr>
  $<$<COMPILE_LANGUAGE:CXX>:-O2>)
# cuDNN's fused attention (cuda_attention = "cudnn", cudnn_attention.hpp) where its headers are found:
# the library itself is opened at run time (cudnn_graph.hpp says why), so nothing links against it;
# a build without the headers refuses that option with a clear error.
find_path(MLPT_CUDNN_INCLUDE_DIR cudnn_backend.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
if(MLPT_CUDNN_INCLUDE_DIR)
  target_include_directories(mlpt_ref_cuda_ops PRIVATE ${MLPT_CUDNN_INCLUDE_DIR})
  target_compile_definitions(mlpt_ref_cuda_ops PRIVATE MLPT_HAVE_CUDNN=1)
  target_link_libraries(mlpt_ref_cuda_ops PRIVATE ${CMAKE_DL_LIBS})
endif()
message(STATUS "mlpt: cuDNN fused attention ${MLPT_CUDNN_INCLUDE_DIR}")
set_target_properties(mlpt_ref_cuda_ops PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_STANDARD 17
                      CUDA_STANDARD_REQUIRED ON CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
                      VISIBILITY_INLINES_HIDDEN ON)

# The model-parallel communicator between GPUs (parallel/nccl_communicator), where NCCL is found.
if(MLPT_HAVE_NCCL)
  add_library(mlpt_ref_cuda_nccl STATIC ${CMAKE_CURRENT_LIST_DIR}/parallel/nccl_communicator.cpp)
  target_include_directories(mlpt_ref_cuda_nccl PUBLIC ${MLPT_NCCL_INCLUDE_DIR})
  target_link_libraries(mlpt_ref_cuda_nccl PUBLIC mlpt_ref_cuda_ops ${MLPT_NCCL_LIBRARY} PRIVATE mlpt_warnings)
  set_target_properties(mlpt_ref_cuda_nccl PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden)
endif()
