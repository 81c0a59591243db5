"""The experiment pipeline of ``verl-rfpp curves``: training runs in verl's real trainer on the
CPU, our estimators against verl's built-ins and grpo, every metric read back from verl's
``tensorboard`` logger. Shared by both tasks: ``runs`` (train and read back), ``series`` and
``stats`` (what the reports compute), ``report`` (the demo task's report); the noisy-reward study
is the subpackage ``noisy``. Its data live in docs/curves/."""
