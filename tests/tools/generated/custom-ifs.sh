# expect: exact
A=":a b::c: "
IFS=:
rec $A x$A
IFS=" :"
rec $A ${U:-p:q r}
IFS=/
M=Qwen/Qwen2.5-7B
rec $M
