D="$(dirname "$0")/lib"
set -u
bash "$D/uses_n.bash"
