#!/bin/bash
# session 31 device call 4 (4 GPUs): compare_multi_gpu after the NHWC passes; train --gpus end to end
L=$OUT/log; mkdir -p $L
step() { local name=$1; shift; local t0=$(date +%s); "$@" > $L/$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s) - t0 )) s" | tee -a $L/times.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/gpu.txt; nproc
step install python3 -m pip install --no-build-isolation --no-deps -q .
rm -rf python/darknet_py
step synth python3 -m darknet_py synth /tmp/d --images 2048 --classes 4 --workers 32
python3 -c "import sys; sys.path.insert(0,'benchmarks'); from train_throughput import adapted_cfg; adapted_cfg(4, 64, 416, '/tmp/d/net.cfg')"
for g in 0 0,1,2,3; do
  step e2e_$g timeout 150 python3 -m darknet_py train /tmp/d/shapes.data /tmp/d/net.cfg --gpus $g --batch-mode per-gpu --precision bf16 --workers 14 --loader processes --max-batches 60 --out /tmp/o_$g
  grep -E "^ *[0-9]+:" $L/e2e_$g.txt | tail -3; grep -i "throughput" $L/e2e_$g.txt | tail -2
done
step mgpu timeout 330 python3 benchmarks/compare_multi_gpu.py --gpus 1,2,4 --seconds 4 --columns ours:tf32,ours:bf16,torch:bf16 --write $L/mgpu.md
cat $L/mgpu.md
(cd $OUT && tar czf logs.tgz log && rm -rf log)
