#!/usr/bin/env bash
# One idempotent setup for a fresh Linux machine: the locked Python environment (uv, .venv) and the
# system packages the construction pipeline and tests use (Chromium, the Liberation fonts, Tesseract,
# pdflatex for the LaTeX tables).
# Needs no network beyond the package registries. Safe to run again: it only fills in what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# 1. uv, the installer that reads uv.lock (torch 2.13 + torchvision 0.28 from PyPI, colpali-engine 0.3.18).
if ! command -v uv >/dev/null 2>&1; then
  if [ -x "$HOME/.local/bin/uv" ]; then
    export PATH="$HOME/.local/bin:$PATH"
  else
    echo "setup: installing uv from PyPI" >&2
    python3 -m pip install --quiet --user uv 2>/dev/null || python3 -m pip install --quiet uv
    export PATH="$HOME/.local/bin:$PATH"
  fi
fi

# 2. The Python environment, exactly as locked (a no-op in about a second when already in sync).
# Bytecode is compiled at install time (about 30 s once, then under a second): where the environment
# sets PYTHONDONTWRITEBYTECODE (containers, CI images), Python would otherwise recompile every module
# of torch, pandas and Hydra on each start, which costs 1.5-2 s per `python run.py`. The project's own
# sources are compiled too (compileall skips the up-to-date ones).
uv sync --frozen --quiet --compile-bytecode
.venv/bin/python -m compileall -q src >/dev/null || true

# 3. System packages: Chromium renders pages (Playwright drives it), Tesseract makes OCR text.
missing=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || [ -n "${VLDOCIR_CHROMIUM:-}" ] || missing+=(chromium)
command -v tesseract >/dev/null 2>&1 || missing+=(tesseract-ocr)
# pdflatex checks that the LaTeX tables `make tables` writes compile (booktabs, geometry, xcolor).
command -v pdflatex >/dev/null 2>&1 || missing+=(texlive-latex-recommended)
# The generated documents ask for the Liberation fonts; without them Chromium falls back to wider
# fonts, pages break elsewhere and the mini benchmark no longer rebuilds identically.
{ command -v fc-list >/dev/null 2>&1 && fc-list : family | grep -q "Liberation Serif"; } || missing+=(fonts-liberation)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${missing[*]} with apt-get" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing system packages: ${missing[*]}. Install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    echo "(or set VLDOCIR_CHROMIUM to a Chromium binary). Tests that need them are skipped with a reason." >&2
  fi
fi
