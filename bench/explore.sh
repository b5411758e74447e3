#!/bin/bash
# Protocol exploration on one GPU: the same k=4 f32 sum 256 MiB case under
# the RINGREDUCE_TUNING variants and two staging sizes, then a quick
# correctness pass. Binaries come prebuilt in ./carry.
set -u
export NCCL_NVLS_ENABLE=0
B=./carry/ringreduce-bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer
row() { grep -E "single-block|ping|^ +(268435456|1073741824) " | sed "s/^/$1 /"; }
for t in ${TUNINGS:-9 8 0 4 2}; do
  for bs in ${BUFFS:-2M 8M}; do
    RINGREDUCE_TUNING=$t $B -b 256M -e 256M -g ${K:-4} -d float -o sum --buffsize $bs -n 10 -w 3 2>&1 | row "t=$t bs=$bs k=${K:-4}"
  done
done | tee $OUT/explore.log
