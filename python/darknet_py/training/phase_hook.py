"""A test hook that lets a test kill training inside a chosen phase.

Unset (the normal case), `phase()` costs one attribute test. With the environment variable
DARKNET_PY_TEST_PHASES set, every phase point of training is announced on stderr as one line

    darknet_py-phase: <kind> <detail>

and the kinds named in the variable pause there for the given seconds, e.g.
DARKNET_PY_TEST_PHASES="save=0.05,map=0.02" (a bare "1" announces without pausing). Kinds:
  iteration  the start of an iteration and its update step ("begin N", "update N")
  stats      the host reads iteration N's loss statistics from the device ("read N"): once after its
             update is queued, or per pass before it with DARKNET_PY_SYNC_STATS=1 (queued_step.py)
  save       inside an atomic write of a .weights file or chart.png: before the temporary file is
             written, before it is synced, before the rename ("write|sync|rename NAME")
  map        before and after the mAP pass ("begin N", "end N")
  chart      before the chart is drawn ("draw")
A pause widens the phase so that a kill at a random moment after the announcement lands inside
it; src-test/test_train_kill.py uses it to SIGKILL training in every phase.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Dict, Optional

ENV = "DARKNET_PY_TEST_PHASES"
PREFIX = "darknet_py-phase:"
KINDS = ("iteration", "stats", "save", "map", "chart")


def _parse(text: str) -> Optional[Dict[str, float]]:
    text = text.strip()
    if not text:
        return None
    pauses: Dict[str, float] = {}
    for item in text.split(","):
        kind, _, seconds = item.strip().partition("=")
        if kind in KINDS:
            try:
                pauses[kind] = max(0.0, float(seconds or 0))
            except ValueError:
                raise ValueError(f"{ENV}={text!r}: {item!r} is not KIND=SECONDS") from None
        elif kind not in ("1", ""):
            raise ValueError(f"{ENV}={text!r}: unknown phase {kind!r} (one of {', '.join(KINDS)})")
    return pauses


_PAUSES = _parse(os.environ.get(ENV, ""))


def phase(kind: str, detail: object = "") -> None:
    """Announces the phase point and pauses if its kind was asked for (test hook; see above)."""
    if _PAUSES is None:
        return
    sys.stderr.write(f"{PREFIX} {kind} {detail}\n")
    sys.stderr.flush()
    pause = _PAUSES.get(kind, 0.0)
    if pause:
        time.sleep(pause)
