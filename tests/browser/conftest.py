"""A real browser for the inspector's page (SPEC §12): Playwright for Python driving the
system's Chromium (`make browser` installs both; browser downloads are not used).

Not part of `make unit`: these tests need a browser, and run under `make browser`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

playwright_sync = pytest.importorskip("playwright.sync_api")

# Where the browser is: TOOLCALL_PROXY_CHROMIUM, else Debian's chromium on the PATH.
CHROMIUM = (
    os.environ.get("TOOLCALL_PROXY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
)


# Per module: Playwright's sync API holds an event loop while it runs, which would stand in
# the way of the asyncio tests of a run that goes on past these.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: `make browser` installs it")
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"the page raised: {errors}"
