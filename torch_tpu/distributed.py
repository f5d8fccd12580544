"""The ``tpu_dist`` backend of torch.distributed (imported by torch_tpu).

Registers ``tpu_dist`` for the ``tpu`` device, so that
``init_process_group("tpu_dist")``, ``init_process_group(device_id=torch.device("tpu", r))``
and ``init_process_group("cpu:gloo,tpu:tpu_dist")`` work. Collectives run in
the device runtime (``runtime/src/collectives``), on the current stream of the
tensors' chip, between the processes of one host through shared memory.

Chip assignment: the backend binds each process to chip ``LOCAL_RANK`` (as
torchrun sets it; else the group rank) modulo the chips it sees, unless
``init_process_group(device_id=...)`` named one. ``TPU_VISIBLE_CHIPS=2,3``
(read at import, before the runtime starts) limits the chips a process sees,
renumbered from 0 like ``CUDA_VISIBLE_DEVICES``.

Between hosts: each rank publishes a host key through the group's store
(hostname, the kernel's boot id and the inode of its network namespace, so
processes in different network namespaces count as different hosts;
``TPU_DIST_HOST_KEY`` overrides it). A group whose ranks all share one key
uses shared memory; otherwise the backend runs every collective through a
``ProcessGroupGloo`` made on the same store (prefix ``tpu_dist/gloo/``) over
host staging buffers (``GLOO_SOCKET_IFNAME`` picks its network interface, as
for Gloo itself). When some host holds several ranks, all_reduce goes
hierarchically: shared memory inside each host, Gloo between the hosts' first
ranks (``TPU_DIST_HIERARCHICAL=0``: everything flat through Gloo).
"""
import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

from torch_tpu import _C

BACKEND_NAME = "tpu_dist"


def visible_chips() -> list:
    """The physical chips this process sees (``TPU_VISIBLE_CHIPS``), in the
    order of their ``tpu:N`` indices."""
    env = os.environ.get("TPU_VISIBLE_CHIPS")
    if env:
        return [int(c) for c in env.split(",") if c.strip()]
    return list(range(_C.device_count()))


def _local_rank(group_rank: int) -> int:
    for var in ("LOCAL_RANK", "TPU_LOCAL_RANK"):
        if os.environ.get(var, "").strip().isdigit():
            return int(os.environ[var])
    return group_rank


def host_key() -> str:
    """What identifies this process's host: ``TPU_DIST_HOST_KEY`` if set,
    else hostname, boot id and network-namespace inode."""
    env = os.environ.get("TPU_DIST_HOST_KEY")
    if env:
        return env
    parts = [socket.gethostname()]
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
    except OSError:
        pass
    try:
        parts.append(str(os.stat("/proc/self/ns/net").st_ino))
    except OSError:
        pass
    return "/".join(parts)


# (rank, size, number of hosts, transport) of every backend this process
# made, in order ("shm" or "gloo"): for tests and diagnostics.
created = []


def _hosts(store, rank: int, size: int) -> list:
    """Every rank's host key, exchanged through the store."""
    if size == 1:
        return [host_key()]
    store.set(f"tpu_dist/host/{rank}", host_key())
    return [store.get(f"tpu_dist/host/{r}").decode() for r in range(size)]


def _create_backend(store, rank: int, size: int, timeout: timedelta):
    count = _C.device_count()
    if count > 1:
        # torchrun: local rank -> chip, unless device_id / set_device chose one
        # (a process group bound to a device sets it before creating us).
        default = dist.is_initialized() and dist.distributed_c10d._get_default_group().bound_device_id
        if not default and _C.current_device() == 0:
            _C.set_device(_local_rank(rank) % count)
    keys = _hosts(store, rank, size)
    order = list(dict.fromkeys(keys))  # hosts, in the order of their first rank
    if len(order) == 1:
        created.append((rank, size, 1, "shm"))
        return _C._dist_create_backend(store, rank, size, timeout)
    inter = dist.ProcessGroupGloo(dist.PrefixStore("tpu_dist/gloo/", store), rank, size, timeout)
    if len(order) == size or os.environ.get("TPU_DIST_HIERARCHICAL", "1") == "0":
        created.append((rank, size, len(order), "gloo"))
        return _C._dist_create_backend(store, rank, size, timeout, inter)
    # Some hosts hold several ranks: all_reduce goes hierarchically (shared
    # memory inside each host, Gloo between the hosts' first ranks).
    host = order.index(keys[rank])
    local = [r for r in range(size) if keys[r] == keys[rank]]
    local_rank = local.index(rank)
    leaders = None
    if local_rank == 0:
        leaders = dist.ProcessGroupGloo(dist.PrefixStore("tpu_dist/leaders/", store), host, len(order),
                                        timeout)
    created.append((rank, size, len(order), "gloo+shm"))
    names = "its ranks 0, 1, ... are group ranks " + ", ".join(map(str, local))
    return _C._dist_create_backend(store, rank, size, timeout, inter, leaders, host, local_rank, len(local),
                                   names)


def _register() -> None:
    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["tpu"])


_register()
