/* kernels/elementwise/specfun_t.h — special functions written once over an element
 * type (internal): the table evaluators (specfun_eval.inc) and the
 * Bessel/Airy functions (specfun_bessel.inc) are included twice, with SF_T
 * float (functions named <name>_f) and SF_T double (<name>): float
 * tensors are evaluated in float and double tensors in double, as
 * PyTorch's CPU kernels do, so overflow, underflow and rounding land where
 * CPU's do. The incomplete gamma functions (specfun_igamma.h) are double
 * only.
 *
 * <tgmath.h> makes the libm calls generic, so `exp(x)` is expf for a float
 * x and exp for a double.
 */
#ifndef TPU_KERNELS_SPECFUN_T_H_
#define TPU_KERNELS_SPECFUN_T_H_

#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <tgmath.h>

#include "kernels/elementwise/specfun_coef.h"
#include "kernels/elementwise/specfun_igamma.h"

#define SF_CAT_(a, b) a##b
#define SF_CAT(a, b) SF_CAT_(a, b)
#define SF_FN(n) SF_CAT(n, SF_SUF)

/* SF_TAB(t): table t of specfun_coef.h in SF_T; SF_PICK(p, f): field f of a
 * description, or its float twin f_f. */
#define SF_TAB(t) SF_CAT(t, SF_SUF)
#define SF_PICK(p, f) ((p)->SF_CAT(f, SF_SUF))

#define SF_T float
#define SF_SUF _f
#define SF_EPS FLT_EPSILON
#include "kernels/elementwise/specfun_eval.inc"
#include "kernels/elementwise/specfun_bessel.inc"
#undef SF_T
#undef SF_SUF
#undef SF_EPS

#define SF_T double
#define SF_SUF
#define SF_EPS DBL_EPSILON
#include "kernels/elementwise/specfun_eval.inc"
#include "kernels/elementwise/specfun_bessel.inc"
#undef SF_T
#undef SF_SUF
#undef SF_EPS

#endif /* TPU_KERNELS_SPECFUN_T_H_ */
