"""The repository describes the project, not the history of its making.

Code, comments, docs, tests and results say what a thing is, does or measured; how the work went (its
numbered steps, tickets and sittings, what a step aimed at) lives in git. This test reads every tracked
text file (`git ls-files`; binary files skipped) and fails with file:line of each phrase that numbers
or points at such a step.

The patterns are built from pieces so that this file does not match them itself.
"""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_STEP = "st" + "ops?"
_TICKET = "iss" + "ues?"
_SITTING = "sess" + "ions?"
_THE_TICKETS = "the " + "iss" + "ue"

PATTERNS = [
    # a numbered step, ticket or sitting: the word, a space, one or two digits
    re.compile(r"\b(%s|%s|%s) [0-9]{1,2}\b" % (_STEP, _TICKET, _SITTING), re.I),
    # a ticket's goal or limit
    re.compile(r"\b%s.s (target|bound)" % _THE_TICKETS, re.I),
    re.compile(r"\b%s['\u2019]s\b" % _THE_TICKETS, re.I),
    # the current or earlier steps
    re.compile(r"\bthis %s\b" % ("st" + "op"), re.I),
    re.compile(r"\bearlier %s\b" % ("st" + "ops"), re.I),
]


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [ROOT / name for name in out.decode("utf-8", "surrogateescape").split("\0") if name]


def text_of(path: Path):
    """The file's text, or None for a binary file, a directory (a submodule) or a missing file."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")


def test_no_history_words():
    files = tracked_files()
    if files is None:
        pytest.skip("not a git checkout (git ls-files failed)")
    hits = []
    for path in files:
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in PATTERNS):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:160]}")
    assert not hits, "history wording in the repository (say what the thing is or does instead):\n" + "\n".join(hits)


def test_patterns_catch_history_words():
    step, ticket = "st" + "op", "iss" + "ue"
    for phrase in (f"since {step} 32", f"({ticket} 19)", f"{ticket}s 3", f"Sess" + "ion 2",
                   f"the {ticket}'s target", f"the {ticket}'s bound", f"the {ticket}'s list", f"this {step}",
                   f"earlier {step}s"):
        assert any(p.search(phrase) for p in PATTERNS), phrase
    for phrase in (f"a {step} sign", f"{step}s on a failure", f"{step} 100 ms later", f"this {step}ped"):
        assert not any(p.search(phrase) for p in PATTERNS), phrase
