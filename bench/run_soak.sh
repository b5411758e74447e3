#!/bin/bash
# Issue 4's soak (10,000 collectives at k=4 and k=8) plus the GPU test
# suite, on one GPU in one bounded call; logs packed into $OUT/results.tgz.
# Binaries come prebuilt in ./carry (see bench/run_evidence.sh).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/device.txt
snap() { (cd $OUT && tar czf results.tgz r); }
# SASS of the hot kernel, to see how the loads of a round are scheduled.
if [ -f carry/kernels.ptx ]; then
  (cd carry && timeout 200 /usr/local/cuda/bin/ptxas -arch=sm_90 -O3 kernels.ptx -o $R/k.cubin \
    && /usr/local/cuda/bin/cuobjdump -sass -fun ringreduce_rs_float_sum $R/k.cubin > $R/float_sum.sass \
    && /usr/local/cuda/bin/cuobjdump -sass -fun ringreduce_reduce_block $R/k.cubin > $R/reduce_block.sass; \
    rm -f $R/k.cubin) > $R/sass.log 2>&1 &
fi
(cd carry && time timeout ${T_SOAK:-420} ./gpu_faults gpu_soak --nocapture) > $R/soak.log 2>&1
echo "soak rc=$?"; grep -E "soak|test result|panicked|real" $R/soak.log; snap
left() { [ $SECONDS -lt ${1:-500} ]; }
left 420 && (cd carry && time timeout $((560 - SECONDS)) ./gpu_tests --nocapture --test-threads=4) > $R/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "wrong|test result|panicked" $R/gpu_tests.log | head -20
wait; snap
