"""``python -m fuzz TARGET [libFuzzer flags] [CORPUS_DIR ...]``: fuzz one target
(``fuzz/targets.py``) with atheris; ``--list`` names them; ``--seeds`` writes the seed
corpus (``fuzz/corpus/<target>/``) from real records.

For example ``python -m fuzz watermark_record -max_total_time=60 fuzz/corpus/watermark_record``
(libFuzzer adds what it finds to the first corpus directory: give a copy to keep the
committed one as it is). A crash prints the input and writes it to ``crash-<sha1>``.
"""

from __future__ import annotations

import contextlib
import sys


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] == "--seeds":
        from fuzz.seeds import write_corpus

        for name, n in write_corpus().items():
            print(f"{name}: {n} seeds")
        return 0
    if argv[0] == "--list":
        from fuzz.targets import TARGETS

        for t in TARGETS.values():
            print(f"{t.name}: {t.doc}")
        return 0
    import atheris

    with atheris.instrument_imports(include=["mwcore", "services", "fuzz"]):
        from fuzz.targets import CONTROL, TARGETS

    name, flags = argv[0], argv[1:]
    target = CONTROL if name == CONTROL.name else TARGETS.get(name)
    if target is None:
        print(f"python -m fuzz: no target {name!r} (--list names them)", file=sys.stderr)
        return 2
    run, allowed = target.run, target.allowed

    def one(data: bytes) -> None:
        with contextlib.suppress(*allowed):
            run(data)

    atheris.Setup([sys.argv[0], *flags], one)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
