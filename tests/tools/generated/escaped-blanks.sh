# expect: exact
rec \ /x _"?]]@""a"\ 'b' "^:"\~\&y '!&'\	\*
