"""One rank's place in a data-parallel training: who it is (from the launcher's environment), and
its collective, built after a rendezvous.

Environment (torchrun's names; Slurm's srun variables stand in when they are absent):
  RANK (SLURM_PROCID)          this process's rank, 0 .. WORLD_SIZE - 1
  WORLD_SIZE (SLURM_NTASKS)    the number of processes (one per device)
  LOCAL_RANK (SLURM_LOCALID)   its index on this host: it trains on the LOCAL_RANK-th device given
  MASTER_ADDR, MASTER_PORT     rank 0's host and the port of its rendezvous store (TCP)
  DARKNET_PY_RENDEZVOUS_DIR    instead of MASTER_*: a folder (one host; `darknet_py train` sets it)
"""
from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from .store import FileStore, TcpStore

DEFAULT_TIMEOUT = 600.0  # seconds a rank waits for the others (rank 0's mAP runs while they wait)


def _int_env(env: Mapping[str, str], *names: str) -> Optional[int]:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)  # type: ignore[arg-type]
            except ValueError:
                raise ValueError(f"environment variable {name}={value!r} is not an integer") from None
    return None


@dataclass
class RankInfo:
    rank: int
    world_size: int
    local_rank: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Optional["RankInfo"]:
        """The launcher's variables, or None when this process was not started as one of several."""
        size = _int_env(env, "WORLD_SIZE", "SLURM_NTASKS")
        rank = _int_env(env, "RANK", "SLURM_PROCID")
        if size is None or rank is None:
            return None
        local = _int_env(env, "LOCAL_RANK", "SLURM_LOCALID")
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"RANK={rank} and WORLD_SIZE={size}: need 0 <= RANK < WORLD_SIZE")
        return cls(rank, size, rank if local is None else local)


class ProcessGroup:
    """This rank's collective (darknet_py._core.Collective: all_reduce, broadcast_params) and its place."""

    def __init__(self, info: RankInfo, collective: Any) -> None:
        self.rank, self.size, self.local_rank = info.rank, info.world_size, info.local_rank
        self.collective = collective

    def all_reduce(self, values):
        return self.collective.all_reduce(values)


def _open_store(info: RankInfo, env: Mapping[str, str], timeout: float):
    folder = env.get("DARKNET_PY_RENDEZVOUS_DIR")
    if folder:
        return FileStore(folder)
    addr, port = env.get("MASTER_ADDR"), _int_env(env, "MASTER_PORT")
    if not addr or port is None:
        raise ValueError(f"rank {info.rank} of {info.world_size}: set MASTER_ADDR and MASTER_PORT (rank 0's host "
                         "and a free port) for the rendezvous")
    if env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        port += 1  # torchrun's own store already listens on MASTER_PORT
    return TcpStore(addr, port, serve=info.rank == 0, timeout=timeout)


def _ring(info: RankInfo, store, timeout: float):
    """Sockets to the next rank (send) and from the previous one (receive), addresses through the store."""
    if info.world_size == 1:
        return -1, -1
    here = store.local_address() if isinstance(store, TcpStore) else "127.0.0.1"
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("", 0))
    listener.listen(1)
    store.set(f"ring/{info.rank}", f"{here}:{listener.getsockname()[1]}".encode())
    nxt = (info.rank + 1) % info.world_size
    host, port = store.get(f"ring/{nxt}", timeout).decode().rsplit(":", 1)
    send = socket.create_connection((host, int(port)), timeout=timeout)
    send.sendall(struct.pack("<i", info.rank))
    listener.settimeout(timeout)
    try:
        recv, _ = listener.accept()
    except socket.timeout:
        raise RuntimeError(f"rank {info.rank}: rank {(info.rank - 1) % info.world_size} did not connect within "
                           f"{timeout:g} s") from None
    listener.close()
    recv.settimeout(timeout)
    (prev,) = struct.unpack("<i", recv.recv(4, socket.MSG_WAITALL))
    if prev != (info.rank - 1) % info.world_size:
        raise RuntimeError(f"rank {info.rank}: expected rank {(info.rank - 1) % info.world_size} to connect, got {prev}")
    for s in (send, recv):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(None)
    return send.detach(), recv.detach()


def init_process_group(info: RankInfo, device: str, *, collective: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                       env: Optional[Dict[str, str]] = None) -> ProcessGroup:
    """Rendezvous, then this rank's collective: NCCL for cuda:N devices when NCCL opens (or
    collective="nccl", which then fails if it cannot), else the TCP ring ("tcp")."""
    from .. import _core

    env = dict(os.environ if env is None else env)
    if collective not in ("auto", "nccl", "tcp"):
        raise ValueError(f"collective must be auto, nccl or tcp, not {collective!r}")
    use_nccl = collective == "nccl"
    if collective == "auto" and device.startswith("cuda:") and info.world_size > 1:
        use_nccl = bool(_core.nccl_status()[0])
    store = _open_store(info, env, timeout)
    if use_nccl:
        if info.rank == 0:
            store.set("nccl_id", _core.nccl_unique_id())
        comm = _core.nccl_collective(info.rank, info.world_size, store.get("nccl_id", timeout), device, timeout)
    else:
        send, recv = _ring(info, store, timeout)
        comm = _core.tcp_collective(info.rank, info.world_size, send, recv, timeout)
    return ProcessGroup(info, comm)
