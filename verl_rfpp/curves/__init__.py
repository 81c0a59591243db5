"""Learning curves in verl's real trainer on the CPU: our estimators against verl's built-ins and
grpo, several seeds each, every metric read back from verl's ``tensorboard`` logger."""
