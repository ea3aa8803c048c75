"""Fuzzing the decoders a record reaches (atheris): ``python -m fuzz --help``."""
