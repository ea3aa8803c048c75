"""The user's guide (``mkdocs.yml``, ``docs/``) builds with ``mkdocs build --strict``: no
broken link or anchor between its pages, every docstring of the API reference found;
its pages cover the guide's list, and the API reference holds the public API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT

PAGES = [
    "index",
    "concepts",
    "semantics",
    "delivery",
    "reliability",
    "security",
    "schemas",
    "benchmarks",
    "api",
]
PUBLIC = ["mwcore.Computation", "mwcore.Context", "mwcore.Input", "mwcore.Output", "mwcore.testing.Harness"]


def test_the_site_builds_strictly_with_its_pages_and_the_api_reference(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    for page in PAGES:
        assert (site / ("index.html" if page == "index" else f"{page}/index.html")).is_file(), page
    api = (site / "api" / "index.html").read_text()
    for name in PUBLIC:
        assert f'id="{name}"' in api, name


def test_every_page_of_docs_is_in_the_navigation() -> None:
    # (its slugify is a python/object tag: the full loader, on the repository's own file)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.Loader)
    listed = {next(iter(item.values())) for item in config["nav"]}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == listed, (pages - listed, listed - pages)


def test_the_readme_is_a_short_start_that_links_into_the_guide() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "make up" in readme and "make test" in readme
    for page in PAGES[1:]:
        assert f"docs/{page}.md" in readme, page
