D="$(dirname "$0")/lib"
set -e
bash "$D/false_then_run.bash"
