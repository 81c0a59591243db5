"""The command-line tools: ``verl-rfpp demo | doctor | check | recipe | bandit | curves``
(``cli``), the launch-script reader behind ``check SCRIPT`` (``shell``, ``scripts``), doctor's
report (``doctor``, ``cluster_doctor``) and the loopback Ray cluster of ``demo --nodes``
(``cluster``). Importing ``verl_rfpp.tools.cli`` loads neither torch nor verl.
"""
