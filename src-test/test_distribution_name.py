"""The distribution's name: one the package index does not already hold, and the name every install
hint in the tree uses. (`darknet_py` normalises to `darknet-py`, an unrelated project on PyPI; the
import name and the command stay `darknet_py`.)"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# a list of the index's names, one a line (name, tab, ...), as some machines keep it
PYPI_LIST = Path("/usr/share/package-lists/pypi.tsv")


def normalise(name: str) -> str:
    """PEP 503: runs of -, _ and . are one -, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_name() -> str:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    project = text.split("[project]", 1)[1]
    m = re.search(r'^name\s*=\s*"([^"]+)"', project, re.M)
    assert m, "pyproject.toml's [project] has no name"
    return m.group(1)


def test_project_name_is_not_taken_on_the_index():
    if not PYPI_LIST.is_file():
        pytest.skip(f"no list of the package index's names at {PYPI_LIST}: the name cannot be checked here")
    ours = normalise(project_name())
    with PYPI_LIST.open(encoding="utf-8", errors="replace") as f:
        taken = any(normalise(line.split("\t", 1)[0].strip()) == ours for line in f)
    assert not taken, f"{ours} is already on the package index: pick another distribution name"


def test_import_name_is_not_the_distribution_name():
    assert normalise(project_name()) != normalise("darknet_py")


def _tracked_text_files():
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    for name in out.stdout.splitlines():
        path = REPO / name
        if path.suffix in (".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".sh", ".cpp", ".h") \
                and path.is_file() and path.name != Path(__file__).name:
            yield name, path


def test_no_install_hint_names_the_taken_name():
    bad = []
    for name, path in _tracked_text_files():
        for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if "darknet_py[" in line or ("install" in line and re.search(r"\bdarknet-py\b", line)):
                bad.append(f"{name}:{i}: {line.strip()}")
            elif re.search(r"pip install\s+['\"]?darknet_py\b", line):
                bad.append(f"{name}:{i}: {line.strip()}")
    assert not bad, "install hints that name darknet_py / darknet-py instead of " \
                    f"{project_name()}:\n" + "\n".join(bad)
