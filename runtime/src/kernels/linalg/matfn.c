/* matfn.c — the linalg_matfn family: matrix functions and least squares.
 *
 *   linalg_lstsq(self, b, rcond, driver)  gels / gelsy / gelsd / gelss (see ls_parse
 *                            for PyTorch's output rules; whether gelsd/gelss return
 *                            residuals depends on the ranks: linalg_lstsq_count
 *                            computes them first, through `sync_size`)
 *
 *   linalg_matrix_exp(self)  scaling and squaring with the degree-13 Padé
 *                            approximant (Higham 2005): A is scaled by 2^-s so
 *                            that |A|_1 <= theta_13, exp(A) ~ (V - U)^-1 (V + U)
 *                            (getrf/getrs), then squared s times, in float64;
 *                            batches run in parallel. Its backward (PyTorch's
 *                            differential of exp through a 2n x 2n block
 *                            matrix) calls this forward again.
 * Native for float32 and float64, both computed in float64: a float32 result is
 * the float64 one rounded, so it is at least as close to the exact exponential as
 * PyTorch's CPU kernel (which works in float32 with a Taylor approximant and, for
 * matrices of large norm, loses ~eps32 * |exp(A)| in the small entries: there the
 * two differ by more than float32's element-wise tolerance and the float64
 * reference decides, see tests/test_linalg_kernels.py). float16 and bfloat16 are
 * native the same way (float64 work, rounded once to the half type): PyTorch's CPU
 * kernel computes them in their own precision and overflows to inf/NaN where the
 * exact exponential is finite and representable (randn 3 x 3 matrices already),
 * so those results are checked against the float64 one, not against the CPU's.
 * complex64 and complex128: exp(A + iB) = C + iD read off the exponential of the
 * real 2n x 2n matrix [[A, -B], [B, A]] (= [[C, -D], [D, C]]), the same float64
 * algorithm (its 1-norm bounds the complex one by at most a factor of 2, so at most
 * one more squaring).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/linalg/linalg.h"

#define BAD(...) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, __VA_ARGS__)

static const double k_pade13[14] = {64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
                                    1187353796428800.0,  129060195264000.0,   10559470521600.0,
                                    670442572800.0,      33522128640.0,       1323241920.0,
                                    40840800.0,          960960.0,            16380.0,
                                    182.0,               1.0};
static const double k_theta13 = 5.371920351148152;

/* exp of the n x n column-major matrix a (overwritten with the result); t: 7 n x n
 * scratch matrices, ipiv: n ints. False if the Padé denominator is singular (NaN input). */
static bool expm(const la_impl_t* im, double* a, int64_t n, double* t, int* ipiv) {
  int64_t nn = n * n;
  int ld = la_ld(n);
  double norm = 0;
  for (int64_t c = 0; c < n; ++c) {
    double s = 0;
    for (int64_t r = 0; r < n; ++r) s += fabs(a[c * n + r]);
    if (s > norm || s != s) norm = s;
  }
  /* NaN in: NaN out, as PyTorch. An infinite entry too: no scaling brings
   * it under theta_13 (the squaring count would overflow int); PyTorch's
   * own result there is overflow debris (inf, 0 or NaN by case). */
  if (norm != norm || isinf(norm)) {
    for (int64_t e = 0; e < nn; ++e) a[e] = NAN;
    return true;
  }
  int s = 0; /* squarings: enough to bring the norm under theta_13 */
  if (norm > k_theta13) s = (int)ceil(log2(norm / k_theta13));
  if (s > 0) {
    double f = ldexp(1.0, -s);
    for (int64_t e = 0; e < nn; ++e) a[e] *= f;
  }
  double *a2 = t, *a4 = t + nn, *a6 = t + 2 * nn, *u = t + 3 * nn, *v = t + 4 * nn,
         *w = t + 5 * nn, *z = t + 6 * nn;
  const double* b = k_pade13;
  im->gemm('N', 'N', ld, ld, ld, 1.0, a, ld, a, ld, 0.0, a2, ld);
  im->gemm('N', 'N', ld, ld, ld, 1.0, a2, ld, a2, ld, 0.0, a4, ld);
  im->gemm('N', 'N', ld, ld, ld, 1.0, a4, ld, a2, ld, 0.0, a6, ld);
  for (int64_t e = 0; e < nn; ++e) w[e] = b[13] * a6[e] + b[11] * a4[e] + b[9] * a2[e];
  for (int64_t e = 0; e < nn; ++e) z[e] = b[7] * a6[e] + b[5] * a4[e] + b[3] * a2[e];
  for (int64_t i = 0; i < n; ++i) z[i * n + i] += b[1];
  im->gemm('N', 'N', ld, ld, ld, 1.0, a6, ld, w, ld, 1.0, z, ld); /* z = a6 w + z */
  im->gemm('N', 'N', ld, ld, ld, 1.0, a, ld, z, ld, 0.0, u, ld);  /* U = A z */
  for (int64_t e = 0; e < nn; ++e) w[e] = b[12] * a6[e] + b[10] * a4[e] + b[8] * a2[e];
  for (int64_t e = 0; e < nn; ++e) v[e] = b[6] * a6[e] + b[4] * a4[e] + b[2] * a2[e];
  for (int64_t i = 0; i < n; ++i) v[i * n + i] += b[0];
  im->gemm('N', 'N', ld, ld, ld, 1.0, a6, ld, w, ld, 1.0, v, ld); /* V = a6 w + v */
  for (int64_t e = 0; e < nn; ++e) {
    double p = v[e] + u[e], q = v[e] - u[e];
    a[e] = p; /* the right-hand side */
    w[e] = q; /* the denominator */
  }
  if (im->getrf(ld, ld, w, ld, ipiv) != 0) return false;
  im->getrs('N', ld, ld, w, ld, ipiv, a, ld);
  for (int i = 0; i < s; ++i) {
    im->gemm('N', 'N', ld, ld, ld, 1.0, a, ld, a, ld, 0.0, z, ld);
    memcpy(a, z, (size_t)nn * sizeof(double));
  }
  return true;
}

/* complex input: m 0/2 the real/imaginary parts of A, 1/3 those of out; the work is
 * the real 2n x 2n embedding (column-major, ld 2n). */
static int expm_batch_cx(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n, n2 = 2 * n;
  if (n == 0) return 0;
  double* a = (double*)ws;
  double* t = a + n2 * n2;
  int* ipiv = (int*)(t + 7 * n2 * n2);
  int64_t in_off = la_off(&j->bt, &j->m[0], b), out_off = la_off(&j->bt, &j->m[1], b);
  la_load(&j->m[0], in_off, a, TPU_DTYPE_F64, n2);              /* A, top left */
  la_load(&j->m[2], in_off, a + n, TPU_DTYPE_F64, n2);          /* B, bottom left */
  la_load(&j->m[0], in_off, a + n * n2 + n, TPU_DTYPE_F64, n2); /* A, bottom right */
  for (int64_t c = 0; c < n; ++c)                               /* -B, top right */
    for (int64_t r = 0; r < n; ++r) a[(n + c) * n2 + r] = -a[c * n2 + n + r];
  if (!expm(j->im, a, n2, t, ipiv))
    for (int64_t e = 0; e < n2 * n2; ++e) a[e] = NAN;
  la_store(&j->m[1], out_off, a, TPU_DTYPE_F64, n2);     /* C, top left */
  la_store(&j->m[3], out_off, a + n, TPU_DTYPE_F64, n2); /* D, bottom left */
  return 0;
}

/* m: 0 A, 1 out (any floating dtype; the work is float64) */
static int expm_batch(const la_job_t* j, int64_t b, char* ws) {
  int64_t n = j->n;
  double* a = (double*)ws;
  double* t = a + n * n;
  int* ipiv = (int*)(t + 7 * n * n);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, TPU_DTYPE_F64, la_ld(n));
  int r = 0;
  if (n && !expm(j->im, a, n, t, ipiv)) {
    for (int64_t e = 0; e < n * n; ++e) a[e] = NAN;
    r = 0;
  }
  la_store(&j->m[1], la_off(&j->bt, &j->m[1], b), a, TPU_DTYPE_F64, la_ld(n));
  return r;
}

static tpu_status_t expm_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  const tpu_view_t* a = ku_input(def, node, "self");
  const tpu_view_t* o = node->num_outputs > 0 ? &node->outputs[0] : NULL;
  if (!a || !o || a->ndim < 2 || o->ndim < 2) BAD("matrix_exp: expects matrices");
  la_job_t j;
  memset(&j, 0, sizeof(j));
  j.im = la_impl_for(TPU_DTYPE_F64);
  if (!j.im) return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "matrix_exp without LAPACK");
  tpu_view_t parts[4]; /* complex: the real and imaginary parts of self and out */
  bool cx = tpu_dtype_is_complex(a->dtype);
  if (cx) {
    if (o->dtype != a->dtype) BAD("matrix_exp: output of another dtype");
    const tpu_view_t* vs[2] = {a, o};
    for (int k = 0; k < 4; ++k) {
      tpu_view_t* p = &parts[k];
      *p = *vs[k % 2];
      p->dtype = tpu_dtype_part(p->dtype);
      for (int32_t d = 0; d < p->ndim; ++d) p->strides[d] *= 2;
      if (k >= 2) p->addr += tpu_dtype_size(p->dtype);
    }
    j.m[2] = la_mat(&parts[2]), j.m[3] = la_mat(&parts[3]);
    a = &parts[0], o = &parts[1];
  }
  j.m[0] = la_mat(a), j.m[1] = la_mat(o);
  const la_mat_t* ms[1] = {&j.m[0]};
  la_bat_of(&j.bt, ms, 1);
  j.n = j.m[0].rows;
  if (j.m[0].cols != j.n || !la_shape_is(&j.m[1], &j.bt, j.n, j.n))
    BAD("matrix_exp: expects square matrices");
  int64_t w = cx ? 2 * j.n : j.n; /* the order of the matrix exponentiated */
  j.ws_bytes = (size_t)(8 * w * w) * sizeof(double) + (size_t)(w + 1) * sizeof(int) + 64;
  j.fn = cx ? expm_batch_cx : expm_batch;
  j.work = 12 * w * w * w;
  return la_run(&j);
}

/* floating (float16, bfloat16, float32, float64) and complex square matrices (see
 * the top of the file). */
static tpu_status_t expm_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t* a = ku_input(def, node, "self");
  if (!a || !(tpu_dtype_is_floating(a->dtype) || tpu_dtype_is_complex(a->dtype)) ||
      a->ndim < 2 || a->sizes[a->ndim - 1] != a->sizes[a->ndim - 2] ||
      a->sizes[a->ndim - 1] > 0x3fff)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "matrix_exp of floating square matrices");
  for (int32_t i = 0; i < node->num_outputs; ++i)
    if (node->outputs[i].dtype != a->dtype)
      return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "output of another dtype");
  return TPU_OK;
}

/* ---- least squares ----------------------------------------------------------------- */

/* linalg_lstsq(self=A, b=B, rcond, driver) -> solution, residuals, rank, singular_values,
 * with PyTorch's CPU semantics: driver None is gelsy; rcond None is eps * max(m, n);
 * solution is (*, n, k); residuals (*, k) when m > n, the driver is not gelsy and (for
 * gelsd/gelss) every matrix has rank n, else empty; rank (*,) int64 unless gels;
 * singular values (*, min(m, n)) for gelsd/gelss. Whether gelsd/gelss residuals exist
 * depends on the ranks: the row's `sync_size` comes from linalg_lstsq_count (1: every
 * rank is n). */
typedef enum { LS_GELS, LS_GELSY, LS_GELSD, LS_GELSS } ls_driver_t;

typedef struct ls_args {
  const tpu_view_t *a, *b;
  ls_driver_t driver;
  double rcond;
  int64_t m, n, k, mn, mx;
  la_bat_t bt;
  int64_t sync; /* -1: unknown */
  bool residuals, rank, sv;
} ls_args_t;

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

static tpu_status_t ls_parse(const tpu_op_def_t* def, const tpu_node_t* node, ls_args_t* p) {
  memset(p, 0, sizeof(*p));
  p->a = ku_input(def, node, "self");
  p->b = ku_input(def, node, "b");
  if (!p->a || !p->b || p->a->ndim < 2 || p->b->ndim != p->a->ndim)
    return unimpl("lstsq of matrices with matrix right-hand sides");
  if (!la_impl_for(p->a->dtype) || p->b->dtype != p->a->dtype) return unimpl("lstsq dtypes");
  for (int32_t d = 0; d < p->a->ndim - 2; ++d)
    if (p->a->sizes[d] != p->b->sizes[d]) return unimpl("lstsq with broadcast batches");
  la_mat_t ma = la_mat(p->a);
  const la_mat_t* ms[1] = {&ma};
  la_bat_of(&p->bt, ms, 1);
  p->m = ma.rows, p->n = ma.cols, p->k = p->b->sizes[p->b->ndim - 1];
  if (p->b->sizes[p->b->ndim - 2] != p->m) return unimpl("lstsq: incompatible shapes");
  p->mn = p->m < p->n ? p->m : p->n, p->mx = p->m > p->n ? p->m : p->n;
  for (int32_t d = 0; d < p->a->ndim; ++d)
    if (p->a->sizes[d] > 0x3fffffff || p->b->sizes[d] > 0x3fffffff) return unimpl("too large");
  const tpu_attr_t* drv = ku_attr(def, node, "driver");
  p->driver = LS_GELSY;
  if (drv && drv->kind == TPU_ATTR_STR) {
    const char* d = drv->u.str;
    if (!strcmp(d, "gels")) p->driver = LS_GELS;
    else if (!strcmp(d, "gelsd")) p->driver = LS_GELSD;
    else if (!strcmp(d, "gelss")) p->driver = LS_GELSS;
    else if (strcmp(d, "gelsy")) return unimpl("lstsq driver");
  }
  const tpu_attr_t* rc = ku_attr(def, node, "rcond");
  p->rcond = (rc && (rc->kind == TPU_ATTR_FLOAT || rc->kind == TPU_ATTR_INT))
                 ? tpu_attr_float(rc, 0.0)
                 : (p->a->dtype == TPU_DTYPE_F32 ? 1.1920928955078125e-07 : 2.220446049250313e-16) *
                       (double)p->mx;
  const tpu_attr_t* s = ku_attr(def, node, "sync_size");
  p->sync = (s && s->kind == TPU_ATTR_INT) ? s->u.i : -1;
  bool svd = p->driver == LS_GELSD || p->driver == LS_GELSS;
  p->rank = p->driver != LS_GELS;
  p->sv = svd;
  p->residuals = p->m > p->n && p->driver != LS_GELSY && (!svd || p->sync == 1);
  return TPU_OK;
}

/* m: 0 A, 1 B, 2 solution, 3 residuals, 4 rank, 5 singular values; c[0] driver;
 * f[0] residuals, f[1] count only (into the batch's rank slot of ws), x rcond */
static int ls_batch(const la_job_t* j, int64_t b, char* ws) {
  const la_impl_t* im = j->im;
  size_t es = tpu_dtype_size(im->w);
  int64_t m = j->m[0].rows, n = j->m[0].cols, k = j->k, mx = m > n ? m : n, mn = m < n ? m : n;
  char* at = ws;
  char* a = la_take(&at, m * n, es);
  char* x = la_take(&at, mx * k, es);
  char* s = la_take(&at, mn, es);
  int* iwork = (int*)la_take(&at, j->liwork > n ? j->liwork : n, sizeof(int));
  char* work = la_take(&at, j->lwork, es);
  la_load(&j->m[0], la_off(&j->bt, &j->m[0], b), a, im->w, la_ld(m));
  memset(x, 0, la_bytes(mx * k, es));
  la_load(&j->m[1], la_off(&j->bt, &j->m[1], b), x, im->w, la_ld(mx));
  int info = 0, rank = 0;
  if (mn > 0 && k > 0) {
    switch (j->c[0]) { /* the driver (not a dtype) */
      case LS_GELS:
        info = im->gels((int)m, (int)n, (int)k, a, la_ld(m), x, la_ld(mx), work, (int)j->lwork);
        break;
      case LS_GELSY:
        memset(iwork, 0, (size_t)n * sizeof(int));
        info = im->gelsy((int)m, (int)n, (int)k, a, la_ld(m), x, la_ld(mx), iwork, j->x, &rank,
                         work, (int)j->lwork);
        break;
      case LS_GELSD:
        info = im->gelsd((int)m, (int)n, (int)k, a, la_ld(m), x, la_ld(mx), s, j->x, &rank, work,
                         (int)j->lwork, iwork);
        break;
      default:
        info = im->gelss((int)m, (int)n, (int)k, a, la_ld(m), x, la_ld(mx), s, j->x, &rank, work,
                         (int)j->lwork);
    }
  } else if (mn > 0) { /* no right-hand sides: the rank and singular values still */
    int64_t one = 1;
    char* xx = la_take(&at, mx, es);
    memset(xx, 0, la_bytes(mx, es));
    if (j->c[0] == LS_GELSY) {
      memset(iwork, 0, (size_t)n * sizeof(int));
      info = im->gelsy((int)m, (int)n, (int)one, a, la_ld(m), xx, la_ld(mx), iwork, j->x, &rank,
                       work, (int)j->lwork);
    } else if (j->c[0] == LS_GELSD) {
      info = im->gelsd((int)m, (int)n, (int)one, a, la_ld(m), xx, la_ld(mx), s, j->x, &rank, work,
                       (int)j->lwork, iwork);
    } else if (j->c[0] == LS_GELSS) {
      info = im->gelss((int)m, (int)n, (int)one, a, la_ld(m), xx, la_ld(mx), s, j->x, &rank, work,
                       (int)j->lwork);
    }
  }
  if (info != 0) return info;
  if (j->f[1]) return rank == n ? 0 : -1000000; /* count: any rank below n */
  la_mat_t sol = j->m[2];
  la_store(&sol, la_off(&j->bt, &sol, b), x, im->w, la_ld(mx));
  if (j->f[0]) { /* residuals: squared rows n..m-1 of each column */
    for (int64_t c = 0; c < k; ++c) {
      double r = 0;
      for (int64_t i = n; i < m; ++i) {
        double v = im->get(x, c * mx + i);
        r += v * v;
      }
      view_set_f64(j->m[3].v, la_off(&j->bt, &j->m[3], b) + c * j->m[3].rs, r);
    }
  }
  if (j->m[4].v) view_set_i64(j->m[4].v, la_off(&j->bt, &j->m[4], b), rank);
  if (j->m[5].v) la_store(&j->m[5], la_off(&j->bt, &j->m[5], b), s, im->w, la_ld(mn));
  return 0;
}

static void ls_setup(la_job_t* j, const ls_args_t* p) {
  memset(j, 0, sizeof(*j));
  j->im = la_impl_for(p->a->dtype);
  j->bt = p->bt;
  j->m[0] = la_mat(p->a), j->m[1] = la_mat(p->b);
  j->k = p->k;
  j->c[0] = (char)p->driver;
  j->x = p->rcond;
  j->f[0] = p->residuals;
  int64_t m = p->m, n = p->n, k = p->k > 0 ? p->k : 1, mx = p->mx;
  char q[16];
  int iq = 1, rank = 0;
  memset(q, 0, sizeof(q));
  j->lwork = j->liwork = 1;
  if (p->mn > 0) {
    switch (p->driver) { /* workspace queries (lwork = -1) */
      case LS_GELS:
        j->im->gels((int)m, (int)n, (int)k, q, la_ld(m), q, la_ld(mx), q, -1);
        break;
      case LS_GELSY:
        j->im->gelsy((int)m, (int)n, (int)k, q, la_ld(m), q, la_ld(mx), &iq, p->rcond, &rank, q,
                     -1);
        break;
      case LS_GELSD:
        j->im->gelsd((int)m, (int)n, (int)k, q, la_ld(m), q, la_ld(mx), q, p->rcond, &rank, q, -1,
                     &iq);
        j->liwork = iq > 1 ? iq : 1;
        break;
      default:
        j->im->gelss((int)m, (int)n, (int)k, q, la_ld(m), q, la_ld(mx), q, p->rcond, &rank, q,
                     -1);
    }
    double w = j->im->get(q, 0);
    j->lwork = w > 1 ? (int64_t)w + 1 : 1;
  }
  size_t es = tpu_dtype_size(j->im->w);
  j->ws_bytes = la_bytes(m * n, es) + la_bytes(mx * k, es) + la_bytes(p->mn, es) +
                la_bytes(j->liwork > n ? j->liwork : n, sizeof(int)) + la_bytes(j->lwork, es) +
                la_bytes(mx, es);
  j->fn = ls_batch;
  j->work = 4 * m * n * (n + k);
}

static tpu_status_t ls_status(const la_job_t* j) {
  if (j->err_info > 0)
    BAD("linalg.lstsq: The least squares solution could not be computed because the input "
        "matrix does not have full rank (error code: %d).",
        j->err_info);
  if (j->err_info < 0 && j->err_info != -1000000)
    BAD("linalg.lstsq: LAPACK argument %d was invalid", -j->err_info);
  return TPU_OK;
}

static void set_shape(tpu_view_t* v, tpu_dtype_t dt, int32_t nb, const int64_t* batch,
                      int32_t extra, const int64_t* tail) {
  memset(v, 0, sizeof(*v));
  v->dtype = dt;
  v->ndim = nb + extra;
  for (int32_t d = 0; d < nb; ++d) v->sizes[d] = batch[d];
  for (int32_t d = 0; d < extra; ++d) v->sizes[nb + d] = tail[d];
  tpu_view_set_contiguous(v);
}

static tpu_status_t ls_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* outs) {
  ls_args_t p;
  TPU_RETURN_IF_ERROR(ls_parse(def, node, &p));
  if (strstr(def->name, "_count")) {
    memset(&outs[0], 0, sizeof(outs[0]));
    outs[0].dtype = TPU_DTYPE_I64;
    return TPU_OK;
  }
  bool svd = p.driver == LS_GELSD || p.driver == LS_GELSS;
  if (svd && p.m > p.n && p.sync < 0) return unimpl("needs the ranks (sync_size)");
  tpu_dtype_t dt = p.a->dtype;
  const int64_t* batch = p.a->sizes;
  int32_t nb = p.bt.nb;
  int64_t sol[2] = {p.n, p.k}, zero[1] = {0};
  set_shape(&outs[0], dt, nb, batch, 2, sol);
  if (p.residuals)
    set_shape(&outs[1], dt, nb, batch, 1, &p.k);
  else
    set_shape(&outs[1], dt, 0, batch, 1, zero);
  if (p.rank)
    set_shape(&outs[2], TPU_DTYPE_I64, nb, batch, 0, zero);
  else
    set_shape(&outs[2], TPU_DTYPE_I64, 0, batch, 1, zero);
  if (p.sv)
    set_shape(&outs[3], dt, nb, batch, 1, &p.mn);
  else
    set_shape(&outs[3], dt, 0, batch, 1, zero);
  return TPU_OK;
}

static tpu_status_t ls_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  ls_args_t p;
  return ku_unimplemented(ls_parse(def, node, &p));
}

static tpu_status_t ls_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  ls_args_t p;
  TPU_RETURN_IF_ERROR(ls_parse(def, node, &p));
  tpu_view_t want[4];
  la_job_t j;
  if (strstr(def->name, "_count")) { /* 1 when every matrix has rank n */
    if (node->num_outputs < 1 || tpu_view_numel(&node->outputs[0]) != 1)
      BAD("lstsq count: unexpected output");
    p.residuals = false;
    ls_setup(&j, &p);
    j.f[1] = true;
    TPU_RETURN_IF_ERROR(la_run(&j));
    TPU_RETURN_IF_ERROR(ls_status(&j));
    view_set_i64(&node->outputs[0], 0, j.err_info == -1000000 ? 0 : 1);
    return TPU_OK;
  }
  TPU_RETURN_IF_ERROR(ls_infer(def, node, want));
  if (node->num_outputs < 4) BAD("lstsq: missing outputs");
  for (int i = 0; i < 4; ++i)
    if (!views_same_shape(&node->outputs[i], &want[i])) BAD("lstsq: output %d of another shape", i);
  ls_setup(&j, &p);
  j.m[2] = la_mat(&node->outputs[0]);
  if (p.residuals) j.m[3] = la_vec(&node->outputs[1]);
  if (p.rank) j.m[4] = la_scalar(&node->outputs[2]);
  if (p.sv) j.m[5] = la_vec(&node->outputs[3]);
  TPU_RETURN_IF_ERROR(la_run(&j));
  return ls_status(&j);
}

static const tpu_op_def_t k_rows[] = {
    {.name = "linalg_matrix_exp", .inputs = "self", .attrs = "", .outputs = "out",
     .aten = "linalg_matrix_exp linalg_matrix_exp.out", .kernel = expm_kernel, .infer = NULL,
     .check = expm_check, .flags = TPU_OP_COMPLEX},
    {.name = "linalg_lstsq", .inputs = "self,b", .attrs = "rcond,driver,sync_size",
     .outputs = "solution,residuals,rank,singular_values", .aten = "linalg_lstsq linalg_lstsq.out",
     .kernel = ls_kernel, .infer = ls_infer, .check = ls_check},
    {.name = "linalg_lstsq_count", .inputs = "self,b", .attrs = "rcond,driver,sync_size",
     .outputs = "count", .aten = "", .kernel = ls_kernel, .infer = ls_infer, .check = ls_check},
};

const tpu_op_family_t tpu_family_linalg_matfn = {"linalg_matfn", k_rows,
                                                 (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
