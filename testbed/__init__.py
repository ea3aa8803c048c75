"""What tests/ and bench/ share (neither imports the other): processes of the kit
started and stopped (``procs.py``), topics read whole (``topics.py``), the fault suite
(``chaos/``) and the detector over labelled counts (``detection.py``,
``detection_services.py``)."""
