# expect: exact
X=
W="p q"
rec ${X:-a b} "${X:-a b}" ${W:+$W} ${X:-a\ b} ${X:-"c d"}e
