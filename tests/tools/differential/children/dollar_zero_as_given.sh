D="$(dirname "$0")/lib"
bash "$D/zero.bash"
cd "$D"
bash ./zero.bash
