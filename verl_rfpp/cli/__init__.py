"""The command line: ``verl-rfpp demo | doctor | check | recipe | bandit | curves`` (``main``, run by
the console script and by ``python -m verl_rfpp.cli``), ``check``'s runs read from a launch script
(``check``, ``scripts``, the bash reader under them), doctor's report (``doctor``, ``cluster_doctor``)
and ``demo --nodes``'s overrides (``multinode``). Importing ``verl_rfpp.cli.main`` loads neither torch
nor verl.
"""
