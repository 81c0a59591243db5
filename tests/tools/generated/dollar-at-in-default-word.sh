# args: 'a b'
# expect: refused
rec ${U:-x"$@"y}
