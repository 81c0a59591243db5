D="$(dirname "$0")/lib"
N=1
export N
N=8
bash "$D/uses_n.bash"
