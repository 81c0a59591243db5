# args: p
# expect: exact
rec $1z $10
