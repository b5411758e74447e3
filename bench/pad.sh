#!/bin/bash
# After the conditional staging padding: the k=4 f32 sum 256 MiB figure at
# the default 2 MiB staging (three repeats) and at larger staging, k=2 and
# k=8, then the fault tests and the GPU suite. Binaries come prebuilt in
# ./carry (cargo xtask bundle carry; gpu_tests/gpu_faults from
# cargo test --release --no-run). Output: $OUT/pad.txt, $OUT/results.tgz.
set -u
export NCCL_NVLS_ENABLE=0
B=./carry/ringreduce-bench
R=$OUT/r; mkdir -p $R
snap() { (cd $OUT && tar czf results.tgz r); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/device.txt
row() { grep -E "single-block|^ +268435456 " | sed "s/^/$1 /"; }
b() { local k=$1 bs=$2 tag=$3
  [ $SECONDS -lt 200 ] || return
  timeout 60 $B -b 256M -e 256M -g $k -d float -o sum --buffsize $bs -n 10 -w 3 --prefetch 0 2>&1 \
    | tee -a $R/bench_full.txt | row "k=$k bs=$bs $tag"; }
{ b 4 2M r1; b 4 2M r2; b 4 16M r1; b 4 2M r3; b 4 4M r1; b 4 16M r2; b 4 32M r1
  b 8 2M r1; b 2 2M r1; } | tee $OUT/pad.txt; snap
(cd carry && timeout 60 ./gpu_faults --nocapture --test-threads=1 --skip gpu_soak --skip gpu_sanitize) > $R/gpu_faults.log 2>&1
echo "gpu_faults rc=$?"; grep -E "^gpu |test result|panicked" $R/gpu_faults.log | head -20; snap
(cd carry && time timeout $((590 - SECONDS)) ./gpu_tests --nocapture --test-threads=4) > $R/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "wrong|test result|panicked" $R/gpu_tests.log | head -20; snap
