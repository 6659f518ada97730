"""End to end in a real browser: JupyterLab on localhost, the widgets demo notebook run in
headless Chromium, the λ slider moved, the advantages shown checked, a screenshot saved.

Needs /usr/bin/chromium, /usr/bin/chromedriver and selenium: ``tests/browser/install.sh``
installs whatever is missing. Without them this test fails (it does not skip), saying what
is missing. The screenshot is copied to ``runs/browser-screenshot.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NOTEBOOK = HERE / "widgets_demo.ipynb"
SCREENSHOT = ROOT / "runs" / "browser-screenshot.png"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-dev-shm-usage", "--window-size=1400,2300"]
SERVER_START_S, NOTEBOOK_RUN_S, UPDATE_S = 120, 300, 60

pytestmark = pytest.mark.slow


def _require_browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium Python package")
    if missing:
        pytest.fail(f"browser test cannot run: missing {', '.join(missing)}. Run tests/browser/install.sh "
                    "(apt-get install chromium chromium-driver as root; pip install selenium).", pytrace=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + SERVER_START_S
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer {url} within {SERVER_START_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on a free localhost port, serving a fresh copy of the notebook."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    port, token = _free_port(), os.urandom(16).hex()
    env = {**os.environ,
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    news = tmp_path / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false"}')  # no "get Jupyter news?" prompt over the screenshot
    log = tmp_path / "jupyter.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={work}",
           "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
           "jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly"]
    if os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(f"{base}/api/status?token={token}", proc, log)
        yield {"base": base, "token": token, "log": log, "tmp": tmp_path}
    finally:
        try:  # a clean shutdown also stops the kernel
            req = urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST", data=b"")
            urllib.request.urlopen(req, timeout=5)
            proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def browser(tmp_path):
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager look for downloads
    os.environ.setdefault("SE_AVOID_STATS", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, what: str, predicate, timeout: float, lab=None, shot: Path | None = None):
    """``predicate()``'s first truthy value within ``timeout`` s; else a failure with a screenshot (``shot``)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - the page is still changing; try again
            value = None
        if value:
            return value
        time.sleep(0.5)
    shot = shot or Path(tempfile.gettempdir()) / "agentlab-browser-failure.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(shot))
    tail = lab["log"].read_text()[-2000:] if lab else ""
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} on {driver.current_url} "
                f"(screenshot: {shot})\n{tail}")


def _js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def test_widgets_render_and_respond_in_jupyterlab(lab, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    d = browser
    d.get(f"{lab['base']}/lab/tree/{NOTEBOOK.name}?token={lab['token']}")
    _wait(d, "the notebook's kernel to be idle", lambda: _js(d, """
        const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
        return k && k.status === 'idle' && document.querySelectorAll('.jp-Notebook .jp-Cell').length >= 4;"""),
          SERVER_START_S, lab)
    _js(d, "window.jupyterapp.commands.execute('notebook:run-all-cells');")

    # -- the widgets rendered (not just their text/plain fallback)
    _wait(d, "the trajectory viewer and advantage explorer to render", lambda: _js(d, """
        return document.querySelector('.al-viewer .al-tok') && document.querySelector('.al-explorer .al-gae-lambda')
               && document.querySelector('.al-advantages [data-advantages]');"""), NOTEBOOK_RUN_S, lab)
    errors = d.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert not [e.text for e in errors if "Error" in e.text], [e.text for e in errors]
    assert len(d.find_elements(By.CSS_SELECTOR, ".al-viewer .al-tok")) > 50
    assert d.find_elements(By.CSS_SELECTOR, ".al-explorer .widget-slider")

    # -- the viewer's outcome filter changes the list
    header = d.find_element(By.CSS_SELECTOR, ".al-viewer .al-header")
    assert "<b>8</b> of 8" in header.get_attribute("innerHTML")
    Select(d.find_element(By.CSS_SELECTOR, ".al-viewer select")).select_by_visible_text("success")
    _wait(d, "the viewer to filter to successes", lambda: "<b>8</b> of 8" not in d.find_element(
        By.CSS_SELECTOR, ".al-viewer .al-header").get_attribute("innerHTML"), UPDATE_S, lab)

    # -- move the λ slider: type into its readout, as a user can
    def shown():
        return d.find_element(By.CSS_SELECTOR, ".al-advantages [data-advantages]").get_attribute("data-advantages")

    before = shown()
    slider = d.find_element(By.CSS_SELECTOR, ".al-explorer .al-gae-lambda")
    d.execute_script("arguments[0].scrollIntoView({block: 'start'});", slider)
    readout = slider.find_element(By.CSS_SELECTOR, ".widget-readout")
    assert readout.text.strip() == "0.95"
    readout.click()
    readout.send_keys(Keys.CONTROL, "a")
    readout.send_keys("0.20", Keys.ENTER)
    after = _wait(d, "the advantages to change after moving λ", lambda: shown() != before and shown(), UPDATE_S, lab)
    assert slider.find_element(By.CSS_SELECTOR, ".widget-readout").text.strip() == "0.20"
    assert "λ = 0.20" in d.find_element(By.CSS_SELECTOR, ".al-explorer .al-formula").text
    old, new = [float(x) for x in before.split(",")], [float(x) for x in after.split(",")]
    assert len(old) == len(new) and old != new

    # -- the slider's handle also answers the keyboard
    handle = slider.find_element(By.CSS_SELECTOR, ".noUi-handle")
    handle.send_keys(Keys.PAGE_UP)
    _wait(d, "the advantages to change after a key press on the λ handle", lambda: shown() != after, UPDATE_S, lab)

    time.sleep(1.0)  # let the δ/A chart image arrive before the picture
    d.execute_script("arguments[0].scrollIntoView({block: 'start'});",
                     d.find_element(By.CSS_SELECTOR, ".al-viewer"))
    shot = lab["tmp"] / "browser-screenshot.png"
    assert d.save_screenshot(str(shot))
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, SCREENSHOT)
    print(f"screenshot: {SCREENSHOT}", json.dumps({"before": old, "after": new}))
