"""A tiny progress bar for stderr: items per second and ETA, no dependency.

On a terminal it redraws one line with \\r; in a log (not a TTY) it prints a plain line every few
seconds instead, so CI logs stay short. A final summary line is always printed by close().
"""
from __future__ import annotations

import shutil
import sys
import time
from typing import Optional, TextIO


def format_duration(seconds: float) -> str:
    seconds = int(round(max(0.0, seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Counts finished items of `total` (None when unknown, e.g. a stream) and reports on `stream`.

    >>> with Progress(120, "frames") as bar:
    ...     for frame in frames:
    ...         bar.update()
    """

    def __init__(self, total: Optional[int], unit: str = "items", label: str = "",
                 stream: Optional[TextIO] = None, tty: Optional[bool] = None,
                 interval: Optional[float] = None) -> None:
        self.total = total if total and total > 0 else None
        self.unit, self.label = unit, label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        # a terminal is redrawn 10 times a second; a log gets one line every 5 s
        self.interval = interval if interval is not None else (0.1 if self.tty else 5.0)
        self.count = 0
        self.note = ""  # shown after the rate, e.g. "3 dropped" for a live source
        self.start = time.perf_counter()
        self._last = self.start
        self._closed = False

    # ---- figures ---------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    @property
    def rate(self) -> float:
        """Items per second since the start."""
        t = self.elapsed
        return self.count / t if t > 0 else 0.0

    def eta(self) -> Optional[float]:
        if self.total is None or self.count == 0:
            return None
        return (self.total - self.count) / self.rate if self.rate > 0 else None

    # ---- reporting -------------------------------------------------------------------------
    def update(self, n: int = 1) -> None:
        self.count += n
        now = time.perf_counter()
        if now - self._last >= self.interval:
            self._last = now
            self._emit(self.line())

    def line(self, bar_width: Optional[int] = None, width: Optional[int] = None) -> str:
        """The progress line: label, count/total, bar (terminal only), rate and ETA, in at most `width`
        characters (default: the terminal's width less one on a terminal, unlimited in a log). What
        matters comes first: the count, the rate and the ETA stay; the label (a file name) is
        shortened, then dropped, and the bar narrowed, then dropped, to make room."""
        if width is None and self.tty:
            width = shutil.get_terminal_size().columns - 1
        if self.total is not None:
            pct = 100.0 * self.count / self.total
            counts = [f"{self.count}/{self.total} {self.unit} {pct:3.0f}%", f"{self.count}/{self.total} {pct:3.0f}%",
                      f"{self.count}/{self.total}"]
        else:
            counts = [f"{self.count} {self.unit}", f"{self.count}"]
        eta = self.eta()
        tail = [self._rate_text(self.rate)] + ([self.note] if self.note else []) + \
            ([f"ETA {format_duration(eta)}"] if eta is not None else [])
        if width is None:  # a log line: everything
            bar = self._bar(bar_width if bar_width is not None else 40) if self.tty and self.total is not None else None
            return "  ".join(([self.label] if self.label else []) + [counts[0]] + ([bar] if bar else []) + tail)
        # the essentials, made shorter until they fit: the unit and percentage, then the note go first
        essentials = [counts[0]] + tail
        for count in counts:
            essentials = [count] + tail
            if len("  ".join(essentials)) <= width:
                break
        if len("  ".join(essentials)) > width and self.note:
            essentials = [c for c in essentials if c != self.note]
        text = "  ".join(essentials)
        if len(text) >= width:  # no room for more: the essentials alone, one space apart
            return " ".join(essentials)[:width]
        room = width - len(text)
        # the bar (terminal only) next, 10 to 40 wide, leaving up to 24 characters for the label (a file
        # name), which gets what is left
        bar = None
        if self.tty and self.total is not None:
            want = bar_width if bar_width is not None else 40
            keep = min(len(self.label) + 2, 24) if self.label else 0
            w = min(want, room - 4 - keep)
            if w < 10:
                w = min(want, 10, room - 4)
            if w >= 10:
                bar = self._bar(w)
                room -= len(bar) + 2
        parts = [essentials[0]] + ([bar] if bar else []) + essentials[1:]
        label = self._fit_label(room - 2)
        return "  ".join(([label] if label else []) + parts)

    def _bar(self, width: int) -> str:
        filled = int(width * min(self.count, self.total or 0) / self.total) if self.total else 0
        return "|" + "#" * filled + "." * (width - filled) + "|"

    def _fit_label(self, room: int) -> str:
        """The label in `room` characters: whole, else its end behind "...", else nothing."""
        if not self.label or room <= 0:
            return ""
        if len(self.label) <= room:
            return self.label
        return "..." + self.label[-(room - 3):] if room >= 8 else ""

    def summary(self) -> str:
        head = f"{self.label}  " if self.label else ""
        note = f", {self.note}" if self.note else ""
        return f"{head}{self.count} {self.unit} in {self.elapsed:.1f} s ({self._rate_text(self.rate)}{note})"

    def _rate_text(self, rate: float) -> str:
        return f"{rate:.1f} FPS" if self.unit == "frames" else f"{rate:.1f} {self.unit}/s"

    def _emit(self, text: str) -> None:
        if self.tty:
            cols = shutil.get_terminal_size().columns
            self.stream.write("\r" + text[: cols - 1].ljust(cols - 1))  # line() already fits; a resize may not
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """Prints a line of its own (a warning, say) without garbling the bar."""
        if self.tty:
            self.stream.write("\r" + " " * (shutil.get_terminal_size().columns - 1) + "\r")
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Ends the bar with the summary line (once)."""
        if self._closed:
            return
        self._closed = True
        if self.tty:
            self.stream.write("\r" + " " * (shutil.get_terminal_size().columns - 1) + "\r")
        self.stream.write(self.summary() + "\n")
        self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
