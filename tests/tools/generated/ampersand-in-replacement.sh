# expect: exact
V=banana
A="&"
rec "${V//a/&}" "${V//a/\&}" "${V//a/"&"}" "${V//a/$A}" "${V//a/"$A"}" "${V/a/<&&>}" ${V//n/[&]}
