# expect: exact
rec "${U-\x}"
