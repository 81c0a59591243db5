# expect: refused
rec "${U-\x}"
