# Tests and benchmarks that start real processes with Open MPI's mpirun on this machine.
# MLPT_MPIRUN: the mpirun found (empty without openmpi-bin; such targets then report SKIP or are not built).
find_program(MLPT_MPIRUN NAMES mpirun)

# mlpt_use_mpirun(<target>): the target builds its mpirun lines with tests/support/mpirun_command.hpp.
function(mlpt_use_mpirun target)
  target_compile_definitions(${target} PRIVATE MPIRUN_EXE="${MLPT_MPIRUN}")
  target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/tests/support)
endfunction()
