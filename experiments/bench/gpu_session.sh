#!/usr/bin/env bash
# One prepared GPU session (a lent H100/H200): bench_gpu.py for the three Qwen2.5 shapes, then the paper lower
# bounds of its shapes' compiled programs (gpu_aot.py: decode step bytes / HBM bandwidth, update FLOPs / bf16 peak)
# printed beside its measured figures, the KV-window
# decode comparison at RAGEN's 3600-slot cache (0.5B shapes), then a short end-to-end run of the tiny
# Sokoban preset on the GPU. Writes logs under ${OUT:-/tmp/gpu_out}.
#   bash experiments/bench/gpu_session.sh            # ~9 minutes
# Missing pure-Python packages can travel as wheels in .whl/ (installed into /tmp/site).
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
PY=${PY:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu.txt"
$PY -c "import jax, flax, optax, orbax.checkpoint as o, transformers; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'transformers', transformers.__version__, jax.devices())" 2>&1 | tee -a "$OUT/gpu.txt"
timeout ${BENCH_TIMEOUT:-300} $PY experiments/bench/bench_gpu.py --budget-s ${BENCH_BUDGET:-200} 2>&1 | tee "$OUT/bench_gpu.txt"
GPU_KIND=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -qi h200 && echo h200 || echo h100)
timeout ${BOUNDS_TIMEOUT:-150} $PY experiments/bench/gpu_aot.py --on-device --shapes bench --models 0.5b,3b --meshes 1 \
  --gpus ${GPU_KIND:-h100} --programs update/actor,lockstep/decode --measured "$OUT/bench_gpu.txt" 2>&1 | tee "$OUT/bounds.txt"
timeout ${WINDOW_TIMEOUT:-120} $PY experiments/bench/bench_kv_window.py --hidden 896 --layers 24 --heads 14 --head-dim 64 \
  --vocab 151936 --dtype bfloat16 --batch 32 --prompt 256 --new 256 --cache 3600 2>&1 | tee "$OUT/bench_kv_window.txt"
timeout ${TINY_TIMEOUT:-150} $PY run.py --config configs/sokoban.py:tiny --workdir /tmp/gpu_tiny \
  --config.warmstart.num_demos=500 --config.warmstart.steps=300 --config.trainer.total_steps=4 \
  --config.val.every=2 --config.trainer.export_hf=False 2>&1 | tr '\r' '\n' | grep -v "^\s*$" | tail -60 | tee "$OUT/tiny_gpu.txt"
echo "done"
