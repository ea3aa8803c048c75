"""``mw up``: a whole pipeline on the local stack (``runner.py``), what it runs
(``plan.py``: the project's ``[tool.mw.up]``, or the library's example in
``example.py``) and its live view (``view.py``). Nothing in the runtime imports it."""
