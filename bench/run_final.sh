#!/bin/bash
# One bounded call after a kernel-build change: the k=4 f32 sum 256 MiB case
# over staging sizes and prefetch distances (same job), then the fault tests,
# the GPU test suite, the ring sizes k=2 and k=8, and the soak with the time
# left. Binaries come prebuilt in ./carry; logs go to $OUT/results.tgz.
set -u
export NCCL_NVLS_ENABLE=0
B=./carry/ringreduce-bench
R=$OUT/r; mkdir -p $R
snap() { (cd $OUT && tar czf results.tgz r); }
left() { [ $SECONDS -lt $1 ]; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/device.txt
row() { grep -E "single-block|^ +268435456 " | sed "s/^/$1 /"; }
for bs in ${BUFFS:-2M 4M 8M 16M}; do
  for pf in ${PREFETCH:-0 1}; do
    left 200 && timeout 60 $B -b 256M -e 256M -g 4 -d float -o sum --buffsize $bs --prefetch $pf -n 10 -w 3 2>&1 | row "k=4 bs=$bs pf=$pf"
  done
done | tee $R/grid.txt; snap
(cd carry && timeout 60 ./gpu_faults --nocapture --test-threads=1 --skip gpu_soak --skip gpu_sanitize) > $R/gpu_faults.log 2>&1
echo "gpu_faults rc=$?"; grep -E "^gpu |test result|panicked" $R/gpu_faults.log | head -20; snap
left 330 && (cd carry && time timeout 250 ./gpu_tests --nocapture --test-threads=4) > $R/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "wrong|test result|panicked" $R/gpu_tests.log | head -20; snap
for k in 2 8; do
  left 480 && timeout 40 $B -b 256M -e 256M -g $k -d float -o sum -n 10 -w 3 2>&1 | row "k=$k default"
done | tee -a $R/grid.txt; snap
left 500 && (cd carry && time RINGREDUCE_SOAK_KS=4 timeout $((590 - SECONDS)) ./gpu_faults gpu_soak --nocapture) > $R/soak.log 2>&1
grep -E "soak|test result|panicked" $R/soak.log; snap
