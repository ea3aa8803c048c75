"""The fault suite (``suite.py``: options, scenarios, JSON), run by ``bench/chaos.py``
and ``tests/test_chaos.py``."""
