export N=1
cd /
