# expect: exact
E=
rec "${U/#/-}" ${U/%/x} "${E/#/-}" "${U//a/b}"
