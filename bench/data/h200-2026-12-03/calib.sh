#!/bin/bash
# sglforge bench --calibrate K through the process runtime on one H200 (real sglang 0.5.14).
# usage: bash .gpu-sf/calib.sh TAG K AFF(0|1) [FAIL(0|1)]
#   AFF=1: the server pinned to CPUs 0-11 and bench_serving to 12-15 (pinwrap.py), no
#   SGLANG_SET_CPU_AFFINITY (at TP 1 it binds rank 0 to every core and undoes the pinning).
set -u; TAG=$1; K=$2; AFF=$3; FAIL=${4:-0}
R=$PWD; S=/tmp/site; W=/tmp/sfw-$TAG; rm -rf $W; mkdir -p $W
T0=$(date +%s)
[ -d $S/sglang ] || { mkdir -p $S && tar -xJf .gpu/site.tar.xz -C $S; }
echo "unpack $(( $(date +%s)-T0 )) s" > $W/times.txt
{ nvidia-smi; nproc; python3 -c "import sys;sys.path.insert(0,'$S');import torch,sglang,triton;print(torch.__version__,sglang.__version__,triton.__version__)"; } > $W/env.txt 2>&1
export PYTHONPATH=$R/src:$R/.gpu-sf/pylib
M=$R/.gpu/run/model/dsv3-nextn-tiny; SC=$R/.gpu-sf/calib.toml
PY="python3"; [ $AFF = 1 ] && PY="python3 $R/.gpu-sf/pinwrap.py"
if [ $FAIL = 1 ]; then
  # real failing launches through sglforge's smoke: a flag upstream refuses, a TP larger than the GPUs
  for f in "--attention-backend nosuch" "--tp-size 2"; do
    n=$(echo $f | tr -c 'a-z0-9\n' '_' | tr -s _); sed "s|\"--port\", \"<port>\",|\"--port\", \"<port>\", $(echo $f | sed 's/\([^ ]*\)/"\1",/g')|" $SC > $W/fail-$n.toml
    t=$(date +%s); timeout 150 python3 -m sglforge smoke --runtime process --python python3 --scenario $W/fail-$n.toml --model $M \
      --env PYTHONPATH=$S --log-dir $W/fail-$n --json > $W/fail-$n.json 2> $W/fail-$n.err
    echo "fail $n rc=$? $(( $(date +%s)-t )) s" >> $W/times.txt
  done
fi
t=$(date +%s)
timeout ${CAL_TIMEOUT:-540} python3 -m sglforge bench --calibrate $K --runtime process --python "$PY" --scenario $SC --model $M \
  --env PYTHONPATH=$S --report-dir $W/cal --noise-profile $W/cal-profile.json --json > $W/cal.json 2> $W/cal.err
echo "calibrate K=$K aff=$AFF rc=$? $(( $(date +%s)-t )) s" >> $W/times.txt
ps -eo pid,pgid,args | grep "[s]glang" >> $W/times.txt
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader >> $W/times.txt 2>&1
rm -rf $W/cal/home/.cache/flashinfer
tar -czf $OUT/$TAG.tgz -C $W .
cat $W/times.txt; tail -5 $W/cal.err
