# expect: exact
X=$'a\n'
if [[ $X =~ a$ ]]; then rec yes; else rec no; fi
if [[ a =~ ^a$ ]]; then rec yes; else rec no; fi
