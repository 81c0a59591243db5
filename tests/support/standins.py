"""Recording stand-ins for the differential test of ``verl-rfpp check SCRIPT`` against real bash
(tests/support/differential.py): a folder of small bash programs that is the whole ``PATH`` of the
bash that runs a script. Each records its name and argv; the interpreters (``python``, ``python3``,
``python3.X``) parse their options as CPython does and record a main_ppo run (``-m
verl.trainer.main_ppo``, ``-mverl.trainer.main_ppo``, a path ending in ``verl/trainer/main_ppo.py``)
with its argv, working directory and the three variables check judges a run's environment by, and
never run anything; the launchers (``torchrun``, ``uv run``, ``ray job submit``, ``setsid``,
``nohup``, ``timeout``, ``env``, ``srun``, ``xargs``, ``bash``) start the rest of their words as the launcher
would, looked up among the stand-ins only (never the system's ``PATH``, also after ``env -i``).
Other programs print fixed outputs: the machine check assumes (docs/contract.md section 6.5), a
Linux machine with eight NVIDIA H100 GPUs where ``python3 -c '...import torch_npu...'`` fails. Each
stand-in knows the folder and the record folder by absolute path, so an emptied environment changes
nothing of the recording."""

from __future__ import annotations

import os
from pathlib import Path

ENVIRONMENT_KEYS = ("VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES", "PYTHONPATH")
"""The variables ``check`` judges a run's environment by (docs/contract.md section 6.5)."""

_PREAMBLE = """#!/bin/bash
BIN={bin}
RECORDS={records}
record() {{  # record KIND ARGS...: one file per call, named by time so that a sort gives the order
  local name
  name=$RECORDS/${{EPOCHREALTIME/./}}.$$.$RANDOM
  printf '%s\\0' "$@" > "$name.tmp" && /bin/mv "$name.tmp" "$name"
}}
resolve() {{  # the program a launcher starts: a stand-in, or a path as given; never the system's PATH
  case $1 in
    */*) REPLY=$1 ;;
    *) if [ -x "$BIN/$1" ]; then REPLY=$BIN/$1; else exit 0; fi ;;  # unknown: succeeds, as check assumes
  esac
}}
launch() {{ resolve "$1"; shift; exec "$REPLY" "$@"; }}
"""

_PYTHON = r"""
main_ppo() {  # record a main_ppo run: the cwd, the judged variables (set or not), then argv
  local env=() key
  for key in VERL_USE_EXTERNAL_PLUGINS VERL_USE_EXTERNAL_MODULES PYTHONPATH; do
    if [ "${!key+set}" ]; then env+=("1${!key}"); else env+=("0"); fi
  done
  record main_ppo "$PWD" "${env[@]}" "$@"
  exit 0
}
args=("$@"); n=$#; i=0; mode=
while (( i < n )); do
  a=${args[i]}
  case $a in
    --) i=$((i + 1)); mode=script; break ;;
    -) mode=stdin; break ;;
    --*) i=$((i + 1)) ;;
    -?*)
      flags=${a#-}; i=$((i + 1))
      while [ -n "$flags" ]; do
        f=${flags:0:1}; rest=${flags:1}
        case $f in
          c|m|W|X)
            if [ -n "$rest" ]; then value=$rest; else value=${args[i]}; i=$((i + 1)); fi
            case $f in c) mode=code; code=$value; break 2 ;; m) mode=module; module=$value; break 2 ;; esac
            flags= ;;
          *) flags=$rest ;;
        esac
      done ;;
    *) mode=script; break ;;
  esac
done
case $mode in
  code)
    record python -c "$code"
    case $code in *torch_npu*) echo "ModuleNotFoundError: No module named 'torch_npu'" >&2; exit 1 ;; esac
    exit 0 ;;
  module)
    rest=("${args[@]:i}")
    record python -m "$module" "${rest[@]}"
    case $module in
      verl.trainer.main_ppo) main_ppo "${rest[@]}" ;;
      torch.distributed.run) exec "$BIN/torchrun" "${rest[@]}" ;;
    esac
    exit 0 ;;
  script)
    file=${args[i]}; rest=("${args[@]:i+1}")
    record python "$file" "${rest[@]}"
    case $file in verl/trainer/main_ppo.py|*/verl/trainer/main_ppo.py) main_ppo "${rest[@]}" ;; esac
    exit 0 ;;
  *) record python "$@"; /bin/cat > /dev/null; exit 0 ;;
esac
"""

_TORCHRUN = r"""
record torchrun "$@"
args=("$@"); n=$#; i=0; python=1; module=
while (( i < n )); do
  a=${args[i]}
  case $a in
    --no-python|--no_python) python=; i=$((i + 1)) ;;
    -m|--module) module=1; i=$((i + 1)) ;;
    --standalone|--run-path|--run_path|--virtual-local-rank|--virtual_local_rank) i=$((i + 1)) ;;
    --*=*) i=$((i + 1)) ;;
    --) i=$((i + 1)); break ;;
    -*) i=$((i + 2)) ;;
    *) break ;;
  esac
done
rest=("${args[@]:i}")
if [ -z "$python" ]; then launch "${rest[@]}"; fi
if [ -n "$module" ]; then exec "$BIN/python" -m "${rest[@]}"; fi
exec "$BIN/python" "${rest[@]}"
"""

_UV = r"""
record uv "$@"
[ "$1" = run ] || exit 0
shift
while [ $# -gt 0 ]; do
  case $1 in
    --with|--with-editable|--with-requirements|--python|-p|--project|--directory|--extra|--group|--env-file|\
--index|--index-url|--extra-index-url|--package|--find-links|-f|--no-extra|--only-group|--no-group) shift 2 ;;
    -m|--module) shift; exec "$BIN/python" -m "$@" ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
launch "$@"
"""

_RAY = r"""
record ray "$@"
[ "$1 $2" = "job submit" ] || exit 0
shift 2
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; break ;;
    --no-wait|--verify|-v|--verbose|--disable-usage-stats) shift ;;
    --*=*) shift ;;
    -*) shift 2 ;;
    *) break ;;
  esac
done
launch "$@"
"""

_SETSID = r"""
record setsid "$@"
while [ $# -gt 0 ]; do case $1 in -f|-w|-c|--fork|--wait|--ctty) shift ;; --) shift; break ;; *) break ;; esac; done
launch "$@"
"""

_NOHUP = r"""
record nohup "$@"
[ "$1" = -- ] && shift
launch "$@"
"""

_TIMEOUT = r"""
record timeout "$@"
while [ $# -gt 0 ]; do
  case $1 in
    -s|-k|--signal|--kill-after) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
shift  # the duration
launch "$@"
"""

_ENV = r"""
record env "$@"
options=()
while [ $# -gt 0 ]; do
  case $1 in
    -u|--unset|-C|--chdir) options+=("$1" "$2"); shift 2 ;;
    --) shift; break ;;
    -*) options+=("$1"); shift ;;
    *) break ;;
  esac
done
while [ $# -gt 0 ] && [[ $1 == *=* ]]; do options+=("$1"); shift; done
[ $# -eq 0 ] && exec /usr/bin/env "${options[@]}"
resolve "$1"; shift
exec /usr/bin/env "${options[@]}" "$REPLY" "$@"
"""

_SRUN = r"""
record srun "$@"
while [ $# -gt 0 ]; do
  case $1 in
    --overlap|--exclusive|--pty|-l|--label|-u|--unbuffered|-Q|--quiet|-v|--verbose|-K|--kill-on-bad-exit) shift ;;
    --*=*) shift ;;
    --) shift; break ;;
    -*) shift 2 ;;
    *) break ;;
  esac
done
launch "$@"
"""

_BASH = r"""
record {name} "$@"
exec {real} "$@"
"""

_SILENT = r"""
record {name} "$@"
exit 0
"""

_PASS = r"""
record {name} "$@"
/bin/cat
"""

_REAL = r"""
exec {real} "$@"
"""

_NVIDIA_SMI = r"""
record nvidia-smi "$@"
case "$*" in
  *--query-gpu*) for i in 0 1 2 3 4 5 6 7; do echo "NVIDIA H100 80GB HBM3, 81559 MiB"; done ;;
  *) for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-0000000$i)"; done ;;
esac
"""

_FIXED = {
    "hostname": 'case "$1" in -I|-i) echo "10.0.0.1" ;; *) echo node0 ;; esac',
    "date": "echo 20260101-000000",
    "nproc": "echo 16",
    "whoami": "echo user",
    "id": 'case "$1" in -u|-g) echo 1000 ;; *) echo "uid=1000(user) gid=1000(user)" ;; esac',
    "uname": 'case "$1" in -m|-p|-i) echo x86_64 ;; -r) echo 6.1.0 ;; *) echo Linux ;; esac',
    "free": 'echo "Mem:  2113929216 1000 2113928216"',
    "git": 'case "$1" in rev-parse) echo 0123456789abcdef0123456789abcdef01234567 ;; esac',
}

# Deterministic text tools and file readers: the system's own (no writes, no programs started but
# through this PATH).
_REAL_TOOLS = ("basename", "dirname", "cat", "grep", "egrep", "sed", "awk", "cut", "tr", "head", "tail", "wc",
               "sort", "uniq", "seq", "expr", "ls", "realpath", "readlink", "printenv", "xargs", "true", "false",
               "tac", "rev", "echo", "printf", "paste", "fold", "od", "base64", "md5sum", "sha256sum", "stat", "du")
# Programs whose effect is outside what a run's verdict reads (downloads, files, processes): recorded only.
_SILENT_TOOLS = ("pip", "pip3", "wget", "curl", "huggingface-cli", "hf", "modelscope", "wandb", "conda", "mamba",
                 "sbatch", "scontrol", "mkdir", "rm", "cp", "mv", "ln", "touch", "chmod", "chown", "sleep",
                 "pkill", "killall", "ps", "pgrep", "ssh", "scp", "rsync", "tar", "unzip", "ibstat", "ibv_devinfo",
                 "ip", "ifconfig", "df", "lscpu", "find", "mktemp", "sync", "module", "ninja", "clear", "npu-smi",
                 "rocm-smi", "ibdev2netdev", "docker", "apt", "apt-get", "sudo")
_PASS_TOOLS = ("tee",)
_PYTHONS = ("python", "python3") + tuple(f"python3.{minor}" for minor in range(6, 15))


def install(folder: Path, records: Path) -> Path:
    """Write the stand-ins into ``folder``/bin; every call they make is recorded under ``records``.
    Returns the bin folder (the sandbox's whole PATH)."""
    bin_ = folder / "bin"
    bin_.mkdir(parents=True)
    records.mkdir(parents=True, exist_ok=True)
    preamble = _PREAMBLE.format(bin=_quote(bin_), records=_quote(records))
    programs = {name: _PYTHON for name in _PYTHONS}
    programs.update(torchrun=_TORCHRUN, uv=_UV, ray=_RAY, setsid=_SETSID, nohup=_NOHUP, timeout=_TIMEOUT, env=_ENV,
                    srun=_SRUN, **{"nvidia-smi": _NVIDIA_SMI})
    programs.update(bash=_BASH.format(name="bash", real="/bin/bash"), sh=_BASH.format(name="sh", real="/bin/sh"))
    programs.update({name: f'\nrecord {name} "$@"\n{body}\n' for name, body in _FIXED.items()})
    programs.update({name: _SILENT.format(name=name) for name in _SILENT_TOOLS})
    programs.update({name: _PASS.format(name=name) for name in _PASS_TOOLS})
    for name in _REAL_TOOLS:
        real = next((f"{d}/{name}" for d in ("/usr/bin", "/bin") if os.access(f"{d}/{name}", os.X_OK)), None)
        if real is not None:
            programs[name] = _REAL.format(real=real)
    for name, body in programs.items():
        path = bin_ / name
        path.write_text(preamble + body)
        path.chmod(0o755)
    return bin_


def read_records(records: Path) -> list:
    """Every recorded call in the order made: (kind, fields...) tuples."""
    calls = []
    for path in sorted(p for p in records.iterdir() if not p.name.endswith(".tmp")):
        fields = path.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
        calls.append(tuple(fields))
    return calls


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"
