"""The static reader of bash launch scripts (docs/contract.md section 6.5), one concept a module:
``parse`` (bounded bytes, tree-sitter's tree), ``words`` (quoting, splitting, patterns),
``arithmetic`` (64-bit), ``state`` (what a subshell copies), ``shell`` (``Shell``, one reading,
composed of ``statements``, ``commands``, ``expansion``, ``parameters``, ``conditions`` and
``variables``), ``syntax`` (questions about the tree), ``builtins`` (what bash does itself),
``child`` (a script a script starts). Its modules meet only at public names."""
