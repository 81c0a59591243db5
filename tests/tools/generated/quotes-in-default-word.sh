# expect: exact
rec "${U:-'x y'}" ${U:-'x y'} ${U-\x} "${U-\$}"
