# expect: exact
V=ab
E=
rec "${V/#/x}" "${V/%/x}" "${E/#/x}" "${U/#/x}" ${U/%/x} "${V//}" "${V/}"
