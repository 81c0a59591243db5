# args: 8
D="$(dirname "$0")/lib"
/bin/bash "$D/stage.bash" "$1"
