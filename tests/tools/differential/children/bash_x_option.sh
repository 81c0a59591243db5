D="$(dirname "$0")/lib"
bash -x "$D/stage.bash" 1
