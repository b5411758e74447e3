#!/bin/bash
# One call: HEAD's cold start, HEAD against the base (interleaved, one
# machine), then HEAD's GPU tests with the time left (pack C).
T0=$(date +%s)
D=${D:-560}
left() { echo $(( D - ($(date +%s) - T0) )); }
# A step's limit: its own cap, or what is left less a margin for packing.
cap() { local l=$(( $(left) - 15 )); [ $l -lt 1 ] && l=1; [ $l -lt $1 ] && echo $l || echo $1; }
cd "$(dirname "$0")/.." || exit 1
xz -dc cz/C.tar.xz | tar xf - || exit 1
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt
date -u > $R/date.txt
pack() { rm -rf $R/suite/jit-cache-* 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; }
trap pack EXIT
echo "start $(left)" >> $R/steps.txt
{ time timeout $(cap 60) carry/gpu-suite --only cold-start --out $R/suite ; } > $R/suite.out 2>&1
echo "cold $(left)" >> $R/steps.txt
B=carry/var/base/ringreduce-bench; H=carry/ringreduce-bench
C="carry/ringreduce-compare base=$B head=carry"
{ time timeout $(cap 200) $C --ks 8 --size 1G --iters 10 --warmup 3 --rounds 2 -J $R/cmp-k8-1G.json -- --collective all -c 0 ; } > $R/cmp-k8-1G.out 2>&1
echo "1G $(left)" >> $R/steps.txt
L="-g 8 -d float -o sum --collective all --algo all -b 8 -e 16M -f 2 -n 200 -w 20 --repeats 5 --direct-bytes 32M --rematch 9"
i=0
for b in $B $H $B $H $B; do i=$((i+1)); [ $(cap 60) -gt 20 ] && { time timeout $(cap 60) $b $L -J $R/lat-$i.json ; } > $R/lat-$i.out 2>&1; done
echo "lat $(left)" >> $R/steps.txt
[ $(cap 120) -gt 40 ] && { time timeout $(cap 120) $C --ks 4 --buffsizes 2M --size 256M --iters 10 --warmup 3 --rounds 2 -J $R/cmp-k4-256M-C1.json -- --collective all --algo ring -C 1 ; } > $R/cmp-k4-256M-C1.out 2>&1
echo "k4 $(left)" >> $R/steps.txt
L2=$(cap 1000); if [ $L2 -gt 30 ]; then { time timeout $L2 carry/tests/gpu --nocapture --test-threads=4 ; } > $R/gpu.log 2>&1; fi
echo "end $(left)" >> $R/steps.txt
