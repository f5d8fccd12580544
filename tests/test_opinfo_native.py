"""Every op family the runtime runs natively, through PyTorch's own OpInfo
database: one table and one test.

For each family the table names its OpInfo entries and the dtypes to try;
every (entry, dtype) pair the CPU supports becomes one test, which runs all of
the entry's samples through the coverage tool's comparison
(``torch_tpu.tools.coverage.check_pair``: tpu against PyTorch CPU, forward,
with its tolerances) and requires

* the verdict "pass" (every sample ran and matched), or one of the verdicts
  the family allows: "pass-property" for random ops (values not comparable;
  determinism under torch.manual_seed, support and distribution against the
  CPU's checked instead, see torch_tpu/tools/coverage_props.py), and for a
  few families "cpu-error-skipped" (the CPU itself raises on every sample:
  the pair is skipped, not passed);
* zero CPU fallbacks while the samples ran.

Entries are matched by ``coverage.op_key`` (``name`` or
``name.variant``): ``keys`` match exactly, ``prefixes`` also match every
variant (``"round"`` matches ``round.decimals_3``), ``names`` match every
entry of that ``op.name``. Gradients, error paths and shapes the samples do
not reach are tested in each family's own test file; attention's OpInfo
test stays in test_attention_kernels.py, where it is checked sample by
sample against float64 (op_db marks dropout random).
"""
import dataclasses
import functools

import pytest
import torch

from torch_tpu.tools import coverage

ALL = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
       torch.int16, torch.int8, torch.uint8, torch.bool)
FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
F32_F64 = (torch.float32, torch.float64)


@dataclasses.dataclass(frozen=True)
class Family:
    keys: tuple = ()
    prefixes: tuple = ()
    names: tuple = ()
    dtypes: tuple = ALL
    allow: tuple = ()        # verdicts accepted besides "pass"
    xfail: frozenset = frozenset()  # (op_key, dtype): known rounding differences


def _w(text):
    return tuple(text.split())


# Half-precision rounding differs from the CPU kernel's by more than the
# tolerance on a few elements (the CPU rounds intermediate terms in the half
# type in ways not reproduced): expected to fail, reported if it passes.
_NORM_ROUNDING = frozenset({("nn.functional.grid_sample", torch.bfloat16)})

TABLE = {
    "batch_norm_pointwise_loss": Family(keys=_w("""
        _native_batch_norm_legit _batch_norm_with_update nn.functional.batch_norm
        native_batch_norm nn.functional.instance_norm nn.functional.mse_loss
        nn.functional.smooth_l1_loss nn.functional.huber_loss nn.functional.binary_cross_entropy
        nn.functional.channel_shuffle nn.functional.multi_margin_loss index_add scatter_add
        native_dropout_backward nn.functional.embedding narrow_copy""")),
    "bessel_igamma_factory_search": Family(prefixes=_w("""
        special.bessel_y0 special.bessel_y1 special.modified_bessel_i0 special.modified_bessel_i1
        special.modified_bessel_k0 special.modified_bessel_k1 special.scaled_modified_bessel_k0
        special.scaled_modified_bessel_k1 special.spherical_bessel_j0 special.airy_ai
        igamma igammac angle frexp clamp_min clamp_max
        logspace arange tril_indices triu_indices isin _segment_reduce""")),
    # Complex64/complex128 math (elementwise complex_math.c, sum/mean,
    # matmul_complex.c with complex alpha/beta too, cat). lerp is not listed:
    # its samples pass a complex weight, which its row does not take.
    "complex_math": Family(keys=_w("""
        abs acos acosh add addcdiv addcmul addmm addmm.decomposed addmv baddbmm angle asin asinh atan atanh
        bmm cat conj_physical cos cosh div.no_rounding_mode dot dstack einsum eq exp exp2 expm1
        float_power hstack inner kron linalg.vecdot log log10 log1p log2 masked_fill matmul mean
        mm mul mv ne neg outer pow reciprocal rsqrt rsub sgn sigmoid sin sinh sqrt square stack
        sub sum tan tanh tensordot true_divide vdot vstack where"""),
        dtypes=(torch.complex64, torch.complex128)),
    "conv": Family(names=_w("""
        nn.functional.conv1d nn.functional.conv2d nn.functional.conv3d
        nn.functional.conv_transpose1d nn.functional.conv_transpose2d
        nn.functional.conv_transpose3d"""), dtypes=FLOATS + (torch.int64,)),
    "unfold": Family(names=("nn.functional.unfold",), dtypes=FLOATS + (torch.bool,)),
    "fft": Family(names=_w("""
        fft.fft fft.fft2 fft.fftn fft.hfft fft.hfft2 fft.hfftn fft.ifft fft.ifft2 fft.ifftn
        fft.ihfft fft.ihfft2 fft.ihfftn fft.irfft fft.irfft2 fft.irfftn fft.rfft fft.rfft2
        fft.rfftn stft"""), allow=("cpu-error-skipped",)),
    "index": Family(names=_w("""
        __getitem__ index_put take put index_fill index_copy index_reduce scatter_reduce
        masked_scatter masked_select nonzero nonzero_static argwhere select_scatter
        slice_scatter diagonal_scatter as_strided_scatter nn.functional.embedding_bag
        repeat_interleave count_nonzero""")),
    "linalg_lapack": Family(prefixes=_w("""
        cholesky_inverse cholesky_solve geqrf linalg.cholesky linalg.cholesky_ex linalg.cond
        linalg.det linalg.eigh linalg.eigvalsh linalg.householder_product linalg.inv
        linalg.inv_ex linalg.lu linalg.lu_factor linalg.lu_factor_ex linalg.lu_solve
        linalg.matrix_norm linalg.matrix_power linalg.matrix_rank linalg.pinv linalg.qr
        linalg.slogdet linalg.solve linalg.solve_ex linalg.solve_triangular linalg.svd
        linalg.svdvals linalg.tensorinv linalg.tensorsolve logdet lu lu_solve lu_unpack ormqr
        pinverse svd triangular_solve linalg.lstsq linalg.ldl_factor linalg.ldl_factor_ex
        linalg.ldl_solve linalg.matrix_sqrth linalg.polar"""), dtypes=F32_F64),
    # Computed in float64 for float32 and float64 (kernels/linalg/matfn.c);
    # the half types go to the CPU.
    "linalg_matrix_exp": Family(keys=("matrix_exp",), dtypes=FLOATS),
    # geev (kernels/linalg/eig.c); complex input is native too (tests/test_linalg_kernels.py)
    "linalg_eig": Family(keys=_w("linalg.eig linalg.eigvals"), dtypes=F32_F64),
    "linalg_simple": Family(keys=_w("trace linalg.cross cross addbmm")),
    "nn_rare": Family(keys=_w("nn.functional.multilabel_margin_loss nn.functional.ctc_loss"),
                      dtypes=F32_F64),
    "norm_upsample": Family(keys=_w("""
        nn.functional.batch_norm nn.functional.instance_norm nn.functional.group_norm
        nn.functional.layer_norm nn.functional.rms_norm nn.functional.interpolate.linear
        nn.functional.interpolate.bilinear nn.functional.interpolate.bicubic
        nn.functional.interpolate.trilinear nn.functional.upsample_bilinear
        nn.functional.grid_sample"""), dtypes=FLOATS, xfail=_NORM_ROUNDING),
    "upsample_nearest": Family(keys=_w("""
        nn.functional.interpolate.nearest nn.functional.interpolate.nearest-exact
        nn.functional.upsample_nearest"""), dtypes=FLOATS + (torch.uint8,)),
    "upsample_aa": Family(keys=("_upsample_bilinear2d_aa",), dtypes=F32_F64),
    "upsample_u8": Family(keys=_w("""
        nn.functional.interpolate.bilinear nn.functional.upsample_bilinear
        _upsample_bilinear2d_aa"""), dtypes=(torch.uint8,)),
    "pool_pad": Family(keys=_w("""
        nn.functional.max_pool1d nn.functional.max_pool2d nn.functional.max_pool3d
        max_pool2d_with_indices_backward nn.functional.avg_pool1d nn.functional.avg_pool2d
        nn.functional.avg_pool3d nn.functional.adaptive_avg_pool1d
        nn.functional.adaptive_avg_pool2d nn.functional.adaptive_avg_pool3d
        nn.functional.adaptive_max_pool1d nn.functional.adaptive_max_pool2d
        nn.functional.adaptive_max_pool3d nn.functional.pad.constant nn.functional.pad.reflect
        nn.functional.pad.replicate nn.functional.pad.replicate_negative
        nn.functional.pad.circular nn.functional.max_unpool1d nn.functional.max_unpool1d.grad
        nn.functional.max_unpool2d nn.functional.max_unpool2d.grad nn.functional.max_unpool3d
        nn.functional.max_unpool3d.grad""")),
    "reduce": Family(keys=_w("""
        linalg.vector_norm norm norm.fro norm.inf nansum nanmean logsumexp aminmax equal std
        std.unbiased var var.unbiased var_mean var_mean.unbiased std_mean std_mean.unbiased
        count_nonzero cdist nn.functional.pdist dist nn.functional.cosine_similarity
        nn.functional.pairwise_distance renorm histc sum mean prod amax amin"""),
        dtypes=FLOATS + (torch.int64, torch.int32, torch.uint8, torch.bool)),
    "histogram": Family(keys=_w("histogram histogramdd"), dtypes=F32_F64),
    "hash": Family(keys=("hash_tensor",)),
    "random": Family(keys=_w("""
        normal normal.number_mean normal.in_place bernoulli uniform exponential geometric
        cauchy log_normal randn randn_like rand_like randint randint_like"""),
        dtypes=FLOATS + (torch.int64, torch.int32, torch.uint8, torch.bool),
        allow=(coverage.PASS_PROPERTY,)),
    "multinomial": Family(keys=("multinomial",), dtypes=FLOATS,
                          allow=(coverage.PASS_PROPERTY,)),
    "rsub_vdot_round_scatter": Family(keys=_w("""
        rsub __rsub__ vdot linalg.vecdot round.decimals_3 round.decimals_neg_3
        round.decimals_0 gather scatter""")),
    "sort_scan": Family(names=_w("""
        sort argsort msort topk kthvalue median nanmedian mode searchsorted bucketize cumsum
        cumprod cummax cummin logcumsumexp""")),
    "elementwise_special": Family(prefixes=_w("""
        acos asin atan acosh asinh atanh sinh cosh atan2 hypot copysign nextafter logaddexp
        logaddexp2 xlogy special.xlog1py heaviside frac sgn signbit isnan isinf isposinf
        isneginf isfinite isreal nan_to_num deg2rad rad2deg float_power bitwise_left_shift
        bitwise_right_shift gcd lcm floor_divide true_divide fmax fmin clamp exp2 logit sinc
        positive lgamma digamma polygamma mvlgamma erfc erfinv special.erfcx i0 special.i0e
        special.i1 special.i1e special.ndtr special.ndtri special.log_ndtr special.entr
        special.zeta special.polygamma special.bessel_j0 special.bessel_j1
        nn.functional.softplus nn.functional.hardsigmoid nn.functional.hardswish
        nn.functional.mish nn.functional.softshrink nn.functional.hardshrink
        nn.functional.logsigmoid nn.functional.glu nn.functional.celu nn.functional.selu
        nn.functional.prelu nn.functional.elu nn.functional.gelu nn.functional.silu
        nn.functional.tanhshrink tanh sigmoid div addr"""), allow=("cpu-error-skipped",)),
    "special_polynomials": Family(prefixes=_w("""
        special.chebyshev_polynomial_t special.chebyshev_polynomial_u
        special.chebyshev_polynomial_v special.chebyshev_polynomial_w
        special.shifted_chebyshev_polynomial_t special.shifted_chebyshev_polynomial_u
        special.shifted_chebyshev_polynomial_v special.shifted_chebyshev_polynomial_w
        special.hermite_polynomial_h special.hermite_polynomial_he
        special.laguerre_polynomial_l special.legendre_polynomial_p""")),
    "unique_eye": Family(names=_w("eye unique unique_consecutive bincount")),
    # complex64/complex128: Python complex numbers as operands (the samples'
    # scalar forms), fill/full/where with complex values, complex scans,
    # products, norms and var/std (these give the part dtype), logcumsumexp,
    # matrix_exp
    "complex": Family(keys=_w("""
        add sub mul rsub div.no_rounding_mode masked_fill fill full where sum mean prod
        cumsum cumprod linalg.vector_norm norm norm.fro norm.inf var var.unbiased std
        std.unbiased var_mean var_mean.unbiased std_mean std_mean.unbiased logcumsumexp
        matrix_exp"""),
        dtypes=(torch.complex64, torch.complex128)),
}


@functools.lru_cache(maxsize=None)
def _op_db():
    return tuple(coverage.load_op_db())


def _selected(fam):
    """The op_db entries a family names, in op_db order."""
    out = []
    for op in _op_db():
        key = coverage.op_key(op)
        if (key in fam.keys or op.name in fam.names
                or any(key == p or key.startswith(p + ".") for p in fam.prefixes)):
            out.append(op)
    return out


def _unmatched(fam):
    """Names in the family that match no op_db entry (a typo, or an entry
    PyTorch renamed: either way the family would test less than it says)."""
    have = {coverage.op_key(op) for op in _op_db()}
    names = {op.name for op in _op_db()}
    miss = [k for k in fam.keys if k not in have]
    miss += [n for n in fam.names if n not in names]
    miss += [p for p in fam.prefixes if not any(k == p or k.startswith(p + ".") for k in have)]
    return miss


def _pairs():
    seen, out = set(), []
    for family, fam in TABLE.items():
        for op in _selected(fam):
            key = coverage.op_key(op)
            for dt in coverage.op_dtypes(op, list(fam.dtypes)):
                if (key, dt) in seen:  # listed by two families: tested once
                    continue
                seen.add((key, dt))
                marks = ()
                if (key, dt) in fam.xfail:
                    marks = pytest.mark.xfail(reason="half-precision rounding differs from "
                                                     "the CPU kernel's", strict=False)
                out.append(pytest.param(family, op, dt, marks=marks,
                                        id=f"{family}-{key}-{coverage.dtype_name(dt)}"))
    return out


def test_fft_family_lists_every_transform():
    """A new fft.* transform in op_db is tested (the shifts are shape ops)."""
    have = {op.name for op in _op_db() if op.name.startswith("fft.") and "shift" not in op.name}
    assert have <= set(TABLE["fft"].names), have - set(TABLE["fft"].names)


def test_every_family_names_existing_opinfo_entries():
    bad = {family: miss for family, fam in TABLE.items() if (miss := _unmatched(fam))}
    assert not bad, bad


@pytest.mark.parametrize("family,op,dtype", _pairs())
def test_opinfo_native(family, op, dtype):
    rec = coverage.check_pair(op, dtype)
    assert rec["fallbacks"] == {}, rec["fallbacks"]
    if rec["status"] == "cpu-error-skipped" and "cpu-error-skipped" in TABLE[family].allow:
        pytest.skip(f"the CPU raises on every sample: {rec.get('message')}")
    assert rec["status"] in ("pass",) + TABLE[family].allow, rec
