D="$(dirname "$0")/lib"
export N=1
"$D/plain.child"
