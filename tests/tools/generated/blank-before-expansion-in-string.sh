# expect: exact
C=c
rec "	${C}" " ${C}x" "a  $C"
