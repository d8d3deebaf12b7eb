"""A training step queued on the device whose loss statistics are read one step later.

train.py's loop queues a whole step (every pass's forward, yolo loss, backward, then the update)
without waiting for the device: the loss kernels fill the deltas and leave their statistics where
they ran (_core.Net.queue_yolo_loss). The loop reads them at the top of the next iteration, after
the step's update is queued. On CUDA and OpenCL that read waits only for the loss kernels
(Device::download_marked), so the device runs the step's backward and update while the host
prints, saves and queues the next step; elsewhere it waits for the queued work, once per step
instead of in the middle of it.

In fp16 training the update's overflow check runs on the device, which skips an overflowed step by
itself (_core.Net.queue_update); the loop learns whether the step applied one step later still: it
reads step N's check in the report of step N + 1, after that step's loss statistics, when the
device has finished step N's update anyway, so the read costs no wait (reading it in step N's own
report would wait for N's backward). The loss scale therefore halves one step late: step N + 1 was
queued at the old scale, most likely overflows too and is skipped as well (src-lib/gpu/PRECISION.md).

DARKNET_PY_SYNC_STATS=1 reads every pass's statistics right after its loss is queued, before its
backward, and the update's check right after the update is queued (the device waits for the host
mid-step, as before this module): the same numbers, for comparing the two orders
(src-test/test_train_queued_step.py) and timing them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List

from .phase_hook import phase

SYNC_ENV = "DARKNET_PY_SYNC_STATS"


def read_at_once() -> bool:
    """Whether DARKNET_PY_SYNC_STATS=1 asks for the synchronous order (read before the backward)."""
    return os.environ.get(SYNC_ENV, "") == "1"


@dataclass
class QueuedStep:
    """Step `iteration` (its update queued) and what the loop reports of it once its loss is read."""

    iteration: int
    at_once: bool = False  # read each pass's statistics as soon as its loss is queued (DARKNET_PY_SYNC_STATS=1)
    rate: float = 0.0  # the learning rate of its update
    seconds: float = 0.0  # host seconds spent queuing it (the read's wait is added by the loop)
    load_seconds: float = 0.0  # of those, waiting for the loader
    losses: List[Any] = field(default_factory=list)  # per pass, its _core.QueuedLoss
    update: Any = None  # its _core.QueuedUpdate
    # fp16, known once learn_update() read the update's check:
    loss_scale: float = 1.0  # the loss scale of its backward
    next_loss_scale: float = 1.0  # the network's scale once its check was learnt (lower after a skip)
    skipped: bool = False  # its gradients overflowed and the device skipped the update

    def add_pass(self, queued_loss: Any) -> None:
        """One pass's queued loss (read now in the synchronous order)."""
        if self.at_once:
            phase("stats", f"read {self.iteration}")
            queued_loss.read()
        self.losses.append(queued_loss)

    def add_update(self, queued_update: Any) -> None:
        """The step's queued update (its check read now in the synchronous order)."""
        self.update = queued_update
        if self.at_once:
            self.learn_update()

    def learn_update(self) -> bool:
        """Reads whether the update applied (fp16's overflow check; once, then kept); True if skipped."""
        check = self.update.read()
        self.skipped = not check["applied"]
        self.loss_scale, self.next_loss_scale = check["loss_scale"], check["next_loss_scale"]
        return self.skipped

    def read(self) -> List[List[Dict[str, Any]]]:
        """Per pass, per head, yolo_loss's statistics (the device's copy is read once, then kept)."""
        if not self.at_once:
            phase("stats", f"read {self.iteration}")
        return [q.read() for q in self.losses]

    def loss_sum(self, passes: List[List[Dict[str, Any]]]) -> float:
        """Darknet's get_network_cost (the mean over the heads of their costs) summed over the passes."""
        total = 0.0
        for stats in passes:
            total += sum(s["loss"] for s in stats) / len(stats)
        return total
