# expect: exact
V=a/b
rec "${V///x}" "${V///}" "${V/#//x}" "${V/%//x}" "${V////x}" "${V//\//x}"
