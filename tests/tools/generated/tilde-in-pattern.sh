# expect: exact
V=$HOME/x
rec ${V/~/z} ${V//~/z} ${V#~} "${V%~/x}" ${V/#~/q} ${V/%~/q}
W=a:$HOME
A=${V/~/z} B=${V/#~/q} C=${W#a:~} D=${U-a:~}
rec "$A" "$B" "$C" "$D"
