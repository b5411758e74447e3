#!/bin/bash
# The bench evidence runs of issues 2 and 3, on one GPU.
set -u
export NCCL_NVLS_ENABLE=0
B=./carry/ringreduce-bench
R=$OUT/results; mkdir -p $R
D=$(date -u +%Y-%m-%d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/device.txt
DEV=$(head -1 $R/device.txt | cut -d, -f1 | tr ' ' '-')
run() { name=$1; shift; echo "=== $name: $*"; $B "$@" -J $R/${D}_${DEV}_$name.json --plot $R/${D}_${DEV}_$name.png > $R/${D}_${DEV}_$name.txt 2>&1; echo "rc=$?"; grep -E "Ceil|copy|ping|Avg|Out of|^ +268435456|^ +1073741824|^ +67108864" $R/${D}_${DEV}_$name.txt | head -20; }
run rs_f32_sum_g4_8B-1G -b 8 -e 1G -f 4 -g 4 -d float -o sum
run rs_f32_sum_g2_256M -b 256M -e 256M -g 2 -d float -o sum
run rs_f32_sum_g8_256M -b 256M -e 256M -g 8 -d float -o sum
run rs_all_all_g4_64M -b 64M -e 64M -g 4 -d all -o all
$B -b 1M -e 1M -g 4 --vs-nccl > $R/vs_nccl_one_gpu.txt 2>&1; echo "vs-nccl rc=$?"; grep vs-nccl $R/vs_nccl_one_gpu.txt
cd $OUT && tar cf results.tar results && rm -rf results
