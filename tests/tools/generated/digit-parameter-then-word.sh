# args: Qwen/Qwen2.5-7B
# expect: exact
rec $2z'a"b'
rec $1z
