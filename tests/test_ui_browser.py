"""The Dagster UI as a user sees it, in Debian's Chromium (headless, driven by selenium through
Debian's chromedriver; nothing downloads a browser): the asset lineage, the ``nodes`` asset with its
materialization metadata, the ``report`` asset with its plot, and the reindex schedule and sensor.
The screenshots it takes are the README's (``docs/ui/``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from conftest import free_port

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "ui"
STAGES = ("ingest", "chunking", "enrichment", "graphs", "vectors", "indexes", "retrieval", "evaluation", "llm")

pytestmark = pytest.mark.skipif(not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()), reason="Debian's chromium and chromium-driver are not installed (.ci/run installs them)")


@pytest.fixture
def ui(demo_copy):
    port = free_port()
    graphlake = Path(sys.executable).with_name("graphlake")
    process = subprocess.Popen([str(graphlake), "ui", "--port", str(port)], env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # a loaded CI machine starts it slowly
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=5):
                    break
            except OSError:
                time.sleep(1)
        else:
            raise AssertionError("the UI did not answer within 300 s")
        yield url, process
    finally:  # whatever the test left running (nothing, when it passed)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    # no background connections: this machine's network is closed, and Chromium would retry them all run long
    quiet = ("--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1000", *quiet):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def page_text(driver, *expected: str, timeout: float = 120) -> str:
    """The page's visible text once every ``expected`` string is in it (the UI renders as data arrives)."""
    deadline = time.monotonic() + timeout
    while True:
        text = driver.execute_script("return document.body.innerText")
        if all(part in text for part in expected) or time.monotonic() > deadline:
            missing = [part for part in expected if part not in text]
            assert not missing, f"{driver.current_url} never showed {missing}"
            return text
        time.sleep(1)


def test_the_ui_shows_lineage_assets_the_report_plot_and_the_reindex_automation_and_stops_whole(ui, browser):
    from selenium.webdriver.common.by import By

    ui, process = ui
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.get(f"{ui}/asset-groups")
    page_text(browser, "Global asset lineage", *STAGES)
    time.sleep(2)  # the lineage graph settles its layout (and a community pop-up would have opened)
    assert "Join the Dagster community" not in browser.execute_script("return document.body.innerText")  # marked seen for the lake
    browser.save_screenshot(str(SCREENSHOTS / "lineage.png"))

    browser.get(f"{ui}/assets/nodes")
    text = page_text(browser, "Latest materialization", "rows", "rows_added", "chunk_size")
    rows = text.split("\nrows\n", 1)[1].split("\n")
    assert any(line.strip() == "138" for line in rows[:6]), rows[:6]  # the demo's 138 nodes

    browser.get(f"{ui}/assets/report")
    page_text(browser, "[Show Markdown]")
    shown = browser.find_elements(By.XPATH, "//*[normalize-space(text())='[Show Markdown]']")[-1]  # the innermost: the link itself
    browser.execute_script("arguments[0].click()", shown)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        plots = browser.execute_script("return Array.from(document.images).filter(i => i.src.startsWith('data:image/png')).map(i => i.naturalWidth)")
        if plots and all(plots):
            break
        time.sleep(1)
    assert plots and min(plots) > 100, plots  # the recall@k plot, decoded
    browser.save_screenshot(str(SCREENSHOTS / "report.png"))

    browser.get(f"{ui}/automation")
    page_text(browser, "reindex_schedule", "corpus_change_sensor", "02:00")

    started = psutil.Process(process.pid).children(recursive=True)  # dagster dev, its webserver, daemon, code servers
    assert len(started) >= 3, started
    process.send_signal(signal.SIGTERM)  # to `graphlake ui` alone, as a service manager stops it
    assert process.wait(timeout=60) == 0
    _, alive = psutil.wait_procs(started, timeout=30)
    assert alive == [], [(p.pid, p.cmdline()) for p in alive]
