// The main() of a check program that mpirun starts once per rank: MPI initialised around `check`,
// and an exception on any rank ends the whole job (the other ranks may be waiting in a collective)
// after printing "<program>: <what>".
#pragma once

#include <mpi.h>

#include <exception>
#include <iostream>

namespace mlpt_test {

template <class Check>
int mpi_check_main(int argc, char** argv, const char* program, Check check) {
  MPI_Init(&argc, &argv);
  int status = 1;
  try {
    status = check(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}

}  // namespace mlpt_test
