"""Injectors: processes that bring records into the pipeline and report their own low
watermark (paper section 7.2): the injector (``injector.py``) and its durable state in
Redis (``state.py``: its token, its promise, its source's progress)."""
