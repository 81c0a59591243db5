D="$(dirname "$0")/lib"
M=1 bash "$D/m_or_n.bash"
