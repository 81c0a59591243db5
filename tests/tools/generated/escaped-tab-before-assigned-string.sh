# expect: refused
A=\	"~="
rec "${R[*]}"${A}
