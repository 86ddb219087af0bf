"""Slides: every notebook carries slide metadata (set by nbtools.clean) and builds into reveal.js slides that
work offline (reveal.js, MathJax, require.js and jQuery served from a local copy, no CDN)."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import nbformat
import pytest

from mgpu_helpers.tools import export, nbtools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
CHROMIUM = os.environ.get("MGPU_CHROMIUM", "/usr/bin/chromium")


def _md(text):
    return nbformat.v4.new_markdown_cell(text)


def _code(text):
    return nbformat.v4.new_code_cell(text)


def test_headings_start_slides_and_long_runs_split_into_subslides():
    cells = [
        _md("# Title\ngoals"),
        _code("x = 1"),
        _md("## Part 1"),
        _md("### Detail"),
        _code("y = 2"),
        _code("\n".join(f"a{i} = {i}" for i in range(10))),
        _md("text after a long cell"),
    ]
    assert nbtools.slide_types(cells) == ["slide", "-", "slide", "subslide", "-", "subslide", "-"]


def test_first_cell_is_always_a_slide_even_without_a_heading():
    assert nbtools.slide_types([_code("import mgpu_helpers as mh"), _md("no heading")]) == ["slide", "-"]


def test_clean_sets_slide_metadata_and_rise_settings_and_stays_idempotent():
    nb = nbformat.v4.new_notebook(cells=[_md("# T"), _code("1"), _md("## S")])
    nb.cells[1].metadata["slideshow"] = {"slide_type": "skip"}  # a hand-set type is replaced by the rule
    once = nbtools.clean(nb)
    assert [c.metadata["slideshow"]["slide_type"] for c in once.cells] == ["slide", "-", "slide"]
    assert once.metadata["rise"]["scroll"] is True
    assert nbformat.writes(nbtools.clean(once)) == nbformat.writes(once)


def test_the_slide_tests_find_the_notebooks():
    assert NOTEBOOKS, "notebooks/*.ipynb matched nothing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_every_committed_cell_carries_slide_metadata(path):
    nb = nbformat.read(path, as_version=4)
    kinds = [c.metadata.get("slideshow", {}).get("slide_type") for c in nb.cells]
    assert kinds == nbtools.slide_types(nb.cells), f"run: python -m mgpu_helpers.tools.nbtools clean {path}"
    assert "rise" in nb.metadata


def _local_assets(page: str, html: str) -> list[str]:
    """Every script src / stylesheet href of the page; fails on an absolute (network) URL."""
    refs = re.findall(r'<script[^>]*\ssrc="([^"]*)"', html) + re.findall(r'<link[^>]*\shref="([^"]*)"', html)
    remote = [r for r in refs if re.match(r"^(https?:)?//", r)]
    assert not remote, f"{page} loads from the network: {remote}"
    return [os.path.normpath(os.path.join(os.path.dirname(page), r.split("?")[0])) for r in refs if r]


def test_slides_build_for_every_notebook_and_load_nothing_from_a_cdn(vendor, tmp_path):
    export.copy_vendor(str(tmp_path), vendor)
    os.makedirs(tmp_path / "slides")
    for path in NOTEBOOKS:
        nb = nbtools.clean(nbformat.read(path, as_version=4))
        page = str(tmp_path / "slides" / (os.path.basename(path)[:-6] + ".slides.html"))
        html = export.to_slides(nb)
        with open(page, "w", encoding="utf-8") as f:
            f.write(html)
        wanted = sum(c.metadata["slideshow"]["slide_type"] in ("slide", "subslide") for c in nb.cells)
        assert html.count("<section") >= wanted, f"{page}: {html.count('<section')} sections for {wanted} slides"
        missing = [a for a in _local_assets(page, html) if not os.path.exists(a)]
        assert not missing, f"{page}: missing local files {missing}"


def test_nbconvert_command_line_builds_slides_with_a_local_reveal(vendor, tmp_path):
    nb = nbtools.clean(nbformat.read(NOTEBOOKS[0], as_version=4))
    src = tmp_path / "deck.ipynb"
    nbformat.write(nb, str(src))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbconvert",
            "--to",
            "slides",
            str(src),
            f"--SlidesExporter.reveal_url_prefix={vendor}/reveal.js",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "deck.slides.html").read_text(encoding="utf-8")
    assert f"{vendor}/reveal.js/dist/reveal.js" in html and "unpkg.com/reveal.js" not in html


def test_slides_open_offline_in_chromium_as_a_slideshow(vendor, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    sync_playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").sync_playwright
    export.copy_vendor(str(tmp_path), vendor)
    os.makedirs(tmp_path / "slides")
    nb = nbtools.clean(nbformat.read(NOTEBOOKS[0], as_version=4))
    page_path = tmp_path / "slides" / "deck.slides.html"
    page_path.write_text(export.to_slides(nb), encoding="utf-8")
    requested = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.route(re.compile(r"^https?://"), lambda route: (requested.append(route.request.url), route.abort()))
        page.goto(page_path.as_uri())
        # reveal.js is loaded through require.js (not a global): its "ready" class says it initialised.
        page.wait_for_selector(".reveal.ready", timeout=60_000)
        total = page.locator(".reveal .slides section").count()
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => location.hash.startsWith('#/1')", timeout=10_000)
        os.makedirs(os.path.join(ROOT, "build", "screenshots"), exist_ok=True)
        page.screenshot(path=os.path.join(ROOT, "build", "screenshots", "slides-00_setup.png"))
        browser.close()
    wanted = sum(c.metadata["slideshow"]["slide_type"] in ("slide", "subslide") for c in nb.cells)
    assert total >= wanted
    assert not requested, f"the slides asked the network for {requested}"
