#!/bin/bash
# Same-job comparison: main's bench (./carry/ringreduce-bench), the
# control-lane build (./carry/var/bench_lane) and the decoupled-warps build
# (./carry/var/bench_warps), f32 sum, 256 MiB, prefetch 0; then the warps
# build's GPU fault tests and GPU tests. Output: $OUT/warps.txt,
# $OUT/results.tgz.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
row() { grep -E "^ +268435456 " | sed "s/^/$1 /"; }
b() { local n=$1 bin=$2 k=$3 bs=$4; shift 4
  [ $SECONDS -lt ${STOP_S:-200} ] || return
  timeout 60 $bin -b 256M -e 256M -g $k -d float -o sum --buffsize $bs -n 10 -w 3 --prefetch 0 "$@" 2>&1 | tee -a $R/bench_full.txt | row "$n k=$k bs=$bs"; }
B=carry/ringreduce-bench L=carry/var/bench_lane W=carry/var/bench_warps
{ b base $B 4 2M; b lane $L 4 2M; b warps $W 4 2M; b warps $W 4 2097280; b warps $W 4 16M
  b base $B 8 2M; b warps $W 8 2M; b warps $W 2 2M; b base $B 4 16M; } | tee $OUT/warps.txt
(cd carry && timeout 60 ./gpu_faults --skip gpu_soak --skip gpu_sanitize --nocapture) > $R/gpu_faults_warps.log 2>&1
grep -E "test result|gpu abort|gpu missing|gpu lost" $R/gpu_faults_warps.log
(cd carry && timeout $((590 - SECONDS)) ./gpu_tests --nocapture) > $R/gpu_tests_warps.log 2>&1
grep -E "test result|panicked|wrong|FAILED" $R/gpu_tests_warps.log | head -12
(cd $OUT && tar czf results.tgz r)
