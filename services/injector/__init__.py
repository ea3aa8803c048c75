"""The Zeitgeist injector: reads search-query logs from a directory into `queries`,
with the oldest unfinished log file as its low watermark (paper figure 10); and the
traffic generator that writes such logs, with ground truth."""
