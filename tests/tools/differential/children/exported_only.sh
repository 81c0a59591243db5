D="$(dirname "$0")/lib"
export N=8
M=1
bash "$D/m_or_n.bash"
