"""Zeitgeist dip detector: spikes and dips of each query against its model."""
