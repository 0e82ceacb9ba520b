#!/bin/sh
# run_isa_path.sh PATH COMMAND...: runs COMMAND when this CPU can run the CPU kernels' PATH
# (avx512, avx2, baseline: backends/cpu/isa_path.hpp), else exits 77, which ctest reports as skipped.
path=$1
shift
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { for f in "$@"; do case " $flags " in *" $f "*) ;; *) return 1 ;; esac; done; }
case $path in
  avx512) has avx512f avx512bw avx512vl avx512dq avx2 fma bmi2 || { echo "this CPU has no AVX-512: $path not run"; exit 77; } ;;
  avx2) has avx2 fma bmi2 || { echo "this CPU has no AVX2+FMA: $path not run"; exit 77; } ;;
  baseline) ;;
  *) echo "unknown path $path" >&2; exit 2 ;;
esac
exec "$@"
