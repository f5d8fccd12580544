"""torch.save / torch.load of tpu tensors and module state dicts, mapped to
the CPU and to tpu."""
import copy
import io

import pytest
import torch
import torch.nn as nn

from conftest import ALL_DTYPES, TPU0, assert_same, dtype_id, make


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_tensor_roundtrip_every_dtype(dtype):
    x = make((3, 5), dtype, seed=1)
    t = x.to("tpu")
    on_tpu = roundtrip(t)
    assert on_tpu.device == TPU0
    assert_same(on_tpu, x, exact=True)
    on_cpu = roundtrip(t, map_location="cpu")
    assert on_cpu.device.type == "cpu"
    torch.testing.assert_close(on_cpu, x, rtol=0, atol=0)


@pytest.mark.parametrize("map_location", ["tpu", "tpu:0", torch.device("tpu"),
                                          {"cpu": "tpu:0"}, lambda s, loc: s.tpu()],
                         ids=["str", "str0", "device", "dict", "callable"])
def test_cpu_checkpoint_to_tpu(map_location):
    x = make((4, 4), seed=2)
    loaded = roundtrip({"x": x, "n": 3}, map_location=map_location)
    assert loaded["n"] == 3
    assert loaded["x"].device == TPU0
    assert_same(loaded["x"], x, exact=True)


def test_tpu_checkpoint_map_location_variants():
    x = make((2, 6), seed=3)
    t = x.to("tpu")
    for loc in ("cpu", torch.device("cpu"), {"tpu:0": "cpu"}):
        got = roundtrip(t, map_location=loc)
        assert got.device.type == "cpu", loc
        torch.testing.assert_close(got, x, rtol=0, atol=0)
    got = roundtrip(t, map_location="tpu")
    assert got.device == TPU0
    assert_same(got, x, exact=True)


def test_views_keep_sharing_storage():
    x = make((4, 6), seed=4)
    t = x.to("tpu")
    a, b = roundtrip((t, t[1:, ::2]))
    assert a.device == TPU0 and b.device == TPU0
    assert_same(b, x[1:, ::2], exact=True)
    assert b.stride() == x[1:, ::2].stride()
    a.zero_()
    assert_same(b, torch.zeros(3, 3), exact=True)  # b is still a view of a


def test_noncontiguous_tensor_roundtrip():
    x = make((5, 7), seed=5)
    t = x.to("tpu").t()
    got = roundtrip(t)
    assert got.device == TPU0 and got.stride() == t.stride()
    assert_same(got, x.t(), exact=True)
    torch.testing.assert_close(roundtrip(t, map_location="cpu"), x.t(), rtol=0, atol=0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc = nn.Linear(8, 4)
        self.norm = nn.LayerNorm(4)
        self.register_buffer("steps", torch.tensor(5))

    def forward(self, idx):
        return self.norm(self.fc(self.emb(idx)))


def test_state_dict_roundtrip():
    torch.manual_seed(6)
    cpu_net = Net()
    idx = torch.tensor([[1, 2, 3], [9, 0, 4]])
    expected = cpu_net(idx)
    tpu_net = copy.deepcopy(cpu_net).tpu()
    sd = tpu_net.state_dict()
    assert all(v.device == TPU0 for v in sd.values())

    # to the CPU
    cpu_sd = roundtrip(sd, map_location="cpu")
    assert all(v.device.type == "cpu" for v in cpu_sd.values())
    fresh = Net()
    fresh.load_state_dict(cpu_sd)
    torch.testing.assert_close(fresh(idx), expected, rtol=0, atol=0)

    # to tpu (default location of tpu tensors, and explicit)
    for kwargs in ({}, {"map_location": "tpu"}):
        tpu_sd = roundtrip(sd, **kwargs)
        assert all(v.device == TPU0 for v in tpu_sd.values())
        fresh = Net().tpu()
        fresh.load_state_dict(tpu_sd)
        assert_same(fresh(idx.tpu()), expected, atol=1e-6, rtol=1e-6)
        assert fresh.steps.item() == 5

    # a CPU model loads a tpu checkpoint directly (load_state_dict copies across devices)
    fresh = Net()
    fresh.load_state_dict(roundtrip(sd))
    torch.testing.assert_close(fresh(idx), expected, rtol=0, atol=0)


def test_save_to_file_and_weights_only(tmp_path):
    x = make((3, 3), torch.bfloat16, seed=7)
    path = tmp_path / "ckpt.pt"
    torch.save({"w": x.to("tpu"), "step": 1}, path)
    got = torch.load(path, weights_only=True)
    assert got["w"].device == TPU0 and got["step"] == 1
    assert_same(got["w"], x, exact=True)
    got = torch.load(path, map_location="cpu", weights_only=True)
    torch.testing.assert_close(got["w"], x, rtol=0, atol=0)


def test_parameter_roundtrip():
    p = nn.Parameter(make((4,), seed=8).to("tpu"))
    p.grad = torch.ones(4, device="tpu")
    q = roundtrip(p)
    assert isinstance(q, nn.Parameter) and q.device == TPU0 and q.requires_grad
    assert_same(q.detach(), make((4,), seed=8), exact=True)
