"""The HTML report and the `evolver ui` pages in a real headless Chromium (selenium, the system's chromium
and chromedriver): every plot is drawn with a size and marks inside it, and a click goes from the runs page
to a run, to a program, to an episode's trace. Screenshots are kept under the test's tmp_path, and copied to
``test-artifacts/`` at the repository's root (or the folder it names) when EVOLVER_TEST_ARTIFACTS is set.

Runs wherever Chromium is installed (``apt-get install chromium chromium-driver``; CI installs them) and is
skipped elsewhere.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
DRIVER = shutil.which("chromedriver")

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs chromium and chromedriver "
                                 "(apt-get install chromium chromium-driver)")]

#: Each plot's drawn marks: (plot, CSS selector of elements that must be drawn with a size inside it).
MARKS = [("dev-scores", "#dev-admitted use"), ("dev-scores", "#dev-probe use"),
         ("frontier", "#frontier-members use"), ("frontier", "#frontier-dominated path"),
         ("lineage", "[id^=lineage-admitted-] path"), ("categories", "path")]

#: Width, height and the number of marks with a size of every matched element, in the page.
SIZES = """
const out = {};
for (const svg of document.querySelectorAll('svg[data-plot]')) {
  const box = svg.getBoundingClientRect();
  out[svg.dataset.plot] = {width: box.width, height: box.height, marks: {}};
}
for (const [plot, sel] of arguments[0]) {
  const svg = document.querySelector(`svg[data-plot="${plot}"]`);
  const drawn = svg ? [...svg.querySelectorAll(sel)].filter(e => { const b = e.getBoundingClientRect();
                                                                  return b.width > 0 || b.height > 0; }) : [];
  out[plot] && (out[plot].marks[sel] = drawn.length);
}
return out;
"""


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1600"):
        options.add_argument(arg)
    # Chromium leaves its singleton folder in the temp folder after quitting: a folder of the test's own
    # holds it (a short path: the folder holds a socket, whose path may not pass 107 characters).
    scratch = tempfile.mkdtemp(prefix="evolver-chromium-")
    service = Service(executable_path=DRIVER, env={**os.environ, "TMPDIR": scratch})
    try:
        driver = webdriver.Chrome(service=service, options=options)
        driver.set_page_load_timeout(60)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
def shots(tmp_path):
    """save(driver, name): a full-page screenshot, kept as a test artifact."""
    folder = tmp_path / "screenshots"
    folder.mkdir()
    saved = []

    def save(driver, name: str) -> Path:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(max(height, 800), 8000))
        path = folder / f"{name}.png"
        assert driver.save_screenshot(str(path)), f"no screenshot of {name}"
        saved.append(path)
        return path

    yield save
    keep = os.environ.get("EVOLVER_TEST_ARTIFACTS")
    if keep:
        target = ROOT / "test-artifacts" if keep.lower() in ("1", "true", "yes") else Path(keep)
        target.mkdir(parents=True, exist_ok=True)
        for path in saved:
            shutil.copy(path, target / path.name)


def check_plots(driver, plots: set[str]) -> None:
    sizes = driver.execute_script(SIZES, [list(m) for m in MARKS])
    assert plots <= set(sizes), f"plots on the page: {sorted(sizes)}"
    for plot in plots:
        assert sizes[plot]["width"] > 100 and sizes[plot]["height"] > 50, (plot, sizes[plot])
        for sel, n in sizes[plot]["marks"].items():
            assert n > 0, f"{plot}: nothing drawn for {sel}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(finished_run, tmp_path):
    """`evolver ui` on a free port, in its own process, serving a copy of the finished run's workspace."""
    store, run_id = finished_run
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    port = free_port()
    env = {**os.environ, "EVOLVER_PLUGINS": ",".join(filter(None, [os.environ.get("EVOLVER_PLUGINS"), "ui"]))}
    proc = subprocess.Popen([sys.executable, "-m", "evolver.cli", "--store", str(copy), "ui", "--port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"evolver ui exited: {proc.stdout.read()}")
                time.sleep(0.1)
        else:
            pytest.fail("evolver ui did not answer in 30 s")
        yield url, run_id
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_html_report_draws_every_plot(finished_run, browser, shots):
    store, run_id = finished_run
    browser.get((store / "reports" / f"{run_id}.html").as_uri())
    check_plots(browser, {"dev-scores", "frontier", "lineage", "categories"})
    shots(browser, "report")


def test_the_ui_clicks_from_a_run_to_a_program_to_an_episode_trace(served, browser, shots):
    from selenium.webdriver.common.by import By

    url, run_id = served
    browser.get(url + "/")
    assert "Runs" in browser.find_element(By.TAG_NAME, "h1").text
    shots(browser, "ui-runs")
    browser.find_element(By.CSS_SELECTOR, f'a[href="/run/{run_id}"]').click()
    assert run_id in browser.find_element(By.TAG_NAME, "h1").text
    check_plots(browser, {"dev-scores", "frontier", "lineage", "categories"})
    shots(browser, "ui-run")
    browser.find_element(By.CSS_SELECTOR, 'a.program[href^="/program/p0001"]').click()
    assert "Program p0001" in browser.find_element(By.TAG_NAME, "h1").text
    assert browser.find_element(By.CSS_SELECTOR, 'a.skill[href="/skill/shout-words"]')
    shots(browser, "ui-program")
    episode = browser.find_element(By.CSS_SELECTOR, "#episode-list a.episode")
    episode_id = episode.get_attribute("href").rsplit("/", 1)[1]
    episode.click()
    assert episode_id in browser.find_element(By.TAG_NAME, "h1").text
    step = browser.find_element(By.ID, "step-0")
    assert step.find_element(By.CSS_SELECTOR, "code.action").text  # the action it played
    assert step.find_element(By.CSS_SELECTOR, "pre.observation").text  # and what the task answered
    browser.find_element(By.CSS_SELECTOR, "details summary").click()  # the prompt, folded until asked for
    shots(browser, "ui-episode")
    trace = browser.find_element(By.ID, "trace-text").get_attribute("textContent")
    assert f"episode {episode_id}" in trace and "--- step 0" in trace and "program p0001" in trace
