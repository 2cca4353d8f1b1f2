#!/bin/bash
# The zoo's phase 1 stacks of net3 (its optimizers that stack) on the lent GPU, for as long as
# the call allows: each stack's wall time against the same work on this project's CPU.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
start=$(date +%s)
timeout -k 15 --signal=INT "${1:-200}" python3 -c "from harness.cli import train; train()" \
  -m experiment=zoo_tune model=net3 optimizer=$(cat .gpu/stackable.txt) \
  data.root=$PWD/.mnist hydra.sweep.dir=/tmp/zt > $OUT/zoo_net3_gpu.log 2>&1
echo "harness-train rc $? after $(( $(date +%s) - start )) s"
python3 -c "from harness.results import collect; print('collected', collect('/tmp/zt'))"
cp /tmp/zt/runs.parquet $OUT/runs_net3.parquet; cp /tmp/zt/cli.log $OUT/cli_net3.log
