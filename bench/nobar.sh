set -u
export NCCL_NVLS_ENABLE=0
row() { grep -E "single-block|^ +268435456 " | sed "s/^/$1 /"; }
b() { local n=$1 bin=$2 k=$3 bs=$4; shift 4
  timeout 60 $bin -b 256M -e 256M -g $k -d float -o sum --buffsize $bs -n 10 -w 3 "$@" 2>&1 | row "$n k=$k bs=$bs $*"; }
L=carry/var/bench_lane N=carry/var/bench_nobar
{ for bs in 2M 16M 64M; do b lane $L 4 $bs --prefetch 0; b nobar $N 4 $bs --prefetch 0 -c 0; done
  b lane $L 8 2M --prefetch 0; b nobar $N 8 2M --prefetch 0 -c 0; } | grep -v single | tee $OUT/nobar.txt
