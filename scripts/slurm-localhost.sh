#!/usr/bin/env bash
# Tries to start Debian's slurm-wlm on this machine alone (munged, slurmctld and slurmd on localhost,
# every file in a fresh temporary folder, nothing under /etc; as root or as any user) and to run
# `srun -n 2 hostname`, then stops what it started. It says whether Slurm works here and, if not,
# why (the daemons' logs).
#   scripts/slurm-localhost.sh [--keep] [-- COMMAND...]    --keep leaves the folder with config and logs
# Then, where mpicc exists, two MPI ranks under `srun --mpi=pmix` (reported apart, not in the exit code).
# With `-- COMMAND...`, COMMAND runs once the node is up, with SLURM_CONF set (e.g. `srun --mpi=pmix
# -O -n 4 build/bin/mlpt run configs/tiny-distributed.toml`), and its exit status is the script's.
# Exit: 0 srun worked; 1 it did not (reason printed); 77 slurm-wlm or munge is not installed.
set -uo pipefail

keep=0
[ "${1:-}" = "--keep" ] && keep=1 && shift
command=()
[ "${1:-}" = "--" ] && shift && command=("$@")

missing=()
for tool in munged slurmctld slurmd srun sinfo; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "slurm-localhost: NOT TRIED: ${missing[*]} not found on PATH (Debian: apt-get install slurm-wlm munge; the daemons are in /usr/sbin)"
  exit 77
fi

work=$(mktemp -d /tmp/mlpt-slurm.XXXXXX)
chmod 755 "$work"
pids=()
stop_daemons() {  # newest first: slurmd and slurmctld still need munged to say goodbye
  local reversed=()
  for pid in "${pids[@]}"; do reversed=("$pid" "${reversed[@]}"); done
  pids=("${reversed[@]}")
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; sleep 0.2; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  pids=()
  if [ $keep = 1 ]; then echo "slurm-localhost: kept $work"; else rm -rf "$work"; fi
}
trap stop_daemons EXIT
trap 'exit 130' INT TERM

verdict() {  # verdict RC MESSAGE: prints the outcome and the logs that explain a failure
  echo "slurm-localhost: $2"
  if [ "$1" != 0 ]; then
    for log in munged.log slurmctld.log slurmd.log srun.log; do
      [ -s "$work/$log" ] && { echo "--- last lines of $log"; tail -n 15 "$work/$log"; }
    done
  fi
  exit "$1"
}

# Two free TCP ports on loopback for slurmctld and slurmd (the defaults 6817/6818 may be taken).
free_port() {
  local port
  for _ in $(seq 100); do
    port=$(( 20000 + RANDOM % 40000 ))
    ss -ltnH "sport = :$port" 2>/dev/null | grep -q . || { echo "$port"; return; }
  done
  return 1
}
ctld_port=$(free_port) && slurmd_port=$(free_port) || verdict 1 "DOES NOT WORK: no free TCP port found"

user=$(id -un)
node=$(hostname -s)
cpus=$(nproc)
memory_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
mkdir -p "$work/state" "$work/spool" "$work/munge"

# munge: a fresh key and its own socket, so no system munged is needed or disturbed.
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
chmod 700 "$work/munge"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
  --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/munged.seed" --log-file="$work/munged.log" \
  >>"$work/munged.log" 2>&1 || verdict 1 "DOES NOT WORK: munged did not start"
for _ in $(seq 50); do [ -s "$work/munge/munged.pid" ] && break; sleep 0.1; done
[ -s "$work/munge/munged.pid" ] && pids+=("$(cat "$work/munge/munged.pid")")
[ -S "$work/munge/munge.socket" ] || verdict 1 "DOES NOT WORK: munged started but made no socket"

cat >"$work/slurm.conf" <<EOF
# Written by scripts/slurm-localhost.sh: one node, everything in $work.
ClusterName=mlptlocal
SlurmctldHost=$node(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
# No cgroups: a container usually cannot delegate them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$work/slurm.conf

slurmctld -D -i -f "$SLURM_CONF" >>"$work/slurmctld.log" 2>&1 &
ctld_pid=$!
pids+=("$ctld_pid")
slurmd -D -f "$SLURM_CONF" >>"$work/slurmd.log" 2>&1 &
slurmd_pid=$!
pids+=("$slurmd_pid")

# The node must come up idle before a job can run on it.
state=""
for _ in $(seq 60); do
  kill -0 "$ctld_pid" 2>/dev/null || verdict 1 "DOES NOT WORK: slurmctld exited at start (its log says why)"
  kill -0 "$slurmd_pid" 2>/dev/null || verdict 1 "DOES NOT WORK: slurmd exited at start (its log says why)"
  state=$(sinfo -h -N -o %T 2>/dev/null | head -n 1)
  case "$state" in idle*|mix*|alloc*) break ;; esac
  sleep 0.5
done
case "$state" in idle*|mix*|alloc*) ;; *) verdict 1 "DOES NOT WORK: node $node never became idle (state '${state:-no answer from slurmctld}')" ;; esac

# MPI under srun: two ranks of a tiny MPI program find each other through Slurm's PMIx plugin, as
# `srun mlpt run` ranks do. Reported beside the verdict; it does not change the exit code.
pmix_check() {
  local plugins
  plugins=$(srun --mpi=list 2>&1 | grep -o 'pmix[^ ]*' | sort -u | tr '\n' ' ')
  if [ -z "$plugins" ]; then echo "slurm-localhost: MPI: srun offers no pmix plugin"; return; fi
  if ! command -v mpicc >/dev/null; then echo "slurm-localhost: MPI: srun offers $plugins; no mpicc to try it"; return; fi
  cat >"$work/mpi_ranks.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char** argv) {
  int rank, size, sum = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d of %d, sum of ranks %d\n", rank, size, sum);
  MPI_Finalize();
  return 0;
}
C
  if ! mpicc -o "$work/mpi_ranks" "$work/mpi_ranks.c" >"$work/mpicc.log" 2>&1; then
    echo "slurm-localhost: MPI: mpicc failed ($(tail -n 1 "$work/mpicc.log"))"; return
  fi
  if OMPI_MCA_btl=self,vader timeout 60 srun --mpi=pmix -n 2 "$work/mpi_ranks" >"$work/srun-mpi.log" 2>&1 &&
     [ "$(grep -c 'sum of ranks 1$' "$work/srun-mpi.log")" = 2 ]; then
    echo "slurm-localhost: MPI: WORKS: srun --mpi=pmix -n 2 ran two MPI ranks that summed their ranks (pmix plugins: $plugins)"
  else
    echo "slurm-localhost: MPI: DOES NOT WORK: srun --mpi=pmix -n 2 of an MPI program (pmix plugins: $plugins):"
    tail -n 15 "$work/srun-mpi.log"
  fi
}

if timeout 60 srun -n 2 -N 1 hostname >"$work/srun.log" 2>&1; then
  lines=$(grep -c . "$work/srun.log")
  [ "$lines" = 2 ] || verdict 1 "DOES NOT WORK: srun -n 2 hostname printed $lines lines, not 2"
  echo "slurm-localhost: WORKS: srun -n 2 hostname ran two tasks on $node"
  pmix_check
  if [ ${#command[@]} -gt 0 ]; then
    echo "slurm-localhost: running ${command[*]}"
    "${command[@]}"
    rc=$?
    echo "slurm-localhost: ${command[0]} exited with $rc"
    exit "$rc"
  fi
  exit 0
fi
verdict 1 "DOES NOT WORK: srun -n 2 hostname failed (exit $?)"
