"""The tests' helpers, one package: imported as ``support`` (pytest puts tests/ on ``sys.path``
for tests/conftest.py), or run as files by path (``gradient_worker.py``, ``worker_check_driver.py``,
``verl_breaker.py``). docs/layout.md lists each module."""
