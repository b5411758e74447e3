#!/bin/bash
# Same-job comparison of main (./carry/ringreduce-bench) and the build whose
# unrolled loop issues the next round's loads before this round's stores
# (./carry/var/bench_pipe): f32 sum, 256 MiB, staging and prefetch varied.
# Output: $OUT/pipe.txt.
set -u
export NCCL_NVLS_ENABLE=0
row() { grep -E "^ +268435456 " | sed "s/^/$1 /"; }
b() { local n=$1 bin=$2 k=$3 bs=$4 pf=$5
  [ $SECONDS -lt 400 ] || return
  timeout 60 $bin -b 256M -e 256M -g $k -d float -o sum --buffsize $bs -n 10 -w 3 --prefetch $pf 2>&1 \
    | tee -a $OUT/full.txt | row "$n k=$k bs=$bs pf=$pf"; }
M=carry/ringreduce-bench P=carry/var/bench_pipe
{ b main $M 4 2M 0; b pipe $P 4 2M 0; b main $M 4 2M 0; b pipe $P 4 2M 0
  b main $M 4 2M 1; b pipe $P 4 2M 1; b main $M 4 2M 2; b pipe $P 4 2M 2
  b main $M 4 16M 0; b pipe $P 4 16M 0; b pipe $P 8 2M 0; b pipe $P 2 2M 0
  b main $M 4 16M 1; b pipe $P 4 16M 1; } | tee $OUT/pipe.txt
grep -E "single-block copy" $OUT/full.txt | awk '{print $(NF-11)}' | sort | uniq -c | head
