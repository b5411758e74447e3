#!/bin/bash
# The README's figures with main's bench (./carry/ringreduce-bench, from
# cargo xtask bundle carry): f32 sum, 256 MiB, prefetch 0, k = 4 at 2 MiB
# (three times) and 16 MiB, k = 2 and k = 8 at 2 MiB. Output: $OUT/final.txt.
set -u
export NCCL_NVLS_ENABLE=0
row() { grep -E "single-block copy|^ +268435456 " | sed "s/^/$1 /"; }
b() { local k=$1 bs=$2 tag=$3
  timeout 60 carry/ringreduce-bench -b 256M -e 256M -g $k -d float -o sum --buffsize $bs -n 10 -w 3 --prefetch 0 2>&1 \
    | tee -a $OUT/full.txt | row "k=$k bs=$bs $tag"; }
{ b 4 2M r1; b 4 16M r1; b 2 2M r1; b 4 2M r2; b 8 2M r1; b 4 2M r3; } | tee $OUT/final.txt
