D="$(dirname "$0")/lib"
timeout 60 bash "$D/stage.bash" 8
setsid bash "$D/stage.bash" 1
