"""A real headless browser for the inspector's tests (Debian's chromium + chromedriver, through selenium).

``make test`` installs chromium where it can (``make browser``: as root, with apt-get). Without it a browser test
skips, except under ``APCIR_REQUIRE_BROWSER=1`` (``.ci/run`` sets it), where a skip is a failure."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def browser() -> Any:
    if not (CHROMIUM and DRIVER):
        if os.environ.get("APCIR_REQUIRE_BROWSER") == "1":
            pytest.fail("APCIR_REQUIRE_BROWSER=1 but chromium/chromedriver are not installed")
        pytest.skip("no chromium + chromedriver: `make browser` installs them as root; else Debian/Ubuntu: "
                    "sudo apt-get install chromium chromium-driver")
    os.environ["SE_OFFLINE"] = "true"  # selenium must not look for a driver on the network
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def open_page(driver: Any, page: Path) -> float:
    """Open ``page`` and wait until its script has run; returns the seconds it took."""
    started = time.monotonic()
    driver.get(page.as_uri())
    while driver.execute_script("return document.body.dataset.ready") != "1":
        assert time.monotonic() - started < 20, "the page never became ready"
        time.sleep(0.02)
    return time.monotonic() - started
