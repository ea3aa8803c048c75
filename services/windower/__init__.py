"""Zeitgeist windower: per query, counts per one-second bucket of event time."""
