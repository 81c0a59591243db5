#!/usr/bin/env bash
# What a GPU adds to the CPU test suite, in one run of under 10 minutes on a machine with one GPU,
# with no downloads (docs/performance.md, "On a GPU"):
#   1. each numerical test module, in a process of its own, on cuda tensors against the float64
#      reference, same tolerances (a device-side assert ends its own module only);
#   2. the global normalization and both estimators through a torch.distributed process group of
#      one rank with the NCCL backend (the package's process_group path);
#   3. benchmarks/bench_estimators.py on cuda tensors: ours against verl's built-ins, absolute times.
# Every step runs under its own time limit; the script prints a summary and exits 1 if any step
# failed (2 on a usage error or a missing requirement). `--device cpu` runs the same steps on the
# CPU (gloo instead of NCCL; the numba kernels and the torch operations): a dry run of the script
# itself; add `--quick` for a few tests and the quick benchmark grid.
set -u

usage() {
    cat <<'EOF'
usage: benchmarks/gpu_check.sh [--device cuda|cpu] [--quick] [--help]

  --device cuda   (default) run the checks on the GPU: each numerical test module on cuda in a
                  process of its own, the normalization over one NCCL rank, the estimator benchmark
  --device cpu    the same steps on the CPU (gloo instead of NCCL): a dry run of this script
  --quick         a few tests and the benchmark's quick grid (seconds, not minutes)
  --help          this text

Requires verl-rfpp installed with its test extra (pytest, pytest-xdist, hypothesis) in the
interpreter that runs the steps, torch with CUDA for --device cuda:  pip install -e ".[test]"
Interpreter: $PYTHON if set, else the active virtual environment's ($VIRTUAL_ENV/bin/python),
else python3, else python. Exit status: 0 when every step passed, 1 when one failed, 2 on a
usage error, a missing requirement, or with --device cuda when torch sees no GPU.
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

cd "$(dirname "$0")/.." || exit 2

if [ -z "${PYTHON:-}" ]; then
    if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
        PYTHON="$VIRTUAL_ENV/bin/python"
    else
        PYTHON="$(command -v python3 || command -v python)"
    fi
    if [ -z "$PYTHON" ]; then
        echo "gpu_check.sh: no python3 or python on PATH; set PYTHON to the interpreter verl-rfpp is installed in" >&2
        exit 2
    fi
elif ! command -v "$PYTHON" >/dev/null; then
    echo "gpu_check.sh: PYTHON=$PYTHON is not a command; set PYTHON to the interpreter verl-rfpp is installed in" >&2
    exit 2
fi

# What every step imports, checked first by the interpreter that runs them: each missing piece is
# named with its own error (exit 1); with --device cuda, a torch that sees no GPU says which build
# it is (exit 3).
read -r -d '' requirements <<'EOF'
# gpu_check requirements
import sys

missing = []
for module, what in (("torch", "torch"), ("verl", "verl"), ("verl_rfpp", "verl-rfpp"), ("numba", "numba"),
                     ("pytest", "pytest (test extra)"), ("xdist", "pytest-xdist (test extra; pyproject's addopts)"),
                     ("hypothesis", "hypothesis (test extra)")):
    try:
        __import__(module)
    except Exception as error:
        missing.append(f"{what}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
if missing:
    print("cannot import " + "; ".join(missing))
    sys.exit(1)
if sys.argv[1] == "cuda":
    import torch

    if not torch.cuda.is_available():
        build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
        print(f"torch {torch.__version__} ({build}) sees no CUDA device")
        sys.exit(3)
EOF
problem="$("$PYTHON" -c "$requirements" "$device" 2>&1)"
case $? in
    0) ;;
    3) echo "gpu_check.sh: --device cuda: $problem; run with --device cpu for a dry run" >&2; exit 2 ;;
    *) echo "gpu_check.sh: $PYTHON: ${problem##*$'\n'}" >&2
       echo "gpu_check.sh: install verl-rfpp with its test extra into it: $PYTHON -m pip install -e \".[test]\"" >&2
       exit 2 ;;
esac

modules=(core/test_estimators core/test_normalization adapter/test_losses core/test_inputs adapter/test_masked_loss_inputs)
limits=(130 40 100 40 50)  # seconds per module; with the two steps below, 9.25 minutes at most in all
# Test ids carry the device and the passes' implementation. On cuda the numba-kernels variant runs
# the same torch path (left out); on the CPU both run.
selection="$device"
[ "$device" = cuda ] && selection="cuda and not kernels"
bench_args=(--device "$device" --repeats 3)
rank_limit=45
bench_limit=150
if [ "$quick" = 1 ]; then  # a dry run: generous limits for a loaded machine
    modules=(core/test_normalization core/test_estimators)
    limits=(240 240)
    selection="$selection and (matches_reference or identical_bits or nan_in_a_masked)"
    bench_args=(--device "$device" --quick)
    rank_limit=120
    bench_limit=240
fi

backend=nccl
[ "$device" = cpu ] && backend=gloo

read -r -d '' one_rank <<'EOF'
"""Normalization and both estimators over a process group of one rank (the package's
process_group path) against the float64 reference of tests/support/reference.py."""
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, "tests")
from support import reference  # noqa: E402
from support.batches import make_batch  # noqa: E402
from verl_rfpp import masked_global_normalize, reinforce_plus_plus, reinforce_plus_plus_baseline  # noqa: E402
from verl_rfpp.core import passes  # noqa: E402

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
implementation = "numba CPU kernels" if passes.uses_cpu_kernels(torch.empty(0, device=device)) else "torch operations"
print(f"one {backend} rank on {device} ({implementation}): max |error| against the float64 reference {worst:.1e}")
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

for i in "${!modules[@]}"; do  # one process per module
    run_step "tests/${modules[$i]}.py on $device" "${limits[$i]}" \
        "$PYTHON" -m pytest -q -p no:cacheprovider "tests/${modules[$i]}.py" -k "$selection"
done
run_step "normalization over one $backend rank" "$rank_limit" "$PYTHON" -c "$one_rank" "$backend" "$device"
run_step "bench_estimators on $device" "$bench_limit" "$PYTHON" benchmarks/bench_estimators.py "${bench_args[@]}"

echo "=== summary (device $device$([ "$quick" = 1 ] && echo ", quick"))"
failed=0
for i in "${!names[@]}"; do
    printf '%-48s %-16s %5ss\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"
    [ "${results[$i]}" = PASS ] || failed=1
done
exit $failed
