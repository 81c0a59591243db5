# expect: exact
rec "[${*+x}]" "[${@+x}]" "[${*-x}]" "[${@-x}]"
set -- a
rec "[${*+x}]" "[${@-x}]"
