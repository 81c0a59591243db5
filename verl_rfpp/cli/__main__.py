"""``python -m verl_rfpp.cli ...``: the ``verl-rfpp`` command (``verl_rfpp.cli.main``), as the console
script runs it; also the command line a Ray node's doctor is started with (``cluster_doctor``)."""

from __future__ import annotations

import sys

from verl_rfpp.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
