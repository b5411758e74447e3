#!/bin/bash
# Compares PTX variants of the same kernels (bench binaries built with
# RINGREDUCE_PTX_FILE=<variant>, in ./carry/var/bench_<name>) at k=4, f32
# sum, 256 MiB, in one job; then ptxas register counts per variant, then the
# k=8 soak with the time left. Logs go to $OUT/results.tgz.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
snap() { (cd $OUT && tar czf results.tgz r); }
PTXAS=/usr/local/cuda/bin/ptxas
mk() { awk -v m="$2" '{print} /^\.visible \.entry|^\.entry/{e=1} e && /^\)/{print ".maxntid 257, 1, 1"; if (m) print ".minnctapersm 1"; e=0}' $1; }
glob() { sed -e 's/\bld\.v4\.u32/ld.global.v4.u32/; s/\bst\.v4\.u32/st.global.v4.u32/' carry/kernels.ptx; }
mk carry/kernels.ptx 0 > /tmp/base.ptx; mk carry/kernels.ptx 1 > /tmp/minctas.ptx
glob > /tmp/g.ptx; mk /tmp/g.ptx 0 > /tmp/global.ptx; mk /tmp/g.ptx 1 > /tmp/both.ptx
for v in base global minctas both; do
  (timeout 300 $PTXAS -arch=sm_90 -O3 -v /tmp/$v.ptx -o /tmp/$v.cubin > $R/ptxas_$v.log 2>&1) &
done
declare -A BIN=([base]=carry/ringreduce-bench [global]=carry/var/bench_global [minctas]=carry/var/bench_minctas [both]=carry/var/bench_both)
for pf in 1 0; do
  for v in base global minctas both base; do
    [ $SECONDS -lt ${BENCH_S:-260} ] || break
    timeout 60 ${BIN[$v]} -b 256M -e 256M -g 4 --prefetch $pf | grep -E "single-block|^ +268435456" | sed "s/^/[$v pf=$pf] /"
  done
done | tee $R/variants.txt; snap
wait
for v in base global minctas both; do
  echo "== $v"; grep -A1 -E "Compiling entry function '(ringreduce_rs_float_sum|ringreduce_reduce_block|ringreduce_copy_block)'" $R/ptxas_$v.log | grep -E "entry|Used"
done | tee $R/registers.txt
for v in base global minctas both; do
  [ -f /tmp/$v.cubin ] && /usr/local/cuda/bin/cuobjdump -sass -fun ringreduce_reduce_block /tmp/$v.cubin > $R/sass_reduce_block_$v.txt
done
(cd $OUT && tar czf results.tgz r && rm -f r/*.txt r/*.log)
[ -n "${SOAK_KS:-}" ] && (cd carry && time RINGREDUCE_SOAK_KS=$SOAK_KS timeout $((590 - SECONDS)) ./gpu_faults gpu_soak --nocapture) > $R/soak.log 2>&1
grep -E "soak|test result|panicked|real" $R/soak.log; (cd $OUT && mv results.tgz variants.tgz; tar czf results.tgz r)
