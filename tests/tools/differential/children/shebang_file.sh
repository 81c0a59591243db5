D="$(dirname "$0")/lib"
"$D/run.child" 1
