#!/bin/sh
# Prints the Python for a virtualenv: the newest >= 3.12 there is (one on
# PATH first, then pyenv's installed versions), else a 3.11 (Debian 12's
# python3) when the minimum allows it.
#   sh tests/find_python.sh        # the test venv: 3.12+ (tests/requirements.txt)
#                                  # or 3.11 (tests/requirements-py311.txt)
#   sh tests/find_python.sh 3.12   # only 3.12+ (the bench venv: anndata 0.13)
min=${1:-3.11}
ok() { "$1" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$2'.split('.'))))" 2>/dev/null; }
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
for want in 3.12 "$min"; do
  for p in python3.13 python3.12 python3 python3.11; do
    if command -v "$p" >/dev/null 2>&1 && ok "$p" "$want" && ok "$p" "$min"; then
      command -v "$p"; exit 0
    fi
  done
  for p in "$pyenv_root"/versions/3.13*/bin/python3 "$pyenv_root"/versions/3.12*/bin/python3 \
           "$pyenv_root"/versions/3.11*/bin/python3; do
    if [ -x "$p" ] && ok "$p" "$want" && ok "$p" "$min"; then
      echo "$p"; exit 0
    fi
  done
done
exit 1
