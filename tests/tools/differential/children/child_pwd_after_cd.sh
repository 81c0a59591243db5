D="$(dirname "$0")/lib"
cd "$D"
bash ./pwd_lib.bash
