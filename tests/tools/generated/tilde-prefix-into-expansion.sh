# expect: exact
U=~${D/#/}
V=~/x${D}
W=~"/x"
rec "$U" "$V" "$W" ~${D} ~/${D}
