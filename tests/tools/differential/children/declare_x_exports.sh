D="$(dirname "$0")/lib"
declare -x N=1
bash "$D/uses_n.bash"
