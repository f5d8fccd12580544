"""The tpu_dist backend of torch.distributed: each test starts its own ranks
(tests/dist_worker.py, one process each, joined through a FileStore) and
ends by itself: the ranks' collectives have timeouts and the test kills
them after its own."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import torch_tpu

WORKER = os.path.join(os.path.dirname(__file__), "dist_worker.py")

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")


def run_ranks(tmp_path, scenario, world, timeout=300, env_per_rank=None, **env):
    store = str(tmp_path / "store")
    procs, results = [], []
    for r in range(world):
        e = dict(os.environ)
        e.update({k: str(v) for k, v in env.items()})
        if env_per_rank:
            e.update({k: str(v) for k, v in env_per_rank(r).items()})
        e.setdefault("TORCH_TPU_NUM_THREADS", "1")
        res = str(tmp_path / f"result{r}.json")
        results.append(res)
        procs.append(subprocess.Popen([sys.executable, WORKER, scenario, str(r), str(world), store, res],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    got = []
    for r, res in enumerate(results):
        assert os.path.exists(res), f"rank {r} wrote no result:\n{outs[r][-4000:] if r < len(outs) else ''}"
        with open(res) as f:
            got.append(json.load(f))
    return got


def assert_ok(results):
    for r, res in enumerate(results):
        assert not res["failures"], f"rank {r}: {res['failures'][:10]}"


def test_backend_is_registered():
    assert "tpu_dist" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map.get("tpu") == "tpu_dist"
    assert dist.Backend.backend_capability["tpu_dist"] == ["tpu"]


@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_and_dtype_against_gloo(tmp_path, world):
    results = run_ranks(tmp_path, "collectives", world)
    assert_ok(results)
    assert results[0]["notes"]["fallbacks"] == {}


def test_coalesced_collectives_run_as_one(tmp_path):
    results = run_ranks(tmp_path, "coalesced", 2, timeout=240)
    assert_ok(results)
    assert results[0]["notes"]["checks"] > 50


def test_ddp_matches_single_process_training(tmp_path):
    results = run_ranks(tmp_path, "ddp", 2)
    assert_ok(results)
    losses = results[0]["notes"]["losses"]
    assert len(losses) == 20 and losses[-1] < losses[0]  # it trained


def test_missing_rank_times_out_naming_the_collective(tmp_path):
    results = run_ranks(tmp_path, "timeout", 2, DIST_TEST_TIMEOUT=1.5, DIST_TEST_BACKEND="tpu_dist")
    assert_ok(results)
    msg = results[0]["notes"]["message"]
    assert "all_reduce" in msg and "rank 1 did not arrive" in msg, msg
    assert results[0]["notes"]["seconds"] < 30


def test_missing_rank_times_out_between_hosts(tmp_path):
    results = run_ranks(tmp_path, "timeout", 2, DIST_TEST_TIMEOUT=1.5, DIST_TEST_BACKEND="tpu_dist",
                        env_per_rank=lambda r: {"TPU_DIST_HOST_KEY": f"h{r}"})
    assert_ok(results)
    msg = results[0]["notes"]["message"]
    assert "all_reduce (collective #2, Gloo between hosts)" in msg, msg
    assert "rank 1 did not arrive (last seen starting collective #1)" in msg, msg
    assert results[0]["notes"]["seconds"] < 30


@pytest.mark.parametrize("world,hosts", [(2, 1), (2, 2), (4, 2)])
def test_dead_rank_fails_its_peers(tmp_path, world, hosts):
    # Rank 1 exits after a barrier; the others' all_reduce fails long before
    # the 60 s timeout. One host: the peer's wait notices the dead process
    # (a zombie: the parent waits for rank 0 first) and names it. Two hosts
    # (Gloo): the closed connection fails it. Four ranks on two hosts
    # (hierarchical): rank 0's Gloo part fails and aborts its host's
    # communicator (rank 2 fails too); rank 3 notices its leader exited.
    store = tmp_path / "store"
    env = dict(os.environ, DIST_TEST_TIMEOUT="60", DIST_TEST_BACKEND="tpu_dist")
    procs = [subprocess.Popen([sys.executable, WORKER, "dies", str(r), str(world), str(store),
                               str(tmp_path / f"result{r}.json")],
                              env=dict(env, TPU_DIST_HOST_KEY=f"h{r % hosts}"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for r in range(world)]
    try:
        for p in procs:
            p.wait(timeout=300)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    msgs = {}
    for r in range(world):
        if r == 1:
            continue
        with open(tmp_path / f"result{r}.json") as f:
            res = json.load(f)
        assert not res["failures"], res
        assert res["notes"]["seconds"] < 30, res
        msgs[r] = res["notes"]["message"]
    if hosts == 1:
        assert "rank 1 did not arrive: its process (pid" in msgs[0] and "exited" in msgs[0], msgs
    else:
        assert "Gloo between hosts" in msgs[0], msgs
    if world == 2 and hosts == 2:  # (the flat Gloo group names who did not arrive)
        assert "rank 1 did not arrive" in msgs[0], msgs
    if world == 4:
        assert "Gloo between hosts" in msgs[2], msgs  # its leader's failure
        # rank 1 is its host's rank 0
        assert "all_reduce (hierarchical #" in msgs[3] and "on rank 3 of 4" in msgs[3], msgs
        assert "rank 0 did not arrive: its process" in msgs[3], msgs


def test_device_id_binds_rank_to_chip(tmp_path):
    results = run_ranks(tmp_path, "init_styles", 2, TORCH_TPU_NUM_CHIPS=2)
    assert_ok(results)


def test_plain_backend_string_and_visible_chips(tmp_path):
    # init_process_group("tpu_dist"), each process seeing one chip of its own
    results = run_ranks(tmp_path, "ddp", 2, DIST_TEST_BACKEND="tpu_dist",
                        env_per_rank=lambda r: {"TPU_VISIBLE_CHIPS": str(r)})
    assert_ok(results)


def test_visible_chips_renumbers(tmp_path):
    code = ("import torch, torch_tpu; print(torch.tpu.device_count(), "
            "torch_tpu.distributed.visible_chips())")
    env = dict(os.environ, TPU_VISIBLE_CHIPS="2,5", TORCH_TPU_NUM_CHIPS="8")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.stdout.split("\n")[0].strip() == "2 [2, 5]", out.stdout + out.stderr
    env["TPU_VISIBLE_CHIPS"] = "1,1"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode != 0 and "TPU_VISIBLE_CHIPS" in out.stderr


def test_fsdp2_fully_shard_matches_single_process(tmp_path):
    results = run_ranks(tmp_path, "fsdp2", 2, DIST_TEST_BACKEND="tpu_dist")
    assert_ok(results)
    assert results[0]["notes"]["checks"] == 5


def test_dtensor_tensor_parallel_linear(tmp_path):
    results = run_ranks(tmp_path, "dtensor", 2, DIST_TEST_BACKEND="tpu_dist")
    assert_ok(results)
    assert results[0]["notes"]["checks"] == 2


def test_functional_collectives_single_rank():
    # torch.ops._c10d_functional (DTensor, FSDP2, torch.compile's collectives)
    # go through the backend's coalesced and single-tensor entry points.
    code = """
import torch, torch_tpu, torch.distributed as dist
dist.init_process_group("tpu_dist", store=dist.HashStore(), rank=0, world_size=1)
x = torch.arange(4, dtype=torch.float32, device="tpu")
name = dist.group.WORLD.group_name
f = torch.ops._c10d_functional
outs = [f.all_reduce(x, "sum", name), f.all_gather_into_tensor(x, 1, name),
        f.reduce_scatter_tensor(x, "sum", 1, name), f.all_to_all_single(x, [4], [4], name),
        f.broadcast(x, 0, name)]
outs += f.all_gather_into_tensor_coalesced([x, x], 1, name)
for o in outs:
    f.wait_tensor(o)
    assert torch.equal(o.cpu(), torch.arange(4.0)), o
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("ok"), out.stdout + out.stderr[-3000:]


def test_exit_with_collectives_in_flight():
    # Work dropped by the user is released off the Python thread; at exit
    # that must neither abort ("terminate called without an active
    # exception": a thread ended by CPython's finalization inside a tensor's
    # destructor) nor hang. Before the fix, 8 of 10 such runs aborted.
    code = """
import torch, torch_tpu, torch.distributed as dist
dist.init_process_group("tpu_dist", store=dist.HashStore(), rank=0, world_size=1)
for _ in range(3000):
    t = torch.ones(4096, device="tpu")
    dist.all_reduce(t, async_op=True)
    del t
print("issued")
"""
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == "issued", (out.returncode, out.stderr[-3000:])


# ---- between hosts -----------------------------------------------------------------------------

def test_host_key_tells_hosts_apart(monkeypatch):
    from torch_tpu import distributed as tdist
    monkeypatch.delenv("TPU_DIST_HOST_KEY", raising=False)
    key = tdist.host_key()
    assert str(os.stat("/proc/self/ns/net").st_ino) in key
    monkeypatch.setenv("TPU_DIST_HOST_KEY", "elsewhere")
    assert tdist.host_key() == "elsewhere"


def test_every_collective_through_gloo_between_hosts(tmp_path):
    # Two "hosts" by host key: every collective and dtype runs through Gloo
    # over staged host buffers, against Gloo on CPU.
    results = run_ranks(tmp_path, "collectives", 2, env_per_rank=lambda r: {"TPU_DIST_HOST_KEY": f"h{r}"})
    assert_ok(results)
    assert [c[3] for c in results[0]["notes"]["created"]] == ["gloo"]
    assert results[0]["notes"]["fallbacks"] == {}


def test_ddp_between_hosts(tmp_path):
    results = run_ranks(tmp_path, "ddp", 2, env_per_rank=lambda r: {"TPU_DIST_HOST_KEY": f"h{r}"})
    assert_ok(results)


@pytest.mark.parametrize("transport", ["gloo+shm", "gloo"])
def test_mixed_hosts_with_four_ranks(tmp_path, transport):
    # ranks 0, 2 on one host and 1, 3 on another: all_reduce hierarchically
    # (shared memory inside a host, Gloo between ranks 0 and 1), the rest
    # through Gloo; or everything through Gloo (TPU_DIST_HIERARCHICAL=0)
    results = run_ranks(tmp_path, "hosts", 4, DIST_TEST_BACKEND="tpu_dist", DIST_TEST_TRANSPORT=transport,
                        TPU_DIST_HIERARCHICAL=int(transport == "gloo+shm"),
                        env_per_rank=lambda r: {"TPU_DIST_HOST_KEY": f"h{r % 2}"})
    assert_ok(results)
    assert results[0]["notes"]["created"][-1][2:] == [2, transport]


def test_ddp_between_hosts_hierarchical(tmp_path):
    # DDP's gradient all_reduce (AVG) through the hierarchical path
    results = run_ranks(tmp_path, "ddp", 4, env_per_rank=lambda r: {"TPU_DIST_HOST_KEY": f"h{r // 2}"})
    assert_ok(results)
    assert results[0]["notes"]["created"][-1][3] == "gloo+shm"


def _sh(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30)


def test_two_hosts_in_network_namespaces(tmp_path):
    """Two "hosts": network namespaces joined by a veth pair, one rank in
    each, the TCPStore on rank 0's address; nothing else is shared between
    them but the file system."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tag = f"td{os.getpid() % 100000}"
    ns = [f"{tag}n0", f"{tag}n1"]
    veth = [f"{tag}v0", f"{tag}v1"]
    net = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
    ips = [f"{net}.1", f"{net}.2"]
    procs = []
    try:
        r = _sh("ip", "netns", "add", ns[0])
        if r.returncode != 0:
            pytest.skip(f"the kernel refuses network namespaces: {r.stderr.strip()}")
        steps = [("ip", "netns", "add", ns[1]),
                 ("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])]
        for i in range(2):
            steps += [("ip", "link", "set", veth[i], "netns", ns[i]),
                      ("ip", "-n", ns[i], "addr", "add", f"{ips[i]}/24", "dev", veth[i]),
                      ("ip", "-n", ns[i], "link", "set", veth[i], "up"),
                      ("ip", "-n", ns[i], "link", "set", "lo", "up")]
        for step in steps:
            r = _sh(*step)
            if r.returncode != 0:
                pytest.skip(f"the kernel refuses {' '.join(step)}: {r.stderr.strip()}")
        results = []
        for rank in range(2):
            env = dict(os.environ, DIST_TEST_TCP_STORE=f"{ips[0]}:29511", GLOO_SOCKET_IFNAME=veth[rank],
                       DIST_TEST_BACKEND="tpu_dist", DIST_TEST_TIMEOUT="60", TORCH_TPU_NUM_THREADS="1")
            env.pop("TPU_DIST_HOST_KEY", None)
            res = str(tmp_path / f"result{rank}.json")
            results.append(res)
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns[rank], sys.executable, WORKER, "hosts",
                                           str(rank), "2", "-", res],
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
        outs = [p.communicate(timeout=240)[0] for p in procs]
        got = []
        for rank, res in enumerate(results):
            assert os.path.exists(res), f"rank {rank} wrote no result:\n{outs[rank][-4000:]}"
            with open(res) as f:
                got.append(json.load(f))
        assert_ok(got)
        for rank in range(2):
            assert got[rank]["notes"]["created"][-1][2:] == [2, "gloo"], got[rank]["notes"]
            assert got[rank]["notes"]["checks"] >= 20
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for n in ns:
            _sh("ip", "netns", "del", n)  # takes the veth pair with it
        assert not any(n in _sh("ip", "netns", "list").stdout for n in ns)


@pytest.mark.parametrize("reload_world", [1, 4])
def test_checkpoint_saved_sharded_reloads_with_another_world_size(tmp_path, reload_world):
    # torch.distributed.checkpoint: FSDP2 model + Adam state saved by 2 ranks,
    # reloaded by 1 (plain model) or 4 (resharded) and compared with the full values
    ckpt = tmp_path / "ckpt"
    results = run_ranks(tmp_path / "save", "dcp_save", 2, DIST_TEST_BACKEND="tpu_dist",
                        DIST_TEST_CKPT=ckpt) if (tmp_path / "save").mkdir() is None else None
    assert_ok(results)
    assert any(k.endswith("weight") for k in results[0]["notes"]["keys"])
    (tmp_path / "load").mkdir()
    results = run_ranks(tmp_path / "load", "dcp_load", reload_world, DIST_TEST_BACKEND="tpu_dist",
                        DIST_TEST_CKPT=ckpt)
    assert_ok(results)
    assert results[0]["notes"]["checks"] >= 4 + 2 * 4  # 4 model tensors, Adam's state of each
