#!/bin/bash
# The zoo's phase 1 on the lent GPU, for the study's GPU time: the planning (first-step checks
# and step times of every optimizer x net on this machine), then stacks, costliest first, for as
# long as the call allows; what finished comes back as the sweep's tables.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L; nproc; lscpu | grep "Model name"
python3 -c "import torch, hydra, pytorch_optimizer, schedulefree; print(torch.__version__, hydra.__version__, torch.cuda.get_device_name())" || exit 1
start=$(date +%s)
timeout -k 20 --signal=INT "${1:-400}" python3 -c "from harness.cli import train; train()" \
  -m experiment=zoo_tune data.root=$PWD/.mnist hydra.sweep.dir=/tmp/zt > $OUT/zoo_tune_gpu.log 2>&1
echo "harness-train rc $? after $(( $(date +%s) - start )) s"
python3 -c "from harness.results import collect; print('collected', collect('/tmp/zt'))"
cp /tmp/zt/first_steps.json /tmp/zt/runs.parquet /tmp/zt/cli.log $OUT/
ls -la $OUT
