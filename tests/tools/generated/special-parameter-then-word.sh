# expect: exact
rec $*9
