"""Property checks for the coverage sweep: ops whose values cannot be
compared with the CPU's element by element, because the output is random or
uninitialised. They are checked the way PyTorch's own tests treat such ops,
by what the op promises (status ``pass-property`` in
:mod:`torch_tpu.tools.coverage`):

- uninitialised outputs (``empty``, ``empty_like``, ``empty_strided``, ...):
  only metadata is promised. Every result tensor must match the CPU's in
  shape, dtype, layout, strides, storage offset, ``requires_grad`` and the
  conjugate/negative bits, live on tpu, and own a storage large enough for
  every element its strides reach.
- random outputs: (1) determinism: two tpu runs after the same
  ``torch.manual_seed`` give identical results (NaNs equal); (2) support:
  every value of every tpu draw lies where the op's definition puts it
  (bernoulli in {0, 1}, randint in [low, high), dropout 0 or x / (1 - p),
  multinomial indices of non-zero categories, distinct without replacement,
  ...); (3) distribution: the op runs again with the sample's own arguments
  under different seeds on tpu and on the CPU until each side has about
  :data:`POOL` values (at most :data:`MAX_DRAWS` runs), and the two pools
  must agree: a two-sample Kolmogorov-Smirnov test and, where the
  distribution has a variance, a Welch z-test of the means, both at
  :data:`SIGMA` standard deviations (two-sided, p ~ 6e-7 per test: a correct
  kernel does not flake). The CPU's own draws must satisfy the same support
  rules: a rule the CPU breaks is this module's mistake, and the sample is
  reported "unchecked" rather than failing tpu.

- float to narrower integer conversions (``byte``, ``char``, ...): C leaves
  a value that does not fit undefined; tpu must give the CPU's value
  wherever the input, truncated toward zero, fits the integer type.

Ops not listed in :data:`SPECS` stay "unchecked" (fractional max pooling,
attention with dropout, the randomised low-rank factorisations).
"""
import math
import warnings

import torch

from torch_tpu.tools import coverage as cov

PASS = "pass-property"
SIGMA = 5.0
# two-sided tail probability of a normal beyond SIGMA (5 sigma: 5.7e-7)
ALPHA = math.erfc(SIGMA / math.sqrt(2.0))
POOL = 500           # values per side aimed at for the distribution tests
MAX_DRAWS = 32       # runs per side at most
MIN_POOL = 30        # fewer values than this: no distribution test
SEED = 20261206

META_NOTE = ("property: uninitialised output; shape, dtype, layout, strides, storage offset, "
             "requires_grad, device and storage size match the CPU's")
RANDOM_NOTE = ("property: random output; same seed gives the same tpu result, every value in "
               "the op's support, distribution agrees with the CPU's (KS and mean, 5 sigma)")

DEFINED_NOTE = ("property: float to narrower integer, undefined where the value does not fit; "
                "equal to the CPU's wherever it fits")

META_OPS = {"empty", "empty_like", "empty_permuted", "new_empty", "new_empty_strided",
            "empty_strided"}
# float -> integer conversions: C leaves a value that does not fit undefined
DEFINED_OPS = {"byte", "char", "short", "int", "long"}


class SpecError(Exception):
    """The CPU's own result breaks a rule: the rule, not tpu, is wrong."""


# ---- helpers ------------------------------------------------------------------------


def _arg(args, kwargs, i, name, default):
    if name in kwargs:
        return kwargs[name]
    return args[i] if len(args) > i else default


def _only(out):
    ts = cov._tensors(out)
    if len(ts) != 1:
        raise SpecError(f"expected one result tensor, got {len(ts)}")
    return ts[0]


def _close(a, b, dtype, scale=1.0):
    """Elementwise |a - b| within the dtype's tolerance (times ``scale``),
    float64 tensors."""
    atol, rtol = cov.tolerance(dtype)
    if not dtype.is_floating_point:
        return a == b
    return (a - b).abs() <= scale * (atol + rtol * b.abs())


def _first_bad(bad, v, what):
    i = tuple(int(x) for x in bad.nonzero()[0]) if v.dim() else ()
    return (f"{int(bad.sum())}/{v.numel()} values {what}, e.g. at {i}: "
            f"{cov._fmt(v[i].item())}")


def _check_support(v, ok, what):
    bad = ~ok
    return _first_bad(bad, v, what) if bool(bad.any()) else None


def _uniform_rule(v, lo, hi, dtype, what="in [{lo}, {hi})"):
    d = v.double()
    # float64 keeps high out; narrower types may round a value just below it up to it
    strict = dtype == torch.float64 or (dtype == torch.float32 and (lo, hi) == (0, 1))
    ok = (d >= lo) & ((d < hi) if strict else (d <= hi))
    return _check_support(d, ok, "outside " + what.format(lo=lo, hi=hi)), d.flatten()


def _finite_rule(v):
    d = v.double()
    return _check_support(d, torch.isfinite(d), "not finite"), d.flatten()


# ---- per-op rules: (out, (inp, args, kwargs)) -> (message or None, values or None) ----
# out: the result moved to the CPU; the inputs are the CPU sample's. values:
# float64 numbers whose distribution is compared between tpu and the CPU.


def _r_uniform(out, s):
    inp, args, kw = s
    lo, hi = _arg(args, kw, 0, "from", 0), _arg(args, kw, 1, "to", 1)
    return _uniform_rule(_only(out), lo, hi, inp.dtype)


def _r_finite(out, s):
    return _finite_rule(_only(out))


def _r_cauchy(out, s):
    d = _only(out).double()
    return _check_support(d, ~torch.isnan(d), "NaN"), d.flatten()


def _r_exponential(out, s):
    d = _only(out).double()
    return _check_support(d, torch.isfinite(d) & (d >= 0), "not in [0, inf)"), d.flatten()


def _r_geometric(out, s):
    d = _only(out).double()
    ok = torch.isfinite(d) & (d >= 1) & (d == d.floor())
    return _check_support(d, ok, "not an integer >= 1"), d.flatten()


def _r_log_normal(out, s):
    d = _only(out).double()
    msg = _check_support(d, torch.isfinite(d) & (d > 0), "not in (0, inf)")
    return msg, (d.log().flatten() if msg is None else None)


def _r_normal_tensor(out, s):
    """torch.normal(mean, std): finite; exactly the mean where std is 0."""
    inp, args, kw = s
    t = _only(out)
    msg, d = _finite_rule(t)
    std = _arg(args, kw, 0, "std", 1.0)
    if msg is None and isinstance(std, torch.Tensor) and isinstance(inp, torch.Tensor):
        zero = torch.broadcast_to(std == 0, t.shape)
        mean = torch.broadcast_to(inp.to(t.dtype).double(), t.shape)
        if bool(zero.any()):
            msg = _check_support(t.double(), ~zero | (t.double() == mean),
                                 "differ from the mean where std = 0")
    return msg, d


def _r_int_range(lo, hi, out):
    d = _only(out).double()
    ok = (d >= lo) & (d < hi) & (d == d.floor())
    return _check_support(d, ok, f"not an integer in [{lo}, {hi})"), d.flatten()


def _r_randint(out, s):
    inp, args, kw = s
    # randint(high, size) or randint(low, high, size)
    lo, hi = (0, inp) if len(args) == 1 else (inp, args[0])
    return _r_int_range(lo, hi, out)


def _r_randint_like(out, s):
    inp, args, kw = s
    lo, hi = (0, args[0]) if len(args) == 1 else (args[0], args[1])
    return _r_int_range(lo, hi, out)


def _r_bernoulli(out, s):
    inp, args, kw = s
    d = _only(out).double()
    msg = _check_support(d, (d == 0) | (d == 1), "not 0 or 1")
    if msg is None:
        p = inp.double() if not args and "p" not in kw else None
        if p is not None and p.shape == d.shape:
            msg = _check_support(d, ~(p == 0) | (d == 0), "1 where p = 0") or \
                _check_support(d, ~(p == 1) | (d == 1), "0 where p = 1")
    return msg, d.flatten()


def _r_multinomial(out, s):
    inp, args, kw = s
    n = _arg(args, kw, 0, "num_samples", None)
    repl = _arg(args, kw, 1, "replacement", False)
    t = _only(out)
    if t.dtype != torch.int64:
        return f"dtype {cov.dtype_name(t.dtype)}, not int64", None
    probs = inp.double().reshape(-1, inp.shape[-1])
    idx = t.reshape(-1, t.shape[-1]) if t.numel() else t.reshape(probs.shape[0], 0)
    if idx.shape != (probs.shape[0], n):
        return f"shape {tuple(t.shape)} for {n} samples of {tuple(inp.shape)}", None
    k = probs.shape[1]
    msg = _check_support(t, (t >= 0) & (t < k), f"not an index in [0, {k})")
    if msg is None and idx.numel():
        hit = probs.gather(1, idx)
        msg = _check_support(idx, hit > 0, "a category of probability 0")
    if msg is None and not repl and idx.numel():
        srt = idx.sort(dim=1).values
        dup = srt[:, 1:] == srt[:, :-1]
        if bool(dup.any()):
            msg = f"{int(dup.sum())} repeated indices in a row drawn without replacement"
    return msg, t.double().flatten()


def _groups(t, feature_dims):
    """t as (groups, elements of a group): one group per leading index over
    feature_dims (0: every element is its own group)."""
    if feature_dims == 0 or t.dim() <= feature_dims:
        return t.reshape(-1, 1)
    return t.reshape(math.prod(t.shape[:feature_dims]), -1)


def _dropout_rule(kind, feature_dims=None):
    """dropout and its alpha/feature variants. Kept elements are x / (1 - p)
    (alpha: a x + alpha a p), dropped ones 0 (alpha: -alpha a (1 - p)), p = 1
    zeroes everything, no training or p = 0 returns x; feature variants keep or
    drop whole channels. values: one 0/1 per group (1 = dropped), where the
    group's kept and dropped values differ."""
    def rule(out, s):
        inp, args, kw = s
        p = float(_arg(args, kw, 0, "p", 0.5))
        train = _arg(args, kw, 1, "training", kind == "dropout" or kind == "feature")
        t = _only(out)
        x, y = inp.double(), t.double()
        if t.shape != inp.shape:
            return f"shape {tuple(t.shape)} != input {tuple(inp.shape)}", None
        if not train or p == 0:
            return _check_support(y, (y == x) | (torch.isnan(x) & torch.isnan(y)),
                                  "not the input (no dropout)"), None
        if p == 1:
            return _check_support(y, (y == 0) | torch.isnan(x), "not 0 (p = 1)"), None
        if kind in ("alpha", "feature_alpha"):
            al = 1.7580993408473766
            a = 1.0 / math.sqrt((al * al * p + 1) * (1 - p))
            kept, dropped = a * x + al * a * p, torch.full_like(x, -al * a * (1 - p))
            scale = 4.0
        else:
            kept, dropped = x / (1 - p), torch.zeros_like(x)
            scale = 1.0
        is_k = _close(y, kept, t.dtype, scale)
        is_d = _close(y, dropped, t.dtype, scale) if kind in ("alpha", "feature_alpha") \
            else (y == 0)
        msg = _check_support(y, is_k | is_d, f"neither dropped nor x kept and scaled (p={p})")
        if msg:
            return msg, None
        fd = 0 if feature_dims is None else feature_dims(inp)
        gk, gd = _groups(is_k & ~is_d, fd), _groups(is_d & ~is_k, fd)
        if fd:
            mixed = gk.any(1) & gd.any(1)
            if bool(mixed.any()):
                return (f"{int(mixed.sum())}/{gk.shape[0]} channels partly dropped "
                        f"(feature dropout drops whole channels)"), None
        clear = gk.any(1) | gd.any(1)
        return None, gd.any(1)[clear].double()
    return rule


def _rrelu_rule(out, s):
    inp, args, kw = s
    lo = float(_arg(args, kw, 0, "lower", 1.0 / 8))
    hi = float(_arg(args, kw, 1, "upper", 1.0 / 3))
    train = _arg(args, kw, 2, "training", False)
    t = _only(out)
    x, y = inp.double(), t.double()
    pos = x >= 0
    msg = _check_support(y, ~pos | (y == x), "changed where x >= 0")
    if msg:
        return msg, None
    neg = ~pos & (x.abs() > 1e-3)
    if not train:
        return _check_support(y, ~neg | _close(y, x * (lo + hi) / 2, t.dtype, 2.0),
                              "not x (lower + upper) / 2 where x < 0 (eval)"), None
    slope = y[neg] / x[neg]
    atol, rtol = cov.tolerance(t.dtype)
    tol = 2 * (rtol + atol / x[neg].abs())
    ok = (slope >= lo - tol) & (slope <= hi + tol)
    return _check_support(slope, ok, f"slopes outside [{lo:g}, {hi:g}] where x < 0"), slope


# op key -> (rule, whether the values have a variance for the z-test of means)
SPECS = {
    "uniform": (_r_uniform, True),
    # op_db's "rand_like" entry runs torch.randn_like (its op= lambda), so
    # its values are normal, not uniform: the rule follows what the entry runs
    "rand_like": (_r_finite, True),
    "randn": (_r_finite, True),
    "randn_like": (_r_finite, True),
    "normal": (_r_normal_tensor, True),
    "normal.number_mean": (_r_normal_tensor, True),
    "normal.in_place": (_r_finite, True),
    "cauchy": (_r_cauchy, False),
    "exponential": (_r_exponential, True),
    "geometric": (_r_geometric, True),
    "log_normal": (_r_log_normal, True),
    "randint": (_r_randint, True),
    "randint_like": (_r_randint_like, True),
    "bernoulli": (_r_bernoulli, True),
    "multinomial": (_r_multinomial, True),
    "nn.functional.dropout": (_dropout_rule("dropout"), True),
    "nn.functional.dropout2d": (_dropout_rule("feature", lambda x: 2), True),
    "nn.functional.dropout3d": (_dropout_rule("feature", lambda x: 2 if x.dim() == 5 else 1),
                                True),
    "nn.functional.alpha_dropout": (_dropout_rule("alpha"), True),
    "nn.functional.feature_alpha_dropout.with_train": (
        _dropout_rule("feature_alpha", lambda x: 2), True),
    "nn.functional.rrelu": (_rrelu_rule, True),
}


def has_check(key):
    return key in META_OPS or key in SPECS or key in DEFINED_OPS


def note(key):
    """What a "pass-property" of key's pairs checked (for the report)."""
    if key in META_OPS:
        return META_NOTE
    return DEFINED_NOTE if key in DEFINED_OPS else RANDOM_NOTE


# ---- statistics ------------------------------------------------------------------------


def ks_statistic(a, b):
    """Two-sample Kolmogorov-Smirnov statistic of 1-D float64 tensors."""
    both = torch.cat([a, b]).sort().values
    fa = torch.searchsorted(a.sort().values, both, right=True).double() / a.numel()
    fb = torch.searchsorted(b.sort().values, both, right=True).double() / b.numel()
    return float((fa - fb).abs().max())


def same_distribution(t, c, moments=True):
    """None when the tpu pool t and the CPU pool c (1-D float64) agree at
    SIGMA, else a message. Pools under MIN_POOL are not tested."""
    n, m = t.numel(), c.numel()
    if n < MIN_POOL or m < MIN_POOL:
        return None
    d = ks_statistic(t, c)
    crit = math.sqrt(-0.5 * math.log(ALPHA / 2)) * math.sqrt((n + m) / (n * m))
    if d > crit:
        return (f"distribution differs from the CPU's: KS D={d:.3f} > {crit:.3f} "
                f"(n={n}, m={m}, {SIGMA:g} sigma)")
    if moments:
        fin_t, fin_c = t[torch.isfinite(t)], c[torch.isfinite(c)]
        if fin_t.numel() == n and fin_c.numel() == m:
            mt, mc = float(t.mean()), float(c.mean())
            se = math.sqrt(float(t.var()) / n + float(c.var()) / m)
            if se == 0.0:
                if mt != mc:
                    return f"constant {mt:.6g} where the CPU gives constant {mc:.6g}"
            elif abs(mt - mc) / se > SIGMA:
                return (f"mean {mt:.4g} vs the CPU's {mc:.4g}: z={abs(mt - mc) / se:.1f} > "
                        f"{SIGMA:g} (n={n}, m={m})")
    return None


# ---- running a sample -------------------------------------------------------------------


def _fast_seed(seed):
    """What torch.manual_seed does to the CPU and tpu generators, without its
    bookkeeping for other backends (~10 ms a call): for the pooled draws."""
    torch.default_generator.manual_seed(seed)
    torch.tpu.manual_seed_all(seed)


def _run(op, sample, spare, device, seed=None, fast=False):
    """op on a fresh copy of the sample on device ('cpu' or 'tpu'), the
    generators seeded with ``seed`` by torch.manual_seed (``fast``: by
    :func:`_fast_seed`), also where the OpInfo seeds them itself: its
    ``torch.manual_seed(42)`` is redirected. The raw result."""
    inp, args, kwargs = cov._clone(spare)
    if device == "tpu":
        inp, args, kwargs = cov.to_tpu((inp, args, kwargs))
    real = torch.manual_seed
    seeder = _fast_seed if fast else real
    try:
        if seed is not None:
            torch.manual_seed = lambda s: seeder(seed)
            seeder(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = op(inp, *args, **kwargs)
        if device == "tpu":
            torch.tpu.synchronize()
    finally:
        torch.manual_seed = real
    return out


def _processed(sample, out):
    out, devices = cov.to_cpu(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sample.output_process_fn_grad(out), devices


def _identical(a, b):
    ta, tb = cov._tensors(a), cov._tensors(b)
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point():
            if not bool(((x == y) | (torch.isnan(x) & torch.isnan(y))).all()):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def check_meta(op, sample, spare):
    """(status, message) of an op whose values are uninitialised."""
    cpu = _run(op, sample, spare, "cpu")
    tpu = _run(op, sample, spare, "tpu")
    ct, tt = cov._tensors(cpu), cov._tensors(tpu)
    if len(ct) != len(tt):
        return "fail", f"{len(tt)} result tensors, the CPU {len(ct)}"
    for k, (c, t) in enumerate(zip(ct, tt)):
        where = f"result[{k}]" if len(ct) > 1 else "result"
        if t.device.type != "tpu":
            return "fail", f"{where}: lives on {t.device.type}, not tpu"
        for name, f in (("shape", lambda z: tuple(z.shape)), ("dtype", lambda z: z.dtype),
                        ("layout", lambda z: z.layout), ("strides", lambda z: z.stride()),
                        ("storage offset", lambda z: z.storage_offset()),
                        ("requires_grad", lambda z: z.requires_grad),
                        ("conj bit", lambda z: z.is_conj()), ("neg bit", lambda z: z.is_neg())):
            if f(t) != f(c):
                return "fail", f"{where}: {name} {f(t)} != cpu {f(c)}"
        if t.numel():
            reach = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
            need = (reach + 1) * t.element_size()
            have = t.untyped_storage().nbytes()
            if have < need:
                return "fail", f"{where}: storage of {have} bytes, its strides reach {need}"
    return PASS, None


def check_defined(op, sample, spare):
    """(status, message) of a float -> integer conversion: the CPU's values
    wherever the input, truncated toward zero, fits the integer type."""
    x = spare[0]
    cpu, _ = _processed(sample, _run(op, sample, spare, "cpu"))
    tpu, dev = _processed(sample, _run(op, sample, spare, "tpu"))
    if [d for d in dev if d != "tpu"]:
        return "fail", "result: a tensor lives off tpu"
    c, t = _only(cpu), _only(tpu)
    msg = cov.compare(t, c, values=False)
    if msg:
        return "fail", msg
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or \
            c.dtype.is_floating_point or c.dtype == torch.bool or x.shape != c.shape:
        msg = cov.compare(t, c)
        return ("fail", msg) if msg else (PASS, None)
    info = torch.iinfo(c.dtype)
    xt = x.double().trunc()
    fits = torch.isfinite(xt) & (xt >= info.min) & (xt <= info.max)
    bad = fits & (t != c)
    if bool(bad.any()):
        i = tuple(int(k) for k in bad.nonzero()[0])
        return "fail", (f"{int(bad.sum())}/{int(fits.sum())} values that fit differ, e.g. at "
                        f"{i}: {cov._fmt(x[i].item())} -> tpu {t[i].item()} vs cpu "
                        f"{c[i].item()}")
    return PASS, None


def check_random(op, sample, spare, key):
    """(status, message) of a random op: determinism, support, distribution.
    A rule that cannot judge a result (SpecError) leaves the sample
    unchecked, whichever step it was in."""
    try:
        return _check_random(op, sample, spare, key)
    except SpecError as e:
        return "unchecked", f"property: {e}"


def _check_random(op, sample, spare, key):
    rule, moments = SPECS[key]
    s_cpu = cov._clone(spare)
    # (0) the rule holds for the CPU's own result, or it is this module's mistake
    c0, _ = _processed(sample, _run(op, sample, spare, "cpu", SEED, fast=True))
    msg, v0 = rule(c0, s_cpu)
    if msg:
        return "unchecked", f"property broken by the CPU's own draw: {msg}"
    # (1) the same seed twice
    a, dev = _processed(sample, _run(op, sample, spare, "tpu", SEED))
    b, _ = _processed(sample, _run(op, sample, spare, "tpu", SEED))
    off = [d for d in dev if d != "tpu"]
    if off:
        return "fail", f"result: a tensor lives on {off[0]}, not tpu"
    if not _identical(a, b):
        return "fail", "not deterministic: the same torch.manual_seed gave two tpu results"
    # (2) support of every draw, on both sides; (3) the pools' distributions
    msg, v = rule(a, s_cpu)
    if msg:
        return "fail", f"seed {SEED}: {msg}"
    per = v.numel() if v is not None else 0
    draws = 0 if per == 0 else max(1, min(MAX_DRAWS, -(-POOL // per)))
    pools = {"tpu": [v] if per else [], "cpu": [v0] if v0 is not None and per else []}
    for k in range(draws):
        for device in ("cpu", "tpu"):
            out, _ = _processed(sample, _run(op, sample, spare, device, SEED + 1 + k,
                                             fast=True))
            msg, v = rule(out, s_cpu)
            if msg and device == "cpu":
                return "unchecked", f"property broken by the CPU's own draw: {msg}"
            if msg:
                return "fail", f"seed {SEED + 1 + k}: {msg}"
            if v is not None:
                pools[device].append(v)
    if pools["cpu"] and pools["tpu"]:
        msg = same_distribution(torch.cat(pools["tpu"]), torch.cat(pools["cpu"]), moments)
        if msg:
            return "fail", msg
    return PASS, None


def check(op, sample, spare, key):
    """(status, message) of a sample of the op with op_db key ``key``, run
    already on both sides with matching structure: status "pass-property",
    "fail" or "unchecked". ``spare``: an untouched copy of the sample's
    (input, args, kwargs)."""
    if key in META_OPS:
        return check_meta(op, sample, spare)
    if key in DEFINED_OPS:
        return check_defined(op, sample, spare)
    if key in SPECS:
        return check_random(op, sample, spare, key)
    return "unchecked", None
