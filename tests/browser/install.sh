#!/usr/bin/env bash
# What the browser test (tests/browser/test_widgets_browser.py) needs, installed only if missing:
#   - Debian's chromium and chromedriver (/usr/bin/chromium, /usr/bin/chromedriver), via apt-get
#   - selenium, the Python driver, into the venv (PYTHON, default .venv/bin/python)
# Nothing else is downloaded: selenium is pointed at the system chromedriver, so its
# "Selenium Manager" never fetches a browser or a driver.
# If chromium cannot be installed here this script only warns: the test itself then fails
# with a message saying what is missing.
set -euo pipefail

PY="${PYTHON:-.venv/bin/python}"

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "browser: $(/usr/bin/chromium --version 2>/dev/null || echo chromium) already installed"
else
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO=none; fi
    if command -v apt-get >/dev/null && [ "$SUDO" != none ]; then
        echo "browser: installing chromium and chromium-driver with apt-get"
        $SUDO apt-get update -q
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium chromium-driver
    else
        echo "browser: WARNING: /usr/bin/chromium or /usr/bin/chromedriver is missing and cannot be installed" \
             "here (needs apt-get as root); tests/browser/test_widgets_browser.py will fail." >&2
    fi
fi

if "$PY" -c "import selenium" 2>/dev/null; then
    echo "browser: selenium $("$PY" -c 'import selenium; print(selenium.__version__)') already installed"
else
    "$PY" -m pip install -q "selenium>=4.20,<5"
fi
