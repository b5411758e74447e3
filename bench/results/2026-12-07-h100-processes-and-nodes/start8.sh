#!/bin/bash
# 8 processes of the job binary on one GPU under MPS: join only; prints start and joined epochs.
# then torchrun of the job example (4 processes).
set -u
M=/tmp/mps.$$; mkdir -p $M/p $M/l
export CUDA_MPS_PIPE_DIRECTORY=$M/p CUDA_MPS_LOG_DIRECTORY=$M/l
nvidia-cuda-mps-control -d && echo "mps started"
sleep 1
for round in 1 2 3; do
  port=$((29600 + round))
  start=$(date +%s%3N); echo "round $round start $start"
  for r in 0 1 2 3 4 5 6 7; do
    RANK=$r WORLD_SIZE=8 LOCAL_RANK=$r LOCAL_WORLD_SIZE=8 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    RINGREDUCE_TEST_GPU=1 RINGREDUCE_TEST_JOB=join RINGREDUCE_TEST_DEVICE=0 \
      carry/tests/job > /tmp/j$r.txt 2>&1 &
  done
  wait
  end=$(date +%s%3N)
  for r in 0 1 2 3 4 5 6 7; do echo "rank $r: $(tr '\n' ' ' < /tmp/j$r.txt)"; done
  echo "round $round all exited $end (+$((end-start)) ms)"
done
echo "== torchrun example (4 procs)"
s=$(date +%s%3N)
timeout 120 /opt/torch/.venv/bin/torchrun --no-python --nproc-per-node 4 --master-port 29650 carry/job-example; echo "torchrun rc=$? $(( $(date +%s%3N) - s )) ms"
echo quit | nvidia-cuda-mps-control
