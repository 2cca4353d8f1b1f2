#!/bin/bash
# The zoo's phase 2 on the lent GPU: net3 at the course's 20,000 iterations, the best phase-1
# trial of the optimizers in .gpu/phase2_optimizers.txt (tune.budget=1), which this project's
# CPU trained in its phase-2 stacks: one stack's wall time against the same work on the CPU,
# and whether full-length results agree across the two machines.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L; nproc; lscpu | grep "Model name"
start=$(date +%s)
timeout -k 20 --signal=INT "${1:-420}" python3 -c "from harness.cli import train; train()" \
  -m experiment=zoo_shortlist model=net3 optimizer=$(cat ${LIST:-.gpu/phase2_optimizers.txt}) tune.budget=1 \
  data.root=$PWD/.mnist hydra.sweep.dir=/tmp/zs > $OUT/zoo_phase2_net3_gpu.log 2>&1
echo "harness-train rc $? after $(( $(date +%s) - start )) s"
python3 -c "from harness.results import collect; print('collected', collect('/tmp/zs'))"
cp /tmp/zs/runs.parquet $OUT/${NAME:-phase2_net3}_runs.parquet; cp /tmp/zs/curves.parquet $OUT/${NAME:-phase2_net3}_curves.parquet
ls -la $OUT
