D="$(dirname "$0")/lib"
export D
bash "$D/starts_stage.bash" 1
