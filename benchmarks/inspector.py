"""The run inspector's page: size and time until it is ready in headless Chromium, for a run directory.

Run: ``.venv/bin/python benchmarks/inspector.py [RUN_DIR]`` (default ``runs/demo``, written by ``make demo``;
needs Debian's chromium and chromium-driver). Prints a Markdown table over 5 loads.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    run_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/demo")
    if not (run_dir / "config.json").exists() or not shutil.which("chromedriver"):
        print(f"skipped: needs {run_dir} (make demo) and chromium + chromedriver")
        return
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from apcir.evaluation.inspector import write_inspector

    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "inspect.html"
        started = time.perf_counter()
        write_inspector([run_dir], page)
        written = time.perf_counter() - started
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        loads = []
        try:
            for _ in range(5):
                began = time.perf_counter()
                driver.get(page.as_uri())
                while driver.execute_script("return document.body.dataset.ready") != "1":
                    time.sleep(0.01)
                loads.append(time.perf_counter() - began)
            turns = driver.execute_script("return D.turns.length")
        finally:
            driver.quit()
        print("| run | turns | page size | written in | ready in a browser (median of 5) |")
        print("|---|---:|---:|---:|---:|")
        print(f"| {run_dir} | {turns} | {page.stat().st_size / 1e6:.1f} MB | {written:.1f} s | "
              f"{statistics.median(loads):.2f} s |")


if __name__ == "__main__":
    main()
