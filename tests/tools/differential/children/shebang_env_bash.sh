D="$(dirname "$0")/lib"
"$D/env_run.child" 1
