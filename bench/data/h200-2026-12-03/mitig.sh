#!/bin/bash
# H200 mitigation study: per boot W + 4 probes of the gate's compared shape; affinity alternates.
# usage: bash .gpu/run/mitig.sh BUDGET_S FIRST_AFF(0|1)
set -u; BUDGET=${1:-420}; AFF0=${2:-0}; T0=$(date +%s)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
G=$PWD/.gpu; S=/tmp/gpu-site; W=/tmp/gpu-w; mkdir -p $W
pack() { tar -czf $OUT/mitig.tgz -C $W . ; }
if [ ! -d $S/sglang ]; then mkdir -p $S && tar -xJf $G/site.tar.xz -C $S || exit 3; fi
echo "unpack_s $(( $(date +%s)-T0 ))" | tee -a $W/times.txt
export PYTHONPATH=$S
{ nvidia-smi; nproc; lscpu | head -20; python3 -c "import torch,sglang,transformers,triton,psutil;print(torch.__version__,sglang.__version__,transformers.__version__,triton.__version__, psutil.cpu_count(logical=False), psutil.cpu_count())"; } > $W/env.txt 2>&1
M=$G/run/model; if command -v curl >/dev/null; then HC="curl -sf -m 3 -o /dev/null"; else HC="python3 $G/run/health.py"; fi
ARGS="--model-path $M/dsv3-nextn-tiny --speculative-algorithm EAGLE --tokenizer-path $M/tokenizer --load-format dummy --attention-backend triton --sampling-backend pytorch --grammar-backend none --speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6 --cuda-graph-max-bs 32 --mem-fraction-static 0.6 --enable-metrics --decode-log-interval 40 --host 127.0.0.1 --port 30000"
PROBE="-m sglang.bench_serving --backend sglang --host 127.0.0.1 --port 30000 --tokenizer $M/tokenizer --dataset-name random-ids --random-input-len 400 --random-output-len 256 --random-range-ratio 1.0 --num-prompts 64 --max-concurrency 16 --request-rate inf --seed 1 --warmup-requests 2 --output-details"
b=0
while :; do
  b=$((b+1)); el=$(( $(date +%s)-T0 ))
  [ $b -gt 1 ] && [ $(( el + 115 )) -gt $BUDGET ] && break
  aff=$(( (AFF0 + b + 1) % 2 ))
  if [ $aff = 1 ]; then SP="python3 $G/run/pin.py 0-11"; CP="python3 $G/run/pin.py 12-15"; export SGLANG_SET_CPU_AFFINITY=1; else SP=""; CP=""; unset SGLANG_SET_CPU_AFFINITY; fi
  t=$(date +%s.%N); setsid $SP python3 -m sglang.launch_server $ARGS > $W/server-$b.log 2>&1 & P=$!
  ok=0; for i in $(seq 1 400); do $HC http://127.0.0.1:30000/health_generate && { ok=1; break; }; kill -0 $P 2>/dev/null || break; sleep 0.5; done
  echo "boot $b aff=$aff ready=$ok s=$(python3 -c "import time;print(round(time.time()-$t,1))")" | tee -a $W/times.txt
  if [ $ok = 1 ]; then
    for p in w 1 2 3 4; do
      timeout 100 $CP python3 $PROBE --output-file $W/b$b-$p.jsonl > $W/b$b-$p.txt 2>&1
    done
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader >> $W/clocks.txt 2>&1
  fi
  kill -TERM -- -$P 2>/dev/null; for i in $(seq 1 30); do kill -0 $P 2>/dev/null || break; sleep 0.5; done; kill -KILL -- -$P 2>/dev/null; wait $P 2>/dev/null
  pack; echo "boot $b done $(( $(date +%s)-T0 ))" | tee -a $W/times.txt
done
pack
