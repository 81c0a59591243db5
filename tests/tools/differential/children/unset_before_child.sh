D="$(dirname "$0")/lib"
export N=1
unset N
bash "$D/uses_n.bash"
