N=8
return
N=1
