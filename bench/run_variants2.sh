#!/bin/bash
# Same-job comparison of kernel builds after the launch-bounds change:
# base (prefetch knob, passed --prefetch 0), nopf (the ring's prefetch branch
# compiled out), gpuscope (flag fence and poll at .gpu scope); then a
# correctness pass of every type and op with nopf. Bench binaries in
# ./carry and ./carry/var; output in $OUT.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
row() { grep -E "single-block|^ +268435456 |^ +67108864 " | sed "s/^/$1 /"; }
go() { [ $SECONDS -lt ${STOP_S:-200} ] || return; name=$1; bin=$2; shift 2; timeout 40 $bin -b 256M -e 256M -d float -o sum -n 10 -w 3 "$@" 2>&1 | row "$name $*"; }
{
go base carry/ringreduce-bench -g 4 --buffsize 2M --prefetch 0
go nopf carry/var/bench_nopf -g 4 --buffsize 2M
go gpuscope carry/var/bench_gpuscope -g 4 --buffsize 2M --prefetch 0
go base carry/ringreduce-bench -g 4 --buffsize 16M --prefetch 0
go nopf carry/var/bench_nopf -g 4 --buffsize 16M
go base carry/ringreduce-bench -g 8 --buffsize 2M --prefetch 0
go nopf carry/var/bench_nopf -g 8 --buffsize 2M
go gpuscope carry/var/bench_gpuscope -g 4 --buffsize 16M --prefetch 0
} | tee $R/variants2.txt
[ $SECONDS -lt ${ALL_S:-220} ] && timeout ${ALL_T:-90} carry/var/bench_nopf -b 64M -e 64M -g 4 -d all -o all -n 3 -w 1 > $R/nopf_all_all.txt 2>&1
echo "all_all rc=$? rows=$(grep -cE '^ +67108864 ' $R/nopf_all_all.txt)"; awk '/^ +67108864 /{w+=$9+$13} END{print "wrong total:", w+0}' $R/nopf_all_all.txt
