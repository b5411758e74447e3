#!/bin/bash
# Register counts and SASS of chosen kernel entries, with no GPU: fetches
# NVIDIA's ptxas, nvdisasm and cuobjdump wheels from PyPI (once, into
# target/cuda-tools) and compiles the PTX that build.rs embedded.
#   bench/sass.sh [sm_90] [entry ...]    (default: rs_float_sum, reduce_block)
# Output: register lines on stdout, SASS in target/cuda-tools/<entry>.sass.
set -eu
cd "$(dirname "$0")/.."
T=target/cuda-tools
ARCH=${1:-sm_90}; shift || true
ENTRIES=${*:-ringreduce_rs_float_sum ringreduce_reduce_block}
if [ ! -x $T/bin/ptxas ]; then
  mkdir -p $T/wheels $T/bin
  pip download -q --no-deps -d $T/wheels nvidia-cuda-nvcc nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump
  for w in $T/wheels/*.whl; do python3 -m zipfile -e "$w" $T/x; done
  for b in ptxas nvdisasm cuobjdump; do cp "$(find $T/x -name $b -type f | head -1)" $T/bin/; done
  chmod +x $T/bin/*
fi
cargo build -q --release -p ringreduce
PTX=$(ls -t target/release/build/ringreduce-*/out/kernels.ptx | head -1)
for e in $ENTRIES; do
  $T/bin/ptxas -arch=$ARCH -O3 -v -e $e "$PTX" -o $T/$e.cubin 2>&1 | grep -E "Used" | sed "s/^ptxas info *: /$e: /"
  PATH=$T/bin:$PATH $T/bin/cuobjdump -sass $T/$e.cubin > $T/$e.sass
done
