"""The static reader of bash launch scripts (docs/contract.md section 6.5): ``parse`` (bounded
bytes, tree-sitter's tree), ``words`` (quoting, splitting, patterns), ``arithmetic`` (64-bit),
``state`` (what a subshell copies), ``shell`` (statements and expansions), ``builtins`` (what
bash does itself)."""
