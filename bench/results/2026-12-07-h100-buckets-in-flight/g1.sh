#!/bin/bash
# Device call: unpack the bundle once (kept in x/ while the machine is warm), then run steps.
set -u
ROOT=$PWD
T0=$(date +%s)
if [ ! -x x/carry/gpu-suite ] || [ cz/H.tar.xz -nt x/stamp ]; then
  rm -rf x; mkdir -p x; (cd x && xz -dc $ROOT/cz/H.tar.xz | tar xf -) && touch x/stamp
fi
cd x
R=$OUT/r; mkdir -p $R
nvidia-smi > $R/gpu.txt 2>&1; date -u > $R/date.txt
export NCCL_NVLS_ENABLE=0 PATH=/opt/torch/.venv/bin:$PATH
export RINGREDUCE_NCCL_LIBRARY=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
left() { echo $(( $1 - ($(date +%s) - T0) )); }
step() { # step NAME BUDGET cmd...
  local n=$1 b=$2; shift 2
  local l=$(left $b); [ $l -lt 20 ] && { echo "$n skipped (time)" >> $R/steps.txt; return; }
  local s=$(date +%s); timeout $l "$@" > $R/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(( $(date +%s) - s ))s" >> $R/steps.txt
}
source $ROOT/cz/steps-$1.sh
cd $OUT && tar czf r.tgz r && rm -rf r
