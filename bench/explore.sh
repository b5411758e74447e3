#!/bin/bash
# Tuning exploration on one GPU: the k=4 f32 sum 256 MiB case over prefetch
# distances and staging sizes, each in the same job, with the ceilings of
# every run. Binaries come prebuilt in ./carry (cargo xtask bundle carry).
set -u
export NCCL_NVLS_ENABLE=0
B=./carry/ringreduce-bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
row() { grep -E "single-block|ping|^ +(268435456|1073741824) " | sed "s/^/$1 /"; }
for pf in ${PREFETCH:-0 1 2}; do
  for bs in ${BUFFS:-2M 8M}; do
    $B -b 256M -e 256M -g ${K:-4} -d float -o sum --buffsize $bs --prefetch $pf -n 10 -w 3 2>&1 | row "pf=$pf bs=$bs k=${K:-4}"
  done
done | tee $OUT/explore.log
