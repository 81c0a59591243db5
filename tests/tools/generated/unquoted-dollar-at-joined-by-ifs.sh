# args: 'a' '' ':b' 'c: ' ' '
# expect: exact
IFS=' :'
rec x09$*y =$@=
IFS=': '
rec $* =$@=
IFS=:
rec $@ x${*}
IFS=
rec $* =$@=
