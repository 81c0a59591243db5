# args: '	' ' @.:]*' ''
# expect: exact
rec $* zx${@} "$@"
