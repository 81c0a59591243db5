source "$(dirname "$0")/lib/defines.bash"
train 1
