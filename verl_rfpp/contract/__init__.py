"""The contract's rules and recipes (docs/contract.md section 6): a run config is read into its
violations and warnings, and the recipes are the overrides that satisfy it. OmegaConf only: no
verl, no torch, so ``verl-rfpp check`` and ``recipe`` answer before anything loads verl.
"""
