"""The built documentation site in a real browser (issue 48): served on 127.0.0.1 and loaded in
headless Chromium (Debian's ``chromium`` and ``chromium-driver``, through Selenium). The index,
the getting-started page, an API page and a notebook page load with no console error and no
broken internal link, and the search page finds ``MaskedLMDistribution``. Screenshots of each go
to ``docs/_build/screenshots``. Skipped, with the reason, where Chromium or its driver is not
installed (CI's set-up installs them)."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds the site (about a minute) and starts a browser

PAGES = {
    "index": "index.html",
    "getting-started": "getting-started.html",
    "api": "api/generated/mlm_ppl.MaskedLMDistribution.html",
    "notebook": "notebooks/01_quickstart.html",
}
SHOTS = Path(__file__).resolve().parents[1] / "docs" / "_build" / "screenshots"


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip("no Chromium: apt-get install chromium chromium-driver (Debian), then rerun")
    pytest.importorskip("selenium", reason="the docs extra is not installed: pip install -e '.[docs]'")
    return browser, driver


@pytest.fixture(scope="module")
def server(request):
    """The site served on 127.0.0.1 (a free port) for the module's tests (skipped before the site
    is built where there is no Chromium)."""
    _chromium()
    docs_site = request.getfixturevalue("docs_site")
    handler = functools.partial(_QuietHandler, directory=str(docs_site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/", docs_site
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no line per request in the test's output
        pass


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    flags = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000")
    for flag in flags:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.set_page_load_timeout(60)
    yield chrome
    chrome.quit()


def _internal_links(chrome, base: str) -> list[str]:
    hrefs = chrome.execute_script("return Array.from(document.querySelectorAll('a[href]'), a => a.href)")
    return sorted({h for h in hrefs if h.startswith(base)})


def _resolves(link: str, base: str, site: Path) -> bool:
    """A link to a file of the site that exists, and to an id that file holds."""
    parsed = urllib.parse.urlparse(link)
    path = urllib.parse.unquote(parsed.path[len(urllib.parse.urlparse(base).path) :]) or "index.html"
    target = site / path
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return False
    if not parsed.fragment:
        return True
    text = target.read_text(errors="replace")
    return re.search(rf'id="{re.escape(urllib.parse.unquote(parsed.fragment))}"', text) is not None


def _load(chrome, url: str) -> None:
    """Open ``url`` with the console log drained first, and wait until the page and its scripts
    are done: what the log then holds is this page's."""
    chrome.get_log("browser")
    chrome.get(url)
    deadline = time.time() + 30
    while chrome.execute_script("return document.readyState") != "complete" and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # scripts the load started (the theme's, the search index's)


@pytest.mark.parametrize("name", list(PAGES))
def test_a_page_loads_without_console_errors_or_broken_links(server, browser, name):
    base, site = server
    _load(browser, base + PAGES[name])
    assert "mlm-ppl" in browser.title, browser.title
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"{PAGES[name]}: console errors {errors}"
    broken = [link for link in _internal_links(browser, base) if not _resolves(link, base, site)]
    assert not broken, f"{PAGES[name]}: broken internal links {broken}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / f"{name}.png"))


def test_the_search_page_finds_masked_lm_distribution(server, browser):
    base, _ = server
    _load(browser, base + "search.html?q=MaskedLMDistribution")
    deadline = time.time() + 30
    found: list[str] = []
    while time.time() < deadline and not found:
        found = browser.execute_script(
            "return Array.from(document.querySelectorAll('#search-results a'), a => a.textContent)"
        )
        time.sleep(0.2)
    assert any("MaskedLMDistribution" in text for text in found), found
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / "search.png"))
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"search: console errors {errors}"
