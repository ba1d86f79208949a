#!/bin/sh
# Prints a Python >= 3.12 for the test virtualenv (anndata 0.13 needs it):
# one on PATH first, then pyenv's installed versions.
for p in python3.13 python3.12 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
    command -v "$p"; exit 0
  fi
done
for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3; do
  if [ -x "$p" ] && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
    echo "$p"; exit 0
  fi
done
exit 1
