#!/bin/bash
# Same-job comparison of bench builds: ./carry/ringreduce-bench (base) and
# every ./carry/var/bench_<name> (built from another commit or PTX), at
# f32 sum, 256 MiB, over ring sizes and staging sizes, base first and last
# so drift shows. Output: $OUT/compare.txt. Extra bench flags: $FLAGS.
set -u
export NCCL_NVLS_ENABLE=0
row() { grep -E "single-block|^ +268435456 " | sed "s/^/$1 /"; }
bins="base=carry/ringreduce-bench"
for b in carry/var/bench_*; do [ -x "$b" ] && bins="$bins ${b#carry/var/bench_}=$b"; done
bins="$bins base=carry/ringreduce-bench"
for k in ${KS:-4 8}; do
  for bs in ${BUFFS:-2M 16M}; do
    for nb in $bins; do
      [ $SECONDS -lt ${STOP_S:-400} ] || break 3
      timeout 60 ${nb#*=} -b 256M -e 256M -g $k -d float -o sum --buffsize $bs -n 10 -w 3 ${FLAGS:-} 2>&1 | row "${nb%%=*} k=$k bs=$bs"
    done
  done
done | tee $OUT/compare.txt
