"""``make docs-check``: the user's guide built strictly, then its home page and its API
reference opened by headless Chromium (Debian's ``chromium``, installed if missing)
and screenshot into ``build/screenshots/``; each screenshot must show a rendered page
(not blank: many distinct rows of pixels), and the two must differ. The last line is
JSON: each page's file, size and distinct rows.

A PNG is read with the standard library (zlib): only the scanlines are compared, so
no imaging library is needed.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "build" / "site"
SHOTS = ROOT / "build" / "screenshots"
PAGES = {"home": "index.html", "api": "api/index.html"}
WIDTH, HEIGHT = 1280, 900
MIN_DISTINCT_ROWS = 150  # a blank or unstyled page has a few dozen at most


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if shutil.which("apt-get"):
        print("docs-check: apt-get install chromium (Debian's)", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=False, capture_output=True)
        found = shutil.which("chromium")
    if not found:
        print(
            "docs-check: no chromium: install Debian's chromium (apt-get install chromium)", file=sys.stderr
        )
        sys.exit(2)
    return found


def rows(png: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the scanlines (each with its filter byte) of an 8-bit RGB(A) PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, data, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), f"bit depth {depth}, colour type {color}"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            data += body
        pos += 12 + length
    raw = zlib.decompress(data)
    stride = 1 + width * channels
    return width, height, [raw[i : i + stride] for i in range(0, len(raw), stride)]


def main() -> int:
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q"], cwd=ROOT, check=True)
    browser = chromium()
    SHOTS.mkdir(parents=True, exist_ok=True)
    report: dict[str, dict[str, object]] = {}
    shots: dict[str, list[bytes]] = {}
    for name, page in PAGES.items():
        out = SHOTS / f"{name}.png"
        out.unlink(missing_ok=True)
        subprocess.run(
            [
                browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={out}", (SITE / page).as_uri(),
            ],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        width, height, lines = rows(out.read_bytes())
        distinct = len(set(lines))
        report[name] = {
            "file": str(out.relative_to(ROOT)),
            "bytes": out.stat().st_size,
            "distinct_rows": distinct,
        }
        if (width, height) != (WIDTH, HEIGHT) or distinct < MIN_DISTINCT_ROWS:
            print(
                f"docs-check: {page} did not render ({width}x{height}, {distinct} distinct rows)",
                file=sys.stderr,
            )
            return 1
        shots[name] = lines
    if shots["home"] == shots["api"]:
        print("docs-check: the home page and the API reference look the same", file=sys.stderr)
        return 1
    print(json.dumps({"site": str(SITE.relative_to(ROOT)), "screenshots": report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
