#!/bin/bash
# Where the time goes: processes' latency by count beside one process's, and the hierarchical all-reduce's parts.
set -u
B=carry/ringreduce-bench
M=/tmp/mps.why; mkdir -p $M/p $M/l
export CUDA_MPS_PIPE_DIRECTORY=$M/p CUDA_MPS_LOG_DIRECTORY=$M/l
nvidia-cuda-mps-control -d && echo "mps started"
L="-d float -o sum --collective all-reduce -b 8 -e 4K -f 512 -n 200 -w 20 --repeats 3"
for k in 2 4 8; do echo "== procs $k"; $B --procs $k $L -J $OUT/r/lat-procs-$k.json | grep -v "^#  "; done
echo "== one process, k 8, every algorithm"; $B -g 8 $L --algo all -J $OUT/r/lat-one-8.json | grep -v "^#  "
echo "== hier 256M"; $B --procs 4 --nodes 2 --backend hier,nccl -d float -o sum --collective all-reduce -b 256M -e 256M -n 5 -w 2 -J $OUT/r/hier-256M.json | grep -v "^#  "
echo "== node part: 2 processes, 256M"; $B --procs 2 -d float -o sum --collective all -b 256M -e 256M -n 5 -w 2 -J $OUT/r/node-256M.json | grep -v "^#  "
echo "== step between nodes: NCCL all-gather, 2 hosts x 1, 256M"; $B --procs 2 --nodes 2 --backend nccl -d float --collective all-gather -b 256M -e 256M -n 5 -w 2 -J $OUT/r/across-256M.json | grep -v "^#  "
echo quit | nvidia-cuda-mps-control
