# expect: refused
C=$'x'\*
rec "$C"
