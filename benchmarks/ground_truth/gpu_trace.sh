#!/usr/bin/env bash
# What to run when a GPU is lent: record engine step traces on CUDA for two workloads, compare each with the
# simulator's prediction for the matching hardware profile, and print the lines for BENCHMARKS.md.
#
#   pip install -e '.[engine]'            # on the GPU machine, once (torch with CUDA)
#   bash benchmarks/ground_truth/gpu_trace.sh [OUT_DIR]
#
# Environment: MODEL (default llama-156m), HW (hardware profile id; default picked from the device name),
# NUM_REQUESTS_FIXED (default 256), NUM_REQUESTS_CHAT (default 500), CHAT_RATE (requests/s, default 8).
set -euo pipefail

OUT=${1:-gpu_traces}
MODEL=${MODEL:-llama-156m}
NUM_REQUESTS_FIXED=${NUM_REQUESTS_FIXED:-256}
NUM_REQUESTS_CHAT=${NUM_REQUESTS_CHAT:-500}
CHAT_RATE=${CHAT_RATE:-8}

python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: nothing to record')"
DEVICE_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
if [[ -z "${HW:-}" ]]; then
  case "$DEVICE_NAME" in
    *H200*) HW=h200-sxm ;;
    *H100*PCIe*) HW=h100-pcie ;;
    *H100*) HW=h100-sxm ;;
    *A100*40GB*) HW=a100-40gb-sxm ;;
    *A100*) HW=a100-80gb-sxm ;;
    *L40S*) HW=l40s ;;
    *L4*) HW=l4 ;;
    *A10G*) HW=a10g ;;
    *4090*) HW=rtx-4090 ;;
    *B200*) HW=b200 ;;
    *) echo "no shipped profile for '$DEVICE_NAME': set HW=<profile id or path>" >&2; exit 2 ;;
  esac
fi
mkdir -p "$OUT"
echo "device: $DEVICE_NAME, profile: $HW, model: $MODEL" | tee "$OUT/device.txt"

# 1. All at once, fixed lengths: prefill-heavy start, then a long decode tail.
roofline measure --model "$MODEL" --device cuda --out "$OUT/fixed" \
  --input-len 512 --output-len 128 --num-requests "$NUM_REQUESTS_FIXED" --request-rate inf
# 2. ShareGPT-like chat arriving as a Poisson process: mixed prefill/decode steps.
roofline measure --model "$MODEL" --device cuda --out "$OUT/chat" \
  --workload sharegpt-chat --num-requests "$NUM_REQUESTS_CHAT" --request-rate "$CHAT_RATE"

for workload in fixed chat; do
  roofline compare --trace "$OUT/$workload" --hardware "$HW" --out "$OUT/$workload/compare" --json \
    > "$OUT/$workload/compare.json"
done

# Lines for a `## ` section of BENCHMARKS.md (its layout: the file's opening).
python - "$OUT" "$DEVICE_NAME" "$HW" <<'EOF'
import json, sys
from pathlib import Path
out, device, hw = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
print(f"\nGPU traces on {device} (profile {hw}), `bash benchmarks/ground_truth/gpu_trace.sh`:")
print("| workload | steps | median abs rel err | p90 abs rel err |")
print("|---|---|---|---|")
for workload in ("fixed", "chat"):
    summary = json.loads((out / workload / "compare.json").read_text())
    print(f"| {workload} | {summary.get('num_steps', '?')} | {summary['median_abs_rel_err']:.3f} | "
          f"{summary['p90_abs_rel_err']:.3f} |")
EOF
