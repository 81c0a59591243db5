"""The contract's config rules (docs/contract.md section 6), by concern: the keys they read and the
config access (``keys``), a violation and its fix lines (``violation``), the rules table
(``table``), a config judged by it (``checks``), our estimators' names read off a config
(``names``) and the recipes (``recipes``). ``verl_rfpp.validation`` is the module users import;
it re-exports these names (no code here)."""
