#!/bin/bash
# Same-job comparison for the control-lane experiment: main's bench
# (./carry/ringreduce-bench) against ./carry/var/bench_lane (prefetch 0, 1)
# and ./carry/var/bench_nowait (flag waits compiled out, unchecked: the
# bound with no waiting at all), f32 sum, 256 MiB; then the lane build's GPU
# tests. Output: $OUT/lane.txt, $OUT/results.tgz.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
row() { grep -E "single-block|^ +268435456 " | sed "s/^/$1 /"; }
b() { # name bin k buffsize flags...
  local n=$1 bin=$2 k=$3 bs=$4; shift 4
  [ $SECONDS -lt ${STOP_S:-330} ] || return
  timeout 60 $bin -b 256M -e 256M -g $k -d float -o sum --buffsize $bs -n 10 -w 3 "$@" 2>&1 | row "$n k=$k bs=$bs $*"
}
B=carry/ringreduce-bench L=carry/var/bench_lane W=carry/var/bench_nowait
{
for bs in 2M 2097280 16M; do
  b base $B 4 $bs --prefetch 0
  b lane $L 4 $bs --prefetch 0
  b lane $L 4 $bs --prefetch 1
  b nowait $W 4 $bs --prefetch 0 -c 0
done
b base $B 4 2M --prefetch 0
for k in 2 8; do
  b base $B $k 2M --prefetch 0
  b lane $L $k 2M --prefetch 0
  b lane $L $k 2M --prefetch 1
done
} | tee $OUT/lane.txt
(cd carry && timeout 60 ./gpu_faults --skip gpu_soak --skip gpu_sanitize --nocapture) > $R/gpu_faults_lane.log 2>&1
tail -3 $R/gpu_faults_lane.log
(cd carry && timeout $((590 - SECONDS)) ./gpu_tests --nocapture) > $R/gpu_tests_lane.log 2>&1
grep -E "test result|panicked|wrong|FAILED" $R/gpu_tests_lane.log | head
(cd $OUT && tar czf results.tgz r)
