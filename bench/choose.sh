#!/bin/bash
# Same-job comparison of main (./carry) and a variant build (./carry/var/$V,
# default poll) at k=4 f32 sum 256 MiB (2 MiB staging twice, 16 MiB) and k=8;
# then the fault tests and the GPU suite of whichever had the higher mean
# busbw at k=4, 2 MiB. Output: $OUT/choose.txt and $OUT/r/*.log.
set -u
export NCCL_NVLS_ENABLE=0
V=${V:-poll}; R=$OUT/r; mkdir -p $R
row() { grep -E "^ +268435456 " | sed "s/^/$1 /"; }
b() { local n=$1 dir=$2 k=$3 bs=$4
  timeout 60 $dir/ringreduce-bench -b 256M -e 256M -g $k -d float -o sum --buffsize $bs -n 10 -w 3 --prefetch 0 2>&1 \
    | tee -a $R/bench_full.txt | row "$n k=$k bs=$bs"; }
M=carry P=carry/var/$V
{ b main $M 4 2M; b $V $P 4 2M; b main $M 4 2M; b $V $P 4 2M
  b main $M 4 16M; b $V $P 4 16M; b main $M 8 2M; b $V $P 8 2M; } | tee $OUT/choose.txt
mean() { grep -E "^$1 k=4 bs=2M " $OUT/choose.txt | awk '{s+=$11; n++} END {print (n ? s/n : 0)}'; }
m=$(mean main); v=$(mean $V); echo "mean busbw k=4 2M: main $m, $V $v" | tee -a $OUT/choose.txt
W=$M; awk "BEGIN {exit !($v > $m)}" && W=$P; echo "testing $W" | tee -a $OUT/choose.txt
(cd $W && timeout 60 ./gpu_faults --nocapture --test-threads=1 --skip gpu_soak --skip gpu_sanitize) > $R/gpu_faults.log 2>&1
echo "gpu_faults rc=$?"; grep -E "^gpu |test result|panicked" $R/gpu_faults.log | head -20
(cd $W && timeout $((470 - SECONDS)) ./gpu_tests --nocapture --test-threads=4) > $R/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "wrong|test result|panicked" $R/gpu_tests.log | head -20
