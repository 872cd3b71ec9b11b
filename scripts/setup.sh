#!/usr/bin/env bash
# Install whatever is missing for handeye on Debian or Ubuntu: system packages, the venv, the Python
# packages, and a Chromium the web device can drive. Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRAS=${EXTRAS:-all,test}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
die() { printf '\033[1;31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else SUDO="none"; fi
. /etc/os-release 2>/dev/null || true
distro=${ID:-unknown}

# System packages: fonts (Latin and CJK, so Chinese pages render for the OCR policy), fontconfig,
# python3-venv and python3-tk, the X tools the desktop device and its tests use (Xvfb, xdotool,
# xclip, scrot), adb for Android, the MQTT broker and openssl the fleet's tests use (mosquitto,
# mosquitto-clients for mosquitto_passwd), and on Debian the distribution's Chromium (Ubuntu's is a snap stub).
apt_pkgs=(ca-certificates fontconfig fonts-dejavu-core fonts-noto-cjk python3-venv python3-tk
          xvfb xdotool x11-utils xclip scrot adb mosquitto mosquitto-clients openssl)
[ "$distro" = "debian" ] && apt_pkgs+=(chromium)
missing=()
if command -v dpkg >/dev/null; then
  for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
fi
if [ ${#missing[@]} -gt 0 ]; then
  [ "$SUDO" = "none" ] && die "missing system packages ${missing[*]}; run as root or install sudo"
  say "installing system packages: ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

command -v "$PYTHON" >/dev/null || die "$PYTHON not found; install Python 3.11 or newer (apt-get install python3)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "handeye needs Python >= 3.11, $PYTHON is $("$PYTHON" -V 2>&1); set PYTHON=python3.11 (or newer)"

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV" || die "could not create a venv; install python3-venv"
fi

# Reinstall only when pyproject.toml changed since the last install.
stamp="$VENV/.handeye-installed-$( (cat pyproject.toml; echo "$EXTRAS") | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  say "installing Python packages (handeye[$EXTRAS])"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # torch from PyPI is a multi-GB CUDA build; the tests (and CPU users) need only the CPU build.
  if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
    say "installing torch (CPU build)"
    "$VENV/bin/python" -m pip install -q --retries 0 --timeout 20 "torch==2.13.0" \
        --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple \
      || "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  fi
  "$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
  rm -f "$VENV"/.handeye-installed-*
  touch "$stamp"
fi

# A browser: Playwright's own or the system's (devices/web/browser.py decides the same way at run time).
if ! "$VENV/bin/python" -c 'from devices.web.browser import find_browser
import sys
from playwright.sync_api import sync_playwright
with sync_playwright() as p: path = p.chromium.executable_path
find_browser("", path)' >/dev/null 2>&1; then
  say "no usable Chromium found; installing Playwright's (with its system dependencies)"
  if [ "$SUDO" = "" ]; then "$VENV/bin/python" -m playwright install --with-deps chromium
  else "$VENV/bin/python" -m playwright install chromium && $SUDO "$VENV/bin/python" -m playwright install-deps chromium; fi
fi
say "ready"
