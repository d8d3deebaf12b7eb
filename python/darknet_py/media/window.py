"""`detect --show`: annotated frames in an OpenCV window as they are made; `q` or Esc quits.

Where no window can open (no display, a headless OpenCV build) it says so in one line and the
run goes on writing its outputs. The display is checked before OpenCV is asked: OpenCV's Qt
backend aborts the whole process when $DISPLAY names an X server it cannot reach.
"""
from __future__ import annotations

import os
import socket
import sys
from typing import Callable, Optional

import numpy as np

QUIT_KEYS = (ord("q"), ord("Q"), 27)  # Esc


def _x_server_reachable(display: str) -> bool:
    """Whether the X server that `display` (":0", "host:1.0", "unix:0") names accepts a connection."""
    host, _, rest = display.rpartition(":")
    try:
        number = int(rest.split(".")[0])
    except ValueError:
        return False
    try:
        if host in ("", "unix") or host.startswith("/"):
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2)
                s.connect(f"/tmp/.X11-unix/X{number}")
        else:
            socket.create_connection((host, 6000 + number), timeout=2).close()
        return True
    except OSError:
        return False


def no_display_reason() -> Optional[str]:
    """Why no window can be shown here, or None when one can (as far as can be told without OpenCV)."""
    if not sys.platform.startswith("linux"):
        return None  # macOS and Windows always have their window system
    display = os.environ.get("DISPLAY", "")
    if display:
        return None if _x_server_reachable(display) else f"the X display {display!r} cannot be reached"
    if os.environ.get("WAYLAND_DISPLAY"):
        return None
    return "no display ($DISPLAY is not set)"


class Window:
    """An OpenCV window titled `title`. `ok` is False when none could open (the reason was
    printed through `say`); show() then does nothing."""

    def __init__(self, title: str, say: Callable[[str], None]) -> None:
        self.title, self.ok = title, False
        reason = no_display_reason()
        if reason is None:
            import cv2

            try:
                cv2.namedWindow(title, cv2.WINDOW_NORMAL | cv2.WINDOW_KEEPRATIO)
                self.ok = True
            except cv2.error as e:  # e.g. opencv-python-headless: "The function is not implemented"
                reason = f"OpenCV cannot open a window ({str(e).strip().splitlines()[-1].strip()})"
        if not self.ok:
            say(f"--show: {reason}; going on without a window")

    def show(self, frame: np.ndarray, wait_for_key: bool = False) -> bool:
        """Displays the frame; with wait_for_key, until a key is pressed. False when the user asked
        to stop: `q` or Esc, or the window was closed."""
        if not self.ok:
            return True
        import cv2

        cv2.imshow(self.title, frame)
        while True:
            # short waits, so that closing the window with the mouse is noticed while waiting for a key
            key = cv2.waitKey(50 if wait_for_key else 1) & 0xFF
            if key in QUIT_KEYS or not self._visible():
                return False
            if not wait_for_key or key != 0xFF:
                return True

    def _visible(self) -> bool:
        import cv2

        try:
            return cv2.getWindowProperty(self.title, cv2.WND_PROP_VISIBLE) >= 1
        except cv2.error:  # closed by the user: the window no longer exists
            return False

    def close(self) -> None:
        if self.ok:
            import cv2

            cv2.destroyWindow(self.title)
            cv2.waitKey(1)  # lets the window system process the close
            self.ok = False
