D="$(dirname "$0")/lib"
env N=1 bash "$D/uses_n.bash"
