# The CPU sequence-mixing ops (Gated DeltaNet recurrence, causal GQA attention) as their own static
# library, so tests, benchmarks and (later) the CUDA backend's oracle checks link just these.
# Included from plugins/reference_cuda/CMakeLists.txt. OpenMP is optional: tasks are independent
# (sequence x head), so results are bitwise the same with any thread count or without OpenMP.
option(MLPT_SEQOPS_OPENMP "Parallelise the CPU sequence ops with OpenMP when available" ON)
# Off by default (binaries must run on any x86-64); on for local speed runs only.
option(MLPT_SEQOPS_NATIVE "Compile the CPU sequence ops with -march=native" OFF)

add_library(mlpt_ref_cpu_seqops STATIC
  ${CMAKE_CURRENT_LIST_DIR}/gdn.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/isa_path.cpp)
# Headers are included as "backends/cpu/<op>.hpp".
target_include_directories(mlpt_ref_cpu_seqops PUBLIC ${CMAKE_CURRENT_LIST_DIR}/../..)
target_link_libraries(mlpt_ref_cpu_seqops PRIVATE mlpt_warnings)
# The chunked GDN's in-chunk and state products run as OpenBLAS matrix products.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
target_link_libraries(mlpt_ref_cpu_seqops PUBLIC PkgConfig::OPENBLAS)
target_compile_options(mlpt_ref_cpu_seqops PRIVATE -O3)
set_target_properties(mlpt_ref_cpu_seqops PROPERTIES POSITION_INDEPENDENT_CODE ON
                      CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
if(MLPT_SEQOPS_NATIVE)
  target_compile_options(mlpt_ref_cpu_seqops PRIVATE -march=native)
endif()
if(MLPT_SEQOPS_OPENMP)
  find_package(OpenMP COMPONENTS CXX)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(mlpt_ref_cpu_seqops PUBLIC OpenMP::OpenMP_CXX)
  endif()
endif()
