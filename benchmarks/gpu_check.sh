#!/usr/bin/env bash
# What a GPU adds to the CPU test suite, in one run of under 10 minutes on a machine with one GPU,
# with no downloads (docs/performance.md, "On a GPU"):
#   1. the numerical test modules on cuda tensors against the float64 reference, same tolerances;
#   2. the global normalization and both estimators through a torch.distributed process group of
#      one rank with the NCCL backend (the package's process_group path);
#   3. benchmarks/bench_estimators.py on cuda tensors: ours against verl's built-ins, absolute times.
# Every step runs under its own time limit; the script prints a summary and exits 1 if any step
# failed (2 on a usage error). `--device cpu` runs the same steps on the CPU (gloo instead of
# NCCL): a dry run of the script itself; add `--quick` for a few tests and the quick benchmark grid.
set -u

usage() {
    cat <<'EOF'
usage: benchmarks/gpu_check.sh [--device cuda|cpu] [--quick] [--help]

  --device cuda   (default) run the checks on the GPU: the numerical test modules on cuda, the
                  normalization over one NCCL rank, the estimator benchmark on cuda tensors
  --device cpu    the same steps on the CPU (gloo instead of NCCL): a dry run of this script
  --quick         a few tests and the benchmark's quick grid (seconds, not minutes)
  --help          this text

Environment: PYTHON (default: python) runs every step. Exit status: 0 when every step passed,
1 when one failed, 2 on a usage error or when --device cuda finds no GPU.
EOF
}

device=cuda
quick=0
while [ $# -gt 0 ]; do
    case "$1" in
        --device)
            [ $# -ge 2 ] || { echo "gpu_check.sh: --device needs a value: cuda or cpu" >&2; exit 2; }
            device="$2"; shift 2 ;;
        --device=*) device="${1#--device=}"; shift ;;
        --quick) quick=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument '$1'; see --help" >&2; exit 2 ;;
    esac
done
case "$device" in
    cuda|cpu) ;;
    *) echo "gpu_check.sh: --device '$device': use cuda or cpu" >&2; exit 2 ;;
esac

PYTHON="${PYTHON:-python}"
cd "$(dirname "$0")/.." || exit 2

if [ "$device" = cuda ] && ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check.sh: --device cuda: torch sees no CUDA device here; run with --device cpu for a dry run" >&2
    exit 2
fi

modules="tests/test_estimators.py tests/test_normalization.py tests/test_losses.py tests/test_inputs.py tests/test_masked_loss_inputs.py"
# test ids carry the device; on cuda the numba-kernels variant runs the same torch path: left out
selection="$device and not kernels"
bench_args=(--device "$device" --repeats 3)
limits=(270 60 240)  # 9.5 minutes at most in all
if [ "$quick" = 1 ]; then
    modules="tests/test_normalization.py"
    selection="$device and not kernels and matches_reference"
    bench_args=(--device "$device" --quick)
fi

backend=nccl
[ "$device" = cpu ] && backend=gloo

read -r -d '' one_rank <<'EOF'
"""Normalization and both estimators over a process group of one rank (the package's
process_group path) against the float64 reference of tests/reference.py."""
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, "tests")
import reference  # noqa: E402
from batches import make_batch  # noqa: E402
from verl_rfpp import masked_global_normalize, reinforce_plus_plus, reinforce_plus_plus_baseline  # noqa: E402

backend, device = sys.argv[1], torch.device(sys.argv[2])
with tempfile.NamedTemporaryFile() as rendezvous:
    dist.init_process_group(backend, init_method=f"file://{rendezvous.name}", rank=0, world_size=1,
                            timeout=timedelta(seconds=60))
    group = dist.group.WORLD
    worst = 0.0
    for seed in range(3):
        rewards, mask, uids = make_batch(seed, dtype=torch.float64)
        on = rewards.to(device), mask.to(device)
        normalized, _ = masked_global_normalize(*on, process_group=group)
        expected = reference.normalize(rewards, mask)
        worst = max(worst, (normalized.cpu() - expected).abs().max().item())
        advantages = reinforce_plus_plus(*on, {"gamma": 1.0}, process_group=group).advantages
        worst = max(worst, (advantages.cpu() - reference.reinforce_plus_plus(rewards, mask)[0]).abs().max().item())
        advantages = reinforce_plus_plus_baseline(*on, uids, process_group=group).advantages
        expected = reference.reinforce_plus_plus_baseline(rewards, mask, list(uids))[0]
        worst = max(worst, (advantages.cpu() - expected).abs().max().item())
    dist.destroy_process_group()
print(f"one {backend} rank on {device}: max |error| against the float64 reference {worst:.1e}")
sys.exit(0 if worst <= 1e-12 else 1)
EOF

names=()
results=()
seconds=()
run_step() {  # run_step NAME LIMIT COMMAND...
    local name="$1" limit="$2"
    shift 2
    echo "=== $name (limit ${limit}s)"
    local start=$SECONDS
    timeout "$limit" "$@"
    local status=$?
    names+=("$name")
    seconds+=($((SECONDS - start)))
    if [ $status -eq 0 ]; then results+=(PASS); else results+=("FAIL (exit $status)"); fi
}

# shellcheck disable=SC2086  # $modules is a list of paths
run_step "numerical tests on $device" "${limits[0]}" "$PYTHON" -m pytest -q -p no:cacheprovider $modules -k "$selection"
run_step "normalization over one $backend rank" "${limits[1]}" "$PYTHON" -c "$one_rank" "$backend" "$device"
run_step "bench_estimators on $device" "${limits[2]}" "$PYTHON" benchmarks/bench_estimators.py "${bench_args[@]}"

echo "=== summary (device $device$([ "$quick" = 1 ] && echo ", quick"))"
failed=0
for i in "${!names[@]}"; do
    printf '%-40s %-16s %5ss\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"
    [ "${results[$i]}" = PASS ] || failed=1
done
exit $failed
