D="$(dirname "$0")/lib"
for n in 8 1; do
  bash "$D/stage.bash" "$n"
done
