"""How a cfg's [net] batch and subdivisions map onto N ranks, and which devices they train on.

batch mode "split" (the default: the same training curve as one device, no cfg edits): the cfg's
`batch` is the images of one step over all ranks; each rank trains batch / N of them. Each pass
keeps the cfg's batch / subdivisions images when subdivisions divides by N (batchnorm then sees
what it sees on one device), else each rank runs all `subdivisions` passes of batch / (N x
subdivisions). The gradients are summed and the step divides by `batch`, as on one device;
learning_rate, burn_in and max_batches mean what they mean on one device.

batch mode "per-gpu" (Darknet's -gpus): every rank trains the cfg's whole batch; a step sees
batch x N images (the gradients summed and divided by batch x N, as Darknet averages the GPUs'
weights); max_batches still counts steps, so training covers N times the images. Darknet's
README then says to divide learning_rate by N (and raise burn_in): do it in the cfg if you want it.

In both modes `seen` advances by the cfg's batch per step, so `_last.weights` resumes at the same
iteration with any number of ranks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

BATCH_MODES = ("split", "per-gpu")


@dataclass(frozen=True)
class RankPlan:
    passes: int        # forward/backward passes per step on each rank (its subdivisions)
    mini: int          # images per pass
    update_batch: int  # the images whose summed gradients one step divides by
    step_images: int   # images of one step over all ranks


def plan_ranks(batch: int, subdivisions: int, ranks: int, mode: str = "split") -> RankPlan:
    if mode not in BATCH_MODES:
        raise ValueError(f"batch mode must be one of {', '.join(BATCH_MODES)}, not {mode!r}")
    if mode == "per-gpu" or ranks == 1:
        return RankPlan(subdivisions, batch // subdivisions, batch * ranks, batch * ranks)
    if batch % ranks:
        raise ValueError(f"[net] batch={batch} does not divide among {ranks} devices: make batch a multiple of "
                         f"{ranks}, or pass --batch-mode per-gpu (every device trains the whole batch)")
    if subdivisions % ranks == 0:
        return RankPlan(subdivisions // ranks, batch // subdivisions, batch, batch)
    local = batch // ranks
    if local % subdivisions:
        raise ValueError(f"[net] batch={batch}, subdivisions={subdivisions}: {ranks} devices get {local} images each, "
                         f"which subdivisions={subdivisions} does not divide: make subdivisions a multiple of {ranks} "
                         f"or a divisor of {local}")
    return RankPlan(subdivisions, local // subdivisions, batch, batch)


def check_cfg_splits(cfg: str, ranks: int, mode: str) -> None:
    """Before any rank starts: plan_ranks' error for the cfg's [net] batch and subdivisions, with the
    cfg's file and line. (A cfg these lines cannot read is left to the ranks' own parser.)"""
    from ..data.augment import _read_cfg_sections  # the light [section] key=value reader

    try:
        net = next(opts for name, _, opts in _read_cfg_sections(cfg) if name in ("net", "network"))
        batch, subdivisions = (int(net[k][0]) if k in net else 1 for k in ("batch", "subdivisions"))
    except (OSError, StopIteration, ValueError):
        return
    try:
        plan_ranks(batch, max(1, subdivisions), ranks, mode)
    except ValueError as e:
        line = net.get("batch", ("", 0))[1]
        raise ValueError(f"{cfg}:{line}: {e}") from None


def split_devices(device: str) -> List[str]:
    """'cuda:0,1,2' -> ['cuda:0', 'cuda:1', 'cuda:2']; 'cpu,cpu' -> two CPU ranks; 'cuda:0' -> one."""
    out: List[str] = []
    kind = ""
    for part in [p.strip() for p in device.split(",")]:
        if not part:
            raise ValueError(f"--device {device!r}: an empty entry in the list")
        if part.isdigit():
            if not kind:
                raise ValueError(f"--device {device!r}: a bare index needs a kind before it (cuda:0,1)")
            out.append(f"{kind}:{part}")
        else:
            kind = part.split(":", 1)[0]
            out.append(part)
    return out
