# where the hierarchical all-reduce's time goes at the fused list's size
B=carry/ringreduce-bench
( which nsys; nsys --version; ls /usr/local/cuda*/bin 2>/dev/null | head -50; ls /opt/nvidia 2>/dev/null; nproc ) > $R/tools.txt 2>&1
M=/tmp/mps.s; mkdir -p $M/p $M/l
export CUDA_MPS_PIPE_DIRECTORY=$M/p CUDA_MPS_LOG_DIRECTORY=$M/l
nvidia-cuda-mps-control -d
H="--procs 4 --nodes 2 -d float -o sum --collective all-reduce"
F="--procs 4 --nodes 2 --backend hier --collective fused -n 10 -w 2"
step plain100 40 $B $H --backend hier,nccl -b 25M -e 100M -f 4 -n 10 -w 2 -J $R/hier-100M.json
step fused 60 $B $F -J $R/fused.json
step fusedsock 80 env NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=2 $B $F -J $R/fused-sock.json
step plainsock 100 env NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=2 $B $H --backend hier -b 100M -e 100M -n 10 -w 2 -J $R/hier-100M-sock.json
NS=$(which nsys 2>/dev/null || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NS" ]; then
  step nsys100 150 $NS profile -t cuda,osrt --trace-fork-before-exec=true -o $R/h100m -f true $B $H --backend hier -b 100M -e 100M -n 4 -w 1
  step stats100 180 $NS stats -r cuda_gpu_trace -f csv -o $R/h100m $R/h100m.nsys-rep
  rm -f $R/*.nsys-rep $R/*.sqlite
  xz -T8 $R/*.csv
fi
echo quit | nvidia-cuda-mps-control
