"""The built book in a real browser (headless Chromium through selenium).

The HTML is built from the committed notebooks with execution off, strictly (warnings are errors), into a
temporary directory, so the test needs no model and works on a clean clone. Every page of the table of
contents must load, show every figure its notebook holds (``<img>`` decoded: ``naturalWidth > 0``) and have
no broken internal link (a missing file, or a ``#fragment`` that is no id on its page).

Set ``LTV_BOOK_HTML_ROOT`` to a book root that was built already (e.g. ``_build/runs/smoke__smollm2-135m``) to
check its ``_build/html`` instead of building. Needs the Debian packages ``chromium`` and ``chromium-driver``
and the ``selenium`` package (``.ci/run`` installs them); without them the test is skipped, unless
``LTV_REQUIRE_BROWSER=1`` (set by ``.ci/run``) makes that a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from ltvlib import book

ROOT = Path(__file__).resolve().parents[1]
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")
pytestmark = pytest.mark.browser


def _missing(what: str) -> None:
    if os.environ.get("LTV_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{what} (LTV_REQUIRE_BROWSER=1)")
    pytest.skip(what)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(book root whose notebooks and toc were rendered, its HTML dir)."""
    given = os.environ.get("LTV_BOOK_HTML_ROOT")
    if given:
        root = Path(given).resolve()
        return root, root / "_build" / "html"
    out = tmp_path_factory.mktemp("book")
    t0 = time.perf_counter()
    html = book.build_html(ROOT, strict=True, output_dir=out)
    print(f"HTML built in {time.perf_counter() - t0:.1f} s")
    return ROOT, html


@pytest.fixture(scope="module")
def driver() -> Iterator[object]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install -e '.[dev]')")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not chromium or not chromedriver:
        _missing("chromium / chromedriver not found (apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    # --no-sandbox: CI containers run as root; /dev/shm is small in containers
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,2000", "--allow-file-access-from-files"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(chromedriver), options=opts)
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        drv.quit()


def expected_images(notebook: Path) -> int:
    """Image outputs in a notebook: each becomes one ``<img>`` in its page."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return sum(
        1
        for c in nb["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if any(m in o.get("data", {}) for m in IMAGE_MIMES)
    )


PAGE_STATE = """
const main = document.querySelector('main') || document.body;
const imgs = Array.from(main.querySelectorAll('.cell_output img, .output img'));
return {
  ready: document.readyState,
  h1: (main.querySelector('h1') || {}).textContent || '',
  images: imgs.map(i => ({src: i.getAttribute('src'), complete: i.complete, width: i.naturalWidth})),
  ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
};
"""


def test_pages_load_with_figures_and_no_broken_links(built: tuple[Path, Path], driver: object) -> None:
    root, html = built
    t0 = time.perf_counter()
    pages = book.toc_pages(root)
    problems: list[str] = []
    ids: dict[Path, set[str]] = {}
    links: list[tuple[str, str]] = []
    n_images = 0
    for doc in pages:
        path = (html / f"{doc}.html").resolve()
        if not path.exists():
            problems.append(f"{doc}: no {path.relative_to(html)}")
            continue
        driver.get(path.as_uri())  # type: ignore[attr-defined]
        state = driver.execute_script(PAGE_STATE)  # type: ignore[attr-defined]
        deadline = time.time() + 20
        # a slow (busy) machine can hand back a page still loading, and images decode asynchronously: wait until
        # the document is complete and every image has finished (or failed) loading
        while (state["ready"] != "complete" or not all(i["complete"] for i in state["images"])) \
                and time.time() < deadline:
            time.sleep(0.2)
            state = driver.execute_script(PAGE_STATE)  # type: ignore[attr-defined]
        if state["ready"] != "complete" or not state["h1"].strip():
            problems.append(f"{doc}: page did not load (readyState {state['ready']}, h1 {state['h1']!r})")
        broken = [i["src"] for i in state["images"] if not i["width"]]
        if broken:
            problems.append(f"{doc}: images not decoded: {broken}")
        notebook = root / f"{doc}.ipynb"
        if notebook.exists():
            want = expected_images(notebook)
            if len(state["images"]) != want:
                problems.append(f"{doc}: {len(state['images'])} figures on the page, {want} in the notebook")
        n_images += len(state["images"])
        ids[path] = set(state["ids"])
        links += [(doc, href) for href in state["links"]]

    for doc, href in links:
        url = urllib.parse.urlparse(href)
        if url.scheme != "file":
            continue  # external links are not the book's business here
        target = Path(urllib.parse.unquote(url.path))
        if not target.exists():
            problems.append(f"{doc}: broken link {href}")
        elif url.fragment and target.suffix == ".html":
            if target not in ids:  # a page outside the toc (genindex, search): read its ids once
                ids[target] = set(re.findall(r'id="([^"]+)"', target.read_text(encoding="utf-8", errors="replace")))
            if url.fragment not in ids[target]:
                problems.append(f"{doc}: link to a missing anchor {href}")
    print(f"checked {len(pages)} pages, {n_images} figures, {len(links)} links in {time.perf_counter() - t0:.1f} s")
    assert not problems, "\n".join(problems)
    # the check must be able to see figures at all: some page of an executed book has one
    if any(expected_images(root / f"{d}.ipynb") for d in pages if (root / f"{d}.ipynb").exists()):
        assert n_images > 0
