"""Pages of tests/browser/ that a test builds and drives in Debian's
Chromium: node and npm found, a folder's packages installed from its lock
file when missing (npm ci), its page bundled by its build.mjs (esbuild)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")


def node_and_npm(what: str) -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail(f"node and npm are needed for {what} (make deps)", pytrace=False)
    if not CHROMIUM.exists():
        pytest.fail(f"/usr/bin/chromium is needed for {what} (make deps)", pytrace=False)
    return node, npm


def npm_ready(npm: str, folder: Path, package: str) -> None:
    """npm ci in folder unless its node_modules holds package."""
    if not (folder / "node_modules" / package).is_dir():
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(folder)],
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"npm ci in {folder} failed:\n{r.stdout}\n{r.stderr}"


def build_page(node: str, folder: Path, dist: Path) -> None:
    """folder/build.mjs DIST: the page bundled by esbuild."""
    r = subprocess.run([node, str(folder / "build.mjs"), str(dist)], capture_output=True,
                       text=True, timeout=300, cwd=folder)
    assert r.returncode == 0, f"esbuild failed:\n{r.stdout}\n{r.stderr}"
