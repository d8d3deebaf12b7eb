"""Training throughput as a user sees it: images per second, the share of the time the training loop
waited for the loader and, on a device that runs the queued step beside the loop, the share it waited
for the device, so that the log says which side limits the run: the data, the device, or the host's
own work per step (train.py)."""
from __future__ import annotations

import os
from typing import Dict

# below this share of waiting, the device (or the CPU engine) is the limit, not the data
WAIT_WORTH_MENTIONING = 0.05
# below this share of waiting for the device, the loop's own work is the limit: the device idles between
# steps (a device-bound loop waits for each step's loss, a few ms of each step)
DEVICE_WAIT_BELOW = 0.02


def default_train_workers(device: str) -> int:
    """--workers' default: on the CPU min(4, cores) (the engine wants the cores); on a GPU
    min(8, cores - 1) (one core stays with the training loop), enough for yolov4-tiny's step."""
    cores = os.cpu_count() or 1
    return max(1, min(4, cores)) if device.startswith("cpu") else max(1, min(8, cores - 1))


def use_processes(loader_kind: str, device: str, workers: int) -> bool:
    """Whether the loader runs in processes: asked for, or "auto" on a GPU with several workers (a GPU
    step is fast enough for the GIL to cap threads; on the CPU the engine wants the cores itself)."""
    if loader_kind not in ("auto", "threads", "processes"):
        raise ValueError(f"loader kind must be auto, threads or processes, got {loader_kind!r}")
    if loader_kind == "auto":
        return workers > 1 and not device.startswith("cpu")
    return loader_kind == "processes"


class ThroughputMeter:
    """Iteration times, data waits and device waits (train.py gives each iteration the wall time from the
    last report to its own, mAP passes left out: the saves, the chart and the log between steps count). The first iteration (the loader starting, the
    device's first-call work) is left out of the totals once there are others. queued_device: the
    device runs a queued step beside the loop (GPU devices, statistics read one step late), so the
    loop's wait for a step's loss is its wait for the device; elsewhere that wait means nothing."""

    def __init__(self, queued_device: bool = False) -> None:
        self.queued_device = queued_device
        self.iterations = 0
        self.first = (0, 0.0, 0.0, 0.0)
        self.totals = (0, 0.0, 0.0, 0.0)  # images, seconds, data wait, device wait

    def add(self, images: int, seconds: float, wait: float, device_wait: float = 0.0) -> None:
        self.iterations += 1
        if self.iterations == 1:
            self.first = (images, seconds, wait, device_wait)
        else:
            self.totals = tuple(a + b for a, b in zip(self.totals, (images, seconds, wait, device_wait)))

    def _totals(self):
        return self.totals if self.iterations > 1 else self.first

    @property
    def images_per_second(self) -> float:
        images, seconds, _, _ = self._totals()
        return images / seconds if seconds > 0 else 0.0

    @property
    def wait_share(self) -> float:
        _, seconds, wait, _ = self._totals()
        return min(1.0, wait / seconds) if seconds > 0 else 0.0

    @property
    def device_wait_share(self) -> float:
        _, seconds, _, wait = self._totals()
        return min(1.0, wait / seconds) if seconds > 0 else 0.0

    def line(self) -> str:
        text = f"{self.images_per_second:.0f} images/s, {100 * self.wait_share:.0f}% waiting for data"
        return text + (f", {100 * self.device_wait_share:.0f}% for the device" if self.queued_device else "")

    def summary(self, loader: str) -> str:
        text = (f"throughput: {self.images_per_second:.1f} images/s over {max(1, self.iterations - 1)} iterations, "
                f"{100 * self.wait_share:.1f}% of the time waiting for data (loader: {loader})")
        if self.queued_device:
            text += f", {100 * self.device_wait_share:.1f}% waiting for the device"
        if self.wait_share >= WAIT_WORTH_MENTIONING:
            text += f"; the loader limits training: raise --workers (this machine has {os.cpu_count()} cores)"
        elif self.queued_device and self.device_wait_share < DEVICE_WAIT_BELOW:
            text += ("; the host's own work per step limits training (queuing the step, and copying each batch "
                     "for the device where it is not page-locked): the device waits for it; loader workers share "
                     "the cores with it")
        else:
            text += "; the training step limits training, not the data"
        return text


def image_cache_summary(stats: Dict[str, int]) -> str:
    """The end-of-training line on the loader's image cache (ImageCache.stats)."""
    draws = stats["hits"] + stats["misses"]
    text = (f"image cache: {stats['stored']} images stored ({stats['used'] / 2 ** 20:.0f} MB of "
            f"{stats['capacity'] / 2 ** 20:.0f}), {100 * stats['hits'] / max(1, draws):.1f}% of {draws} image draws "
            "read from it instead of decoded")
    if stats["used"] + stats["used"] // max(1, stats["stored"]) > stats["capacity"]:
        text += "; it is full: more memory (--cache-images GB) would decode less"
    return text
