B=carry/ringreduce-bench
M=/tmp/mps.t; mkdir -p $M/p $M/l
export CUDA_MPS_PIPE_DIRECTORY=$M/p CUDA_MPS_LOG_DIRECTORY=$M/l
nvidia-cuda-mps-control -d
step node 40 $B --procs 2 -d float -o sum --collective all -b 100M -e 100M -n 10 -w 2
step across 70 $B --procs 2 --nodes 2 --backend nccl -d float --collective all-gather -b 100M -e 100M -n 10 -w 2
step nodes4 100 $B --procs 4 -d float -o sum --collective all -b 50M -e 50M -n 10 -w 2
echo quit | nvidia-cuda-mps-control
