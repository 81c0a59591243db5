"""Toy experiments that check REINFORCE++'s claims on a CPU, with the code users train with.

Advantages come from verl's registry (ours for the two REINFORCE++ variants, verl's own ``grpo``
and ``rloo``); every policy update goes through ``verl_rfpp.losses``.
"""
