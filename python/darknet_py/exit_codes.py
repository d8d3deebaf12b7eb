"""The exit codes of the `darknet_py` command, in one place: the CLI returns them, `--help` and the
README list them (HELP below is that list), and scripts can test them.

Every failure prints one line on stderr (`darknet_py: error: <file>: <what is wrong>`) before
exiting; files that were skipped are listed once more at the end.
"""
from __future__ import annotations

import sys
from typing import Sequence

PROG = "darknet_py"  # the command's name, which starts every line it prints on stderr

OK = 0
INPUT_ERROR = 1   # an input cannot be used: missing or unreadable file or folder, bad cfg, .data, list, weights
USAGE_ERROR = 2   # the command line itself is wrong (argparse's code)
SELFTEST_MISMATCH = 3  # `selftest`: some op of the device disagrees with the reference
SKIPPED = 4       # finished, but some inputs (images, videos, frames) could not be read and were skipped
OUTPUT_ERROR = 5  # an output could not be written (folder not writable, disk full); nothing half-written is left
RANK_FAILED = 6   # training on several devices: a rank died or hung, and every rank stopped
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)

HELP = f"""\
exit codes:
  {OK}    success
  {INPUT_ERROR}    an input cannot be used (missing or unreadable file or folder, bad cfg, .data, list, weights)
  {USAGE_ERROR}    usage error (unknown option, missing argument)
  {SELFTEST_MISMATCH}    selftest: the device's results differ from the reference
  {SKIPPED}    finished, but some images, videos or video frames could not be read and were skipped
       (each named on stderr when met, and listed again at the end)
  {OUTPUT_ERROR}    an output could not be written (every output is written to a temporary name and
       renamed when complete, so no half-written file is left)
  {RANK_FAILED}    training on several devices: a rank died or hung (the line before names it); all stopped
  {INTERRUPTED}  interrupted (Ctrl-C)"""


class OutputError(OSError):
    """Writing an output failed; the CLI exits with OUTPUT_ERROR. Wraps the OSError that caused it
    with the path that could not be written."""


def report_skips(skipped: Sequence[str]) -> int:
    """Lists the inputs that were skipped (each already reported when met) at the end, one per
    line, and returns the exit code: SKIPPED when there were any, else OK."""
    if not skipped:
        return OK
    print(f"{PROG}: {len(skipped)} input(s) skipped:", file=sys.stderr)
    for line in skipped:
        print(f"  {line}", file=sys.stderr)
    return SKIPPED
