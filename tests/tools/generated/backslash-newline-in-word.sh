# expect: exact
A=v
rec a\
b x${A}\
y "c\
d"
