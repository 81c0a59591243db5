# expect: refused
A=1
rec "$A"
