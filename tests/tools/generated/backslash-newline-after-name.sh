# expect: refused
A=v
rec x$A\
y
