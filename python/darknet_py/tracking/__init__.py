"""Multi-object tracking over detections (`detect --track`, Network.track) and counting tracked
objects across lines and zones (`--count-line`, `--count-zone`). See docs/video_tracking.md."""
from .tracker import DEFAULT_TRACKER, INSTALL_HINT, TRACKERS, Tracker, TrackerMissing
from .counting import LineCounter, ZoneCounter, parse_points

__all__ = ["DEFAULT_TRACKER", "INSTALL_HINT", "TRACKERS", "Tracker", "TrackerMissing", "LineCounter",
           "ZoneCounter", "parse_points"]
