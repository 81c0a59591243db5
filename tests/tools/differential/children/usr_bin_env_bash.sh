D="$(dirname "$0")/lib"
/usr/bin/env bash "$D/stage.bash" 1
