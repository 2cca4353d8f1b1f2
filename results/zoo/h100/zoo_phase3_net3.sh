#!/bin/bash
# The zoo's phase 3 (experiment=zoo: the rate chosen in phase 2, seeds 1-3, 20,000 iterations)
# on a lent NVIDIA H100, for net3 and the optimizers listed in phase3_optimizers.txt, whose
# three seeds this project's CPU had trained and committed (results/zoo): one stack on the GPU
# (no bound on its estimated seconds), its wall time against the same work on the CPU, and
# whether the seeds' results agree across the two machines. Run from the repository's root with
# the wheels of what the device lacks in .whl/ and the MNIST files in .mnist/MNIST/raw/.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L; nproc; lscpu | grep "Model name"; python3 -c "import torch; print(torch.__version__)"
start=$(date +%s)
timeout -k 20 --signal=INT "${1:-420}" python3 -c "from harness.cli import train; train()" \
  -m experiment=zoo model=net3 optimizer=$(cat results/zoo/h100/phase3_optimizers.txt) \
  hydra.launcher.max_stack_s=null data.root=$PWD/.mnist hydra.sweep.dir=/tmp/z3 \
  > $OUT/sweep_phase3_net3.txt 2>&1
echo "harness-train rc $? after $(( $(date +%s) - start )) s"
tail -5 $OUT/sweep_phase3_net3.txt
python3 -c "from harness.results import collect; print('collected', collect('/tmp/z3'))"
cp /tmp/z3/runs.parquet $OUT/phase3_net3_runs.parquet; cp /tmp/z3/curves.parquet $OUT/phase3_net3_curves.parquet
ls -la $OUT
