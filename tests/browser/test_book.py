"""The rendered course (`make book`, docs/book.md) opened in headless Chromium from a local web server.

On three chapters with plots and a trajectory or dashboard view it checks that the sidebar's links and the
"next" link lead to pages that load, that a matplotlib plot is an <img> that loaded, that the view rendered as
HTML, and that no page shows a traceback or a Sphinx error. Screenshots go to build/book/screenshots/.

The site must exist: `make test` builds it before this test, and without it the test fails saying
"run make book first". AGENTLAB_BOOK_CHAPTERS (comma-separated notebook names) checks other chapters instead,
e.g. those of a book built from a few notebooks. Needs what test_widgets_browser.py needs (install.sh).
"""

from __future__ import annotations

import functools
import http.server
import os
import threading
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

import pytest

from test_widgets_browser import _wait as wait_for
from test_widgets_browser import browser  # noqa: F401 - the same headless Chromium fixture

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "book" / "html"
SCREENSHOTS = ROOT / "build" / "book" / "screenshots"
# chapter -> the CSS selector of the trajectory or dashboard view it shows (notebooks/conftest.py writes a
# widget's last state as static HTML with the widget's classes)
CHAPTERS = {"00_setup_and_tour": ".al-viewer .al-tok",
            "05_ppo_with_a_critic": ".al-dashboard svg",
            "06_grpo": ".al-dashboard svg"}
ANY_VIEW = ".al-viewer .al-tok, .al-dashboard svg, .al-explorer, .al-playground, .al-static-widget"
LOAD_S = 30

pytestmark = pytest.mark.slow


def _chapters() -> dict[str, str]:
    names = os.environ.get("AGENTLAB_BOOK_CHAPTERS")
    if not names:
        return CHAPTERS
    return {n.strip(): CHAPTERS.get(n.strip(), ANY_VIEW) for n in names.split(",") if n.strip()}


@pytest.fixture(scope="module")
def site():
    """The built site on a free localhost port, as any static file server would host it."""
    missing = [n for n in _chapters() if not (SITE / "notebooks" / f"{n}.html").exists()]
    if not (SITE / "index.html").exists() or missing:
        pytest.fail(f"the book is not built at {SITE} (missing: {', '.join(missing) or 'index.html'}): "
                    "run make book first", pytrace=False)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # e.g. the browser closing a connection when it quits

    server = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=str(SITE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _wait(driver, what: str, predicate, timeout: float = LOAD_S):
    return wait_for(driver, what, predicate, timeout, shot=SCREENSHOTS / "failure.png")


def _status(url: str) -> int:
    with urllib.request.urlopen(url.split("#")[0], timeout=10) as r:
        return r.status


def _no_error_shown(driver, page: str) -> None:
    text = driver.find_element("tag name", "body").text
    assert "Traceback (most recent call last)" not in text, f"{page} shows a Python traceback"
    for css in (".system-message", ".problematic", ".output.traceback", ".output.error"):
        shown = driver.find_elements("css selector", css)
        assert not shown, f"{page} shows a build error ({css}): {shown[0].text[:300]}"


def test_book_chapters_render_with_plots_views_and_navigation(site, browser):  # noqa: F811
    d = browser
    chapters = _chapters()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    # -- the home page (index.html leads to the README) and its table of contents
    d.get(f"{site}/index.html")
    _wait(d, "the home page", lambda: d.current_url.endswith("README.html")
          and d.find_elements("css selector", "nav.bd-links a"))
    _no_error_shown(d, "the home page")
    links = {a.get_attribute("href") for a in d.find_elements("css selector", "nav.bd-links a")}
    for name in chapters:
        assert any(h.split("#")[0].endswith(f"notebooks/{name}.html") for h in links), f"no link to {name}"
    broken = [h for h in sorted(links) if h.startswith(site) and _status(h) != 200]
    assert not broken, f"table-of-contents links that do not load: {broken}"
    d.save_screenshot(str(SCREENSHOTS / "home.png"))

    for name, view in chapters.items():
        # -- navigation: follow the table of contents' link, as a reader would
        d.get(f"{site}/README.html")
        link = _wait(d, f"the link to {name}", lambda: [a for a in d.find_elements("css selector", "nav.bd-links a")
                                                       if a.get_attribute("href").endswith(f"notebooks/{name}.html")])
        d.execute_script("arguments[0].click();", link[0])
        _wait(d, f"{name}'s page", lambda: d.current_url.endswith(f"notebooks/{name}.html")
              and d.execute_script("return document.readyState") == "complete")
        _no_error_shown(d, name)

        # -- a plot: a PNG output (myst-nb writes each to _images/) shown as an <img> that loaded
        plots = _wait(d, f"a plot on {name} to load", lambda: d.execute_script("""
            const imgs = [...document.querySelectorAll('.cell_output img[src*="_images/"]')];
            return imgs.filter(i => i.complete && i.naturalWidth > 0).length;"""))
        assert plots >= 1

        # -- a trajectory or dashboard view, drawn as HTML
        shown = d.find_elements("css selector", view)
        assert shown, f"{name}: no {view} in the page"
        d.execute_script("arguments[0].scrollIntoView({block: 'center'});", shown[0])
        assert shown[0].size["height"] > 0, f"{name}: {view} has no height"
        d.save_screenshot(str(SCREENSHOTS / f"{name}.png"))

        # -- the "next" link leads to a page that loads
        following = d.find_elements("css selector", "a.right-next")
        if following:
            href = following[0].get_attribute("href")
            assert _status(href) == 200, f"{name}: its next link {href} does not load"
            d.get(href)
            _wait(d, f"the page after {name}", lambda: d.find_elements("css selector", "main h1"))
            _no_error_shown(d, urljoin(href, "."))
    print(f"screenshots: {SCREENSHOTS}")
