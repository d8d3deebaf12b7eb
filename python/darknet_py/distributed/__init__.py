"""Data-parallel training on several devices: one process (rank) per device, each training on its
shard of every batch; their gradients summed by the collective layer (the engine's TCP ring, or NCCL
on NVIDIA GPUs) in buckets while the backward runs, so that every rank takes the same step.

    group.py   who this rank is (RANK, WORLD_SIZE, ... from the launcher) and its collective
    store.py   the rendezvous stores (TCP on MASTER_ADDR:MASTER_PORT, or a folder on one host)
    launch.py  `darknet_py train --device cuda:0,1`: the processes, their failures, Ctrl-C
    plan.py    how the cfg's batch, subdivisions and max_batches map onto the ranks
"""
from .group import DEFAULT_TIMEOUT, ProcessGroup, RankInfo, init_process_group
from .plan import BATCH_MODES, RankPlan, plan_ranks, split_devices

__all__ = ["DEFAULT_TIMEOUT", "ProcessGroup", "RankInfo", "init_process_group", "BATCH_MODES", "RankPlan",
           "plan_ranks", "split_devices"]
