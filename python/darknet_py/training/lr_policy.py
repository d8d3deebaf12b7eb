"""Darknet's learning-rate policies (network.c get_current_rate), as a pure function of the iteration.

The iteration is Darknet's get_current_batch: seen / batch, `batch` being the cfg's batch (images per
iteration, subdivisions included). Darknet increments `seen` before it updates, so the first update
uses iteration 1, and the rate printed beside "123:" is the rate that update 123 used.

During burn-in (iteration < burn_in) every policy gives learning_rate * (iteration / burn_in)^power.
After it:

    constant  learning_rate
    step      learning_rate * scale^(iteration // step)
    steps     learning_rate * product of scales[i] for every steps[i] <= iteration
    exp       learning_rate * gamma^iteration
    poly      learning_rate * (1 - iteration / max_batches)^power
    sigmoid   learning_rate / (1 + exp(gamma * (iteration - step)))
    random    learning_rate * U(0, 1)^power  (a new draw on every call)
    sgdr      cosine from learning_rate down to learning_rate_min over cycles of sgdr_cycle
              iterations, each cycle sgdr_mult times longer than the one before
"""
from __future__ import annotations

import math
import random as _random
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional

POLICIES = ("constant", "step", "steps", "exp", "poly", "sigmoid", "random", "sgdr")


@dataclass
class LrSchedule:
    learning_rate: float = 0.001
    policy: str = "constant"
    burn_in: int = 0
    power: float = 4.0
    max_batches: int = 0
    step: int = 1
    scale: float = 1.0
    steps: List[int] = field(default_factory=list)
    scales: List[float] = field(default_factory=list)
    gamma: float = 1.0
    learning_rate_min: float = 0.00001
    sgdr_cycle: int = 0  # 0: max_batches, as Darknet's default
    sgdr_mult: int = 2

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown learning-rate policy {self.policy!r} (known: {', '.join(POLICIES)})")
        if self.policy == "steps" and len(self.steps) != len(self.scales):
            raise ValueError(f"policy=steps needs as many scales ({len(self.scales)}) as steps ({len(self.steps)})")

    @classmethod
    def from_options(cls, o: Mapping[str, Any]) -> "LrSchedule":
        """From Net.net_options() (or any mapping with the [net] keys)."""
        keys = cls.__dataclass_fields__.keys()
        return cls(**{k: (list(o[k]) if isinstance(o[k], (list, tuple)) else o[k]) for k in keys if k in o})

    def rate(self, iteration: int, rng: Optional[_random.Random] = None) -> float:
        """The learning rate Darknet uses for the update of `iteration` (1 for the first)."""
        lr, n = self.learning_rate, iteration
        if n < self.burn_in:
            return lr * math.pow(n / self.burn_in, self.power)
        p = self.policy
        if p == "constant":
            return lr
        if p == "step":
            return lr * math.pow(self.scale, n // self.step)
        if p == "steps":
            for s, k in zip(self.steps, self.scales):
                if s > n:
                    break
                lr *= k
            return lr
        if p == "exp":
            return lr * math.pow(self.gamma, n)
        if p == "poly":
            if not self.max_batches:
                raise ValueError("policy=poly needs max_batches in [net]")
            # clamped: past max_batches Darknet's pow of a negative base would give NaN
            return lr * math.pow(max(0.0, 1.0 - n / self.max_batches), self.power)
        if p == "sigmoid":
            return lr / (1.0 + math.exp(self.gamma * (n - self.step)))
        if p == "random":
            return lr * math.pow((rng or _random).random(), self.power)
        # sgdr: find the cycle that holds n (Darknet: while start + size < n, a cycle ends *at* its size)
        size = self.sgdr_cycle or self.max_batches
        if size <= 0:
            raise ValueError("policy=sgdr needs sgdr_cycle or max_batches in [net]")
        start = 0
        while start + size < n:
            start += size
            size *= self.sgdr_mult
        lo = self.learning_rate_min
        return lo + 0.5 * (lr - lo) * (1.0 + math.cos((n - start) * math.pi / size))
