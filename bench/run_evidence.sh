#!/bin/bash
# The GPU evidence of issues 2-4 on one GPU: tests, fault tests and soak,
# bench sweeps with JSON and plots, and the watchdog's cost. Binaries come
# prebuilt in ./carry (cargo test --release --no-run; cargo xtask bundle carry).
set -u
export NCCL_NVLS_ENABLE=0
B=./carry/ringreduce-bench
R=$OUT/results; mkdir -p $R
D=$(date -u +%Y-%m-%d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/device.txt
DEV=$(head -1 $R/device.txt | cut -d, -f1 | tr ' ' '-')
snap() { (cd $OUT && tar cf results.tar results); }
summary() { grep -E "wrong|test result|panicked|FAILED|gpu (missing|abort|lost|soak|poisoned|bad input)" "$1" | head -${2:-30}; }

if [ "${TESTS:-1}" = 1 ]; then
  (cd carry && time timeout ${T_TESTS:-170} ./gpu_tests --nocapture --test-threads=4) > $R/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; summary $R/gpu_tests.log; snap
  (cd carry && time timeout ${T_FAULTS:-200} ./gpu_faults --nocapture --test-threads=1) > $R/gpu_faults.log 2>&1; echo "gpu_faults rc=$?"; summary $R/gpu_faults.log 40; snap
fi
run() { name=$1; shift; echo "=== $name: $*"; timeout ${T_RUN:-120} $B "$@" -J $R/${D}_${DEV}_$name.json --plot $R/${D}_${DEV}_$name.png > $R/${D}_${DEV}_$name.txt 2>&1; echo "rc=$?"; snap; grep -E "copy  |ping|Avg|Out of|^ +(268435456|1073741824|67108864|8|65536|1048576) " $R/${D}_${DEV}_$name.txt | head -${LINES_MAX:-16}; }
if [ "${BENCH:-1}" = 1 ]; then
  run rs_f32_sum_g4_8B-1G -b 8 -e 1G -f 4 -g 4 -d float -o sum
  run rs_f32_sum_g2_256M -b 256M -e 256M -g 2 -d float -o sum
  run rs_f32_sum_g8_256M -b 256M -e 256M -g 8 -d float -o sum
  LINES_MAX=60 run rs_all_all_g4_64M -b 64M -e 64M -g 4 -d all -o all
  echo "=== watchdog cost, k=4 f32 sum 256M, same job"
  for i in 1 2; do
    $B -b 256M -e 256M -g 4 --no-watchdog | grep -E "single-block|^ +268435456" | sed 's/^/without: /'
    $B -b 256M -e 256M -g 4 | grep -E "single-block|^ +268435456" | sed 's/^/with:    /'
  done
  $B -b 1M -e 1M -g 4 --vs-nccl > $R/vs_nccl_one_gpu.txt 2>&1; echo "vs-nccl rc=$?"; grep vs-nccl $R/vs_nccl_one_gpu.txt
fi
snap; rm -rf $R
