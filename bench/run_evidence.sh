#!/bin/bash
# The GPU evidence of issues 2-4 on one GPU, in one call of at most ten
# minutes, most important first; every step is bounded and its logs are
# packed into $OUT/results.tgz as soon as it ends. Binaries come prebuilt in
# ./carry (cargo test --release --all-features --no-run; cargo xtask bundle).
set -u
export NCCL_NVLS_ENABLE=0
B=./carry/ringreduce-bench
R=$OUT/r; mkdir -p $R
D=$(date -u +%Y-%m-%d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/device.txt
DEV=$(head -1 $R/device.txt | cut -d, -f1 | tr ' ' '-')
snap() { (cd $OUT && tar czf results.tgz r); }
left() { [ $SECONDS -lt ${1:-540} ]; }
S=/usr/local/cuda/bin/compute-sanitizer

# Sanitizers run beside the correctness tests (neither is timed).
for t in memcheck racecheck synccheck; do
  (cd carry && timeout ${T_SAN:-240} $S --tool $t --print-limit 20 ./gpu_faults gpu_sanitize_small --nocapture) > $R/sanitize_$t.log 2>&1 &
done
(cd carry && time timeout ${T_TESTS:-240} ./gpu_tests --nocapture --test-threads=4) > $R/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "wrong|test result|panicked" $R/gpu_tests.log; snap
(cd carry && timeout 90 ./gpu_faults --nocapture --test-threads=1 --skip gpu_soak --skip gpu_sanitize) > $R/gpu_faults.log 2>&1
echo "gpu_faults rc=$?"; grep -E "^gpu |test result|panicked|touched" -A1 $R/gpu_faults.log | head -30; snap
wait
for t in memcheck racecheck synccheck; do echo "$t: $(grep -E 'ERROR SUMMARY|test result' $R/sanitize_$t.log | tr '\n' ' ')"; done; snap

run() { name=$1; shift; left || return; echo "=== $name: $*"; timeout ${T_RUN:-200} $B "$@" -J $R/${D}_${DEV}_$name.json --plot $R/${D}_${DEV}_$name.png > $R/${D}_${DEV}_$name.txt 2>&1; echo "rc=$?"; snap; grep -E "copy  |reduce  |ping|Ranks|Avg|Out of|^ +(268435456|1073741824|67108864|8|65536|1048576) " $R/${D}_${DEV}_$name.txt | head -${LINES_MAX:-16}; }
run rs_f32_sum_g4_8B-1G -b 8 -e 1G -f 4 -g 4 -d float -o sum
run rs_f32_sum_g2_256M -b 256M -e 256M -g 2 -d float -o sum
run rs_f32_sum_g8_256M -b 256M -e 256M -g 8 -d float -o sum
LINES_MAX=60 run rs_all_all_g4_64M -b 64M -e 64M -g 4 -d all -o all
echo "=== watchdog cost and prefetch, k=4 f32 sum 256M, same job"
for v in "--no-watchdog" "" "--prefetch 1" "--prefetch 2" "--prefetch 4" "--no-watchdog" ""; do
  left 480 && $B -b 256M -e 256M -g 4 $v | grep -E "single-block|^ +268435456" | sed "s/^/[$v] /"
done | tee $R/variants.txt; snap
left 420 && (cd carry && timeout $((590 - SECONDS)) ./gpu_faults gpu_soak --nocapture) > $R/soak.log 2>&1
grep -E "soak|test result|panicked" $R/soak.log; snap
