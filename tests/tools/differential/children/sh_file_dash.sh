D="$(dirname "$0")/lib"
sh "$D/stage.bash" 1
