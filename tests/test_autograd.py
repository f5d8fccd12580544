"""Autograd on tpu: gradients of MLP and attention-like blocks equal the
CPU's; gradcheck in float64 on tpu; optimizer steps equal the CPU's."""
import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import TPU0, assert_same, make, no_fallback


def grads_of(model):
    return {n: p.grad for n, p in model.named_parameters()}


def compare_training_step(model, inputs, loss_fn, atol=1e-5, rtol=1e-4):
    """Forward + backward of a copy of `model` on the CPU and on tpu; compares
    loss, input grads and parameter grads."""
    cpu_model = copy.deepcopy(model)
    tpu_model = copy.deepcopy(model).tpu()
    cpu_in = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    tpu_in = [x.detach().to("tpu").requires_grad_(x.is_floating_point()) for x in inputs]
    cpu_loss = loss_fn(cpu_model, *cpu_in)
    tpu_loss = loss_fn(tpu_model, *tpu_in)
    assert tpu_loss.device == TPU0
    assert_same(tpu_loss, cpu_loss, atol=atol, rtol=rtol)
    cpu_loss.backward()
    tpu_loss.backward()
    for c, t in zip(cpu_in, tpu_in):
        if c.is_floating_point():
            assert t.grad is not None and t.grad.device == TPU0
            assert_same(t.grad, c.grad, atol=atol, rtol=rtol)
    cg, tg = grads_of(cpu_model), grads_of(tpu_model)
    assert set(cg) == set(tg)
    for name in cg:
        assert tg[name] is not None, f"no grad for {name}"
        assert tg[name].device == TPU0, name
        assert_same(tg[name], cg[name], atol=atol, rtol=rtol, msg=name)


def test_elementwise_grads():
    a, b = make((3, 4), seed=1), make((4,), seed=2)

    def f(x, y):
        return (x * y + torch.exp(x) / (1 + y.abs()) - torch.tanh(x) ** 2).sum()

    ca, cb = a.clone().requires_grad_(), b.clone().requires_grad_()
    ta, tb = a.to("tpu").requires_grad_(), b.to("tpu").requires_grad_()
    f(ca, cb).backward()
    f(ta, tb).backward()
    assert ta.grad.device == TPU0
    assert_same(ta.grad, ca.grad, atol=1e-5, rtol=1e-5)
    assert_same(tb.grad, cb.grad, atol=1e-5, rtol=1e-5)  # broadcast grad is reduced


def test_grad_accumulates_and_retain_graph():
    x = make((5,), seed=3)
    c, t = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    for v in (c, t):
        y = (v ** 3).sum()
        y.backward(retain_graph=True)
        y.backward()
    assert_same(t.grad, c.grad, atol=1e-5, rtol=1e-5)
    g_c = torch.autograd.grad((c.sin() * 2).sum(), c)[0]
    g_t = torch.autograd.grad((t.sin() * 2).sum(), t)[0]
    assert_same(g_t, g_c, atol=1e-6, rtol=1e-6)


def test_mlp_backward_matches_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.LayerNorm(32),
                          nn.SiLU(), nn.Linear(32, 10))
    x = make((8, 16), seed=4)
    y = torch.tensor([0, 3, 9, 1, 1, 5, 7, 2])

    def loss_fn(m, x, y):
        return F.cross_entropy(m(x), y)

    compare_training_step(model, [x, y], loss_fn)


class Attention(nn.Module):
    def __init__(self, vocab=20, dim=16, heads=2, max_len=8):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, dim)
        self.ln = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("causal", torch.ones(max_len, max_len, dtype=torch.bool).triu(1))

    def forward(self, idx):
        x = self.tok(idx)
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(self.causal[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return self.head(x)


def test_attention_block_backward_matches_cpu():
    torch.manual_seed(1)
    model = Attention()
    idx = torch.randint(0, 20, (3, 8), generator=torch.Generator().manual_seed(5))
    tgt = torch.randint(0, 20, (3, 8), generator=torch.Generator().manual_seed(6))

    def loss_fn(m, idx, tgt):
        logits = m(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))

    compare_training_step(model, [idx, tgt], loss_fn)


def test_sdpa_backward_matches_cpu():
    q, k, v = (make((2, 2, 5, 8), seed=s) for s in (7, 8, 9))

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    dev = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    co, to = f(*cpu), f(*dev)
    assert_same(to, co, atol=1e-5, rtol=1e-5)
    g = make(co.shape, seed=10)
    co.backward(g)
    to.backward(g.to("tpu"))
    for c, t in zip(cpu, dev):
        assert_same(t.grad, c.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adamw", "adamw_foreach_off"])
def test_optimizer_steps_match_cpu(opt_name):
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    cpu_model, tpu_model = copy.deepcopy(model), copy.deepcopy(model).tpu()

    def make_opt(params):
        if opt_name == "sgd_momentum":
            return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1,
                                 foreach=False if opt_name == "adamw_foreach_off" else None)

    opts = make_opt(cpu_model.parameters()), make_opt(tpu_model.parameters())
    x, y = make((10, 6), seed=11), make((10, 3), seed=12)
    for _ in range(3):
        for m, opt, dev in ((cpu_model, opts[0], "cpu"), (tpu_model, opts[1], "tpu")):
            opt.zero_grad()
            F.mse_loss(m(x.to(dev)), y.to(dev)).backward()
            opt.step()
    for (n, pc), pt in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        assert pt.device == TPU0
        assert_same(pt, pc, atol=1e-5, rtol=1e-4, msg=n)
    for st_c, st_t in zip(opts[0].state.values(), opts[1].state.values()):
        for key in st_c:
            if isinstance(st_c[key], torch.Tensor) and st_c[key].dim() > 0:
                assert_same(st_t[key], st_c[key], atol=1e-5, rtol=1e-4, msg=key)


def test_no_grad_and_detach():
    x = make((3,), seed=13).to("tpu").requires_grad_()
    with torch.no_grad():
        y = x * 2
    assert not y.requires_grad
    z = (x * 3).detach()
    assert not z.requires_grad and z.device == TPU0
    assert_same(z, make((3,), seed=13) * 3, exact=True)


# ---- gradcheck in float64 on tpu -------------------------------------------------------------

GRADCHECK = {
    "gelu": (lambda x: F.gelu(x), lambda: [make((3, 4), torch.float64, seed=20)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda: [make((3, 4), torch.float64, seed=21)]),
    "softmax": (lambda x: torch.softmax(x, -1), lambda: [make((3, 5), torch.float64, seed=22)]),
    "log_softmax": (lambda x: torch.log_softmax(x, 0),
                    lambda: [make((3, 5), torch.float64, seed=23)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (5,), w, b),
                   lambda: [make((3, 5), torch.float64, seed=24),
                            make((5,), torch.float64, seed=25),
                            make((5,), torch.float64, seed=26)]),
    "matmul": (lambda a, b: a @ b, lambda: [make((3, 4), torch.float64, seed=27),
                                            make((4, 2), torch.float64, seed=28)]),
    "bmm": (torch.bmm, lambda: [make((2, 3, 4), torch.float64, seed=29),
                                make((2, 4, 2), torch.float64, seed=30)]),
    "linear": (F.linear, lambda: [make((3, 4), torch.float64, seed=31),
                                  make((2, 4), torch.float64, seed=32),
                                  make((2,), torch.float64, seed=33)]),
    "embedding": (lambda w: F.embedding(torch.tensor([[0, 2], [2, 3]], device=w.device), w),
                  lambda: [make((5, 3), torch.float64, seed=34)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, torch.tensor([1, 0, 3], device=x.device)),
                      lambda: [make((3, 4), torch.float64, seed=35)]),
    "tanh_sigmoid_mul": (lambda a, b: torch.tanh(a) * torch.sigmoid(b),
                         lambda: [make((2, 3), torch.float64, seed=36),
                                  make((3,), torch.float64, seed=37)]),
    "sum_mean_max": (lambda x: x.sum(0) + x.mean(1).sum() + x.amax(1).sum(),
                     lambda: [make((3, 4), torch.float64, seed=38)]),
}


@pytest.mark.parametrize("name", list(GRADCHECK))
def test_gradcheck_float64_on_tpu(name):
    fn, inputs = GRADCHECK[name]
    cpu_inputs = [t.requires_grad_() for t in inputs()]
    tpu_inputs = [t.detach().to("tpu").requires_grad_() for t in cpu_inputs]
    assert torch.autograd.gradcheck(fn, tpu_inputs, eps=1e-6, atol=1e-5, rtol=1e-4)
    # and the analytical gradients equal the CPU's
    out_c, out_t = fn(*cpu_inputs), fn(*tpu_inputs)
    assert out_t.device == TPU0
    g = make(out_c.shape, torch.float64, seed=99)
    grads_c = torch.autograd.grad(out_c, cpu_inputs, g)
    grads_t = torch.autograd.grad(out_t, tpu_inputs, g.to("tpu"))
    for gt, gc in zip(grads_t, grads_c):
        assert_same(gt, gc, atol=1e-10, rtol=1e-9)


def test_gradgradcheck_gelu_on_tpu():
    x = make((2, 3), torch.float64, seed=40).to("tpu").requires_grad_()
    assert torch.autograd.gradgradcheck(F.gelu, [x], eps=1e-6, atol=1e-5, rtol=1e-4)


def test_where_with_scalar_branch_keeps_autograd():
    # where.ScalarOther/ScalarSelf are CompositeImplicitAutograd: they must reach
    # the device through their decomposition, with WhereBackward recorded.
    x = make((4, 5), torch.float64, seed=41)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    for v in (xc, xt):
        (torch.where(v > 0, v, -1.5) * 2 + torch.where(v < 0.3, 0.25, v)).sum().backward()
    assert xt.grad is not None
    assert_same(xt.grad, xc.grad)


def test_module_to_tpu_keeps_tied_weights():
    # nn.Module.to keeps Parameter objects only for "shallow-copy compatible"
    # tensors; tied embeddings must stay one Parameter on tpu.
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, x):
            return self.head(self.emb(x))

    torch.manual_seed(0)
    m = Tied()
    p = m.emb.weight
    m.to("tpu")
    assert m.head.weight is m.emb.weight and m.emb.weight is p
    assert p.device == TPU0 and len(list(m.parameters())) == 1
    ref = Tied()
    ref.load_state_dict({k: v.cpu() for k, v in m.state_dict().items()})
    x = torch.tensor([[1, 2, 2, 7]])
    m(x.to("tpu")).pow(2).mean().backward()
    ref(x).pow(2).mean().backward()
    assert_same(m.emb.weight.grad, ref.emb.weight.grad, atol=1e-6, rtol=1e-5)


def test_transformer_gradients_as_accurate_as_cpu():
    """nn.Transformer (encoder-decoder, causal target mask, float32): every
    parameter's gradient is within 2x of CPU float32's distance from a
    float64 reference (issue 27 measured 4x on in_proj_weight; now
    0.6-0.9x, the worst parameter 0.86x here)."""
    torch.manual_seed(0)
    m = torch.nn.Transformer(d_model=64, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                             dim_feedforward=128, dropout=0.0)
    src, tgt = torch.randn(10, 3, 64), torch.randn(9, 3, 64)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(9)

    def grads(dev, dt):
        mm = copy.deepcopy(m).to(dev, dt)
        out = mm(src.to(dev, dt), tgt.to(dev, dt), tgt_mask=mask.to(dev, dt), tgt_is_causal=True)
        out.square().sum().backward()
        return {n: p.grad.detach().cpu().double() for n, p in mm.named_parameters()}

    ref, cpu = grads("cpu", torch.float64), grads("cpu", torch.float32)
    with no_fallback():
        tpu = grads("tpu", torch.float32)
    worse = {n: ((tpu[n] - ref[n]).abs().max().item(), (cpu[n] - ref[n]).abs().max().item())
             for n in ref}
    bad = {n: e for n, e in worse.items() if e[0] > 2 * e[1] + 1e-7}
    assert not bad, bad
