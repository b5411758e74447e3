#!/bin/bash
# Same-job comparison at k=4, f32 sum, 256 MiB: main
# (./carry/ringreduce-bench), a build whose flag fences and acquires use
# .gpu instead of .sys scope (./carry/var/bench_gpuscope), and a build whose
# control lane skips the flag waits (./carry/var/bench_nowait, results
# unchecked: the bound without flag latency). Output: $OUT/scope.txt.
set -u
export NCCL_NVLS_ENABLE=0
row() { grep -E "^ +268435456 " | sed "s/^/$1 /"; }
b() { local n=$1 bin=$2 k=$3 bs=$4; shift 4
  [ $SECONDS -lt 400 ] || return
  timeout 60 $bin -b 256M -e 256M -g $k -d float -o sum --buffsize $bs -n 10 -w 3 --prefetch 0 "$@" 2>&1 \
    | tee -a $OUT/full.txt | row "$n k=$k bs=$bs"; }
M=carry/ringreduce-bench G=carry/var/bench_gpuscope N=carry/var/bench_nowait
{ b main $M 4 2M; b gpuscope $G 4 2M; b nowait $N 4 2M -c 0
  b main $M 4 2M; b gpuscope $G 4 2M; b nowait $N 4 2M -c 0
  b main $M 4 16M; b gpuscope $G 4 16M; b nowait $N 4 16M -c 0
  b main $M 8 2M; b gpuscope $G 8 2M; b nowait $N 8 2M -c 0; } | tee $OUT/scope.txt
