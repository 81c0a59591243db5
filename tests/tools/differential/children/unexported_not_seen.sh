D="$(dirname "$0")/lib"
N=1
bash "$D/uses_n.bash"
