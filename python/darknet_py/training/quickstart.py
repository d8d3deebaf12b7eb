"""`darknet_py train CFG` with no dataset: a short run on synthetic shapes that shows training work.

The dataset is `darknet_py synth`'s coloured shapes (synth.generate), made once into the per-user
cache folder (`$DARKNET_PY_CACHE_DIR`, else `$XDG_CACHE_HOME/darknet_py`, `~/.cache/darknet_py`,
`~/Library/Caches/darknet_py` on macOS: where the selftest report goes) and reused after. The cfg
is trained as given except for what makes it a few-minute demonstration: a smaller input and
batch and a schedule scaled to the iterations (burn_in and steps), then, as for any dataset, its
classes (4, the shapes: train.fit_cfg_to_classes).
"""
from __future__ import annotations

import os
from typing import Callable, Dict, Optional

IMAGES = 600
CLASSES = 4
SIZE = 256  # the images' and the network's size: small enough for a laptop CPU
BATCH = 16
SEED = 1


def cache_dir() -> str:
    """The per-user cache folder the engine uses (its selftest reports live there too)."""
    from .. import _core

    return os.path.dirname(_core.selftest_results_path("cpu"))


def dataset(say: Callable[[str], None], folder: Optional[str] = None) -> str:
    """The .data file of the quick-start dataset, generated into `folder` (default: the cache)
    unless it is already complete there (synth writes its .data file last)."""
    from ..data.synth import DATA_NAME, generate

    folder = folder or os.path.join(cache_dir(), f"quickstart-shapes-{IMAGES}-{SIZE}-seed{SEED}")
    data = os.path.join(folder, DATA_NAME)
    if os.path.isfile(data):
        say(f"synthetic dataset: {data} (cached)")
        return data
    say(f"making the synthetic dataset once: {IMAGES} images of {SIZE}x{SIZE} in {folder}")
    return generate(folder, IMAGES, CLASSES, (SIZE, SIZE), SEED, valid_fraction=0.1, progress=True)


def net_options(max_batches: int) -> Dict[str, object]:
    """The [net] options of the demonstration schedule: burn-in over the first tenth, the rate
    divided by 10 at 80% and 90% (Darknet's usual steps)."""
    return {"batch": BATCH, "subdivisions": 1, "width": SIZE, "height": SIZE,
            "max_batches": max_batches, "burn_in": max(1, max_batches // 10),
            "policy": "steps", "steps": f"{max(1, max_batches * 8 // 10)},{max(1, max_batches * 9 // 10)}",
            "scales": ".1,.1"}


def quickstart_cfg(cfg: str, folder: str, max_batches: int, say: Callable[[str], None]) -> str:
    """A copy of `cfg` in `folder` with the demonstration's [net] options. Its classes are left to
    train's adaptation, which then also takes --weights made for `cfg` (all but the heads)."""
    from ..model_files.cfg_edit import CfgEditor, set_net_options

    ed = CfgEditor.from_file(cfg)
    set_net_options(ed, net_options(max_batches))
    os.makedirs(folder, exist_ok=True)
    path = ed.write(os.path.join(folder, f"{os.path.splitext(os.path.basename(cfg))[0]}-quickstart.cfg"))
    say(f"cfg: {path}, a copy of {cfg} with these lines changed:")
    for change in ed.changes:
        say(f"  {change}")
    return path
