"""Every module of PyTorch's own module database
(``torch.testing._internal.common_modules.module_db``) on tpu: for each
module and each of its samples (``module_inputs_func``, float32), the module
built on the CPU is copied to tpu, and its forward outputs, the gradients of
its parameters and of its inputs (backward of the sum of every floating
output) must match the CPU's, in training and, where the module behaves
differently there, in eval mode, with no CPU fallback. Random modules
(dropout) draw the same numbers on both sides from the same seed only in
distribution, so their outputs are compared only in eval mode, where they
are deterministic."""
import copy

import pytest
import torch
from torch.testing._internal.common_modules import module_db

import torch_tpu
from conftest import no_fallback

# Forward outputs of these are random in training mode (dropout draws).
_RANDOM_IN_TRAINING = ("Dropout", "AlphaDropout", "FeatureAlphaDropout", "RReLU")
# Samples per (module, mode): the first ones cover the constructor forms; the
# whole list of some modules (RNNs, Transformer) is long and slow.
_MAX_SAMPLES = 1000
_TOL = dict(rtol=1e-4, atol=1e-4, equal_nan=True)


def _to(obj, dev):
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to(dev)
        return t.requires_grad_(True) if obj.requires_grad else t
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(x, dev) for x in obj)
    if isinstance(obj, dict):
        return {k: _to(v, dev) for k, v in obj.items()}
    return obj


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    return []


def _cases():
    out = []
    for mi in module_db:
        if torch.float32 not in mi.dtypes:
            continue
        for training in ([True, False] if mi.train_and_eval_differ else [True]):
            out.append(pytest.param(mi, training,
                                    id=f"{mi.name}-{'train' if training else 'eval'}"))
    return out


@pytest.mark.parametrize("mi,training", _cases())
def test_module_matches_cpu(mi, training):
    samples = mi.module_inputs_func(mi, device="cpu", dtype=torch.float32, requires_grad=True,
                                    training=training)
    random = training and mi.module_cls.__name__ in _RANDOM_IN_TRAINING
    ran = 0
    for s in samples[:_MAX_SAMPLES]:
        if s.forward_input is None:
            continue
        torch.manual_seed(0)
        m = mi.module_cls(*s.constructor_input.args, **s.constructor_input.kwargs)
        m = m.to(torch.float32).train(training)
        args, kwargs = s.forward_input.args, s.forward_input.kwargs
        if mi.is_lazy:  # materialise the parameters once, then copy them
            with torch.no_grad():
                copy.deepcopy(m)(*copy.deepcopy(args), **copy.deepcopy(kwargs))
                m(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        mt = copy.deepcopy(m).to("tpu")
        out = _tensors(m(*args, **kwargs))
        with no_fallback():
            targs, tkwargs = _to(args, "tpu"), _to(kwargs, "tpu")
            outt = _tensors(mt(*targs, **tkwargs))
            assert len(out) == len(outt)
            loss = [o for o in out if o.requires_grad and o.dtype.is_floating_point]
            losst = [o for o in outt if o.requires_grad and o.dtype.is_floating_point]
            if loss:
                sum(o.sum() for o in loss).backward()
                sum(o.sum() for o in losst).backward()
            got = [o.detach().cpu() for o in outt]
            grads = [p.grad.cpu() if p.grad is not None else None for p in mt.parameters()]
            in_grads = [t.grad.cpu() if t.grad is not None else None
                        for t in _tensors((targs, tkwargs))]
        if not random:
            for a, b in zip(out, got):
                torch.testing.assert_close(b, a.detach(), **_TOL)
            for p, g in zip(m.parameters(), grads):
                assert (p.grad is None) == (g is None)
                if g is not None:
                    torch.testing.assert_close(g, p.grad, **_TOL)
            for t, g in zip(_tensors((args, kwargs)), in_grads):
                if t.grad is not None:
                    torch.testing.assert_close(g, t.grad, **_TOL)
        ran += 1
    assert ran or not samples, "no sample with a forward input"
