/* kernels/specfun.h — special functions in double precision (internal).
 *
 * Scalar ports of the functions PyTorch's CPU kernels use (ATen's
 * native/Math.h), so results agree with CPU to rounding: zeta (Hurwitz),
 * digamma, trigamma, polygamma, erfinv, i0/i0e/i1/i1e, ndtri, erfcx and
 * log_ndtr. The elementwise kernels evaluate them in double for every
 * floating dtype and round (float32 results are then within an ulp or two
 * of CPU's float evaluation, far inside OpInfo's tolerances).
 *
 * zeta, digamma, polevl, chbevl, the i0/i1 families and ndtri are derived
 * from the Cephes Math Library (Copyright (c) 2018, Steven Moshier; 3-clause
 * BSD license, see ATen's note "[3-Clause BSD License for the Cephes Math
 * Library]"); erfinv from Gary L. Pavlis's rational approximation with two
 * Newton steps, as in ATen.
 */
#ifndef TPU_KERNELS_SPECFUN_H_
#define TPU_KERNELS_SPECFUN_H_

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define SF_PI 3.14159265358979323846
#define SF_SQRT1_2 0.70710678118654752440
#define SF_1_SQRTPI 0.56418958354775628695

static inline double sf_polevl(double x, const double* a, int len) {
  double r = 0;
  for (int i = 0; i <= len; ++i) r = r * x + a[i];
  return r;
}

static inline double sf_chbevl(double x, const double* a, int len) {
  double b0 = a[0], b1 = 0, b2 = 0;
  for (int i = 1; i < len; ++i) {
    b2 = b1;
    b1 = b0;
    b0 = x * b1 - b2 + a[i];
  }
  return 0.5 * (b0 - b2);
}

/* Hurwitz zeta(x, q). */
static inline double sf_zeta(double x, double q) {
  static const double A[] = {12.0,
                             -720.0,
                             30240.0,
                             -1209600.0,
                             47900160.0,
                             -1.8924375803183791606e9,
                             7.47242496e10,
                             -2.950130727918164224e12,
                             1.1646782814350067249e14,
                             -4.5979787224074726105e15,
                             1.8152105401943546773e17,
                             -7.1661652561756670113e18};
  const double MACHEP = 1.11022302462515654042E-16;
  if (x == 1) return INFINITY;
  if (x < 1) return NAN;
  if (q <= 0) {
    if (q == floor(q)) return INFINITY;
    if (x != floor(x)) return NAN;
  }
  double s = pow(q, -x), a = q, b = 0;
  int i = 0;
  while (i < 9 || a <= 9.0) {
    i += 1;
    a += 1;
    b = pow(a, -x);
    s += b;
    if (-MACHEP * s < b && b < MACHEP * s) return s;
  }
  double w = a;
  s += b * w / (x - 1);
  s -= 0.5 * b;
  a = 1;
  double k = 0;
  for (i = 0; i < 12; i++) {
    a *= x + k;
    b /= w;
    double t = a * b / A[i];
    s = s + t;
    t = fabs(t / s);
    if (t < MACHEP) return s;
    k += 1;
    a *= x + k;
    b /= w;
    k += 1;
  }
  return s;
}

static inline double sf_digamma(double x) {
  static const double A[] = {8.33333333333333333333E-2, -2.10927960927960927961E-2,
                             7.57575757575757575758E-3, -4.16666666666666666667E-3,
                             3.96825396825396825397E-3, -8.33333333333333333333E-3,
                             8.33333333333333333333E-2};
  const double PSI_10 = 2.25175258906672110764;
  if (x == 0) return copysign(INFINITY, -x);
  double result = 0;
  if (x < 0) {
    if (x == trunc(x)) return NAN;
    double q, r = modf(x, &q);
    result = -SF_PI / tan(SF_PI * r);
    x = 1 - x;
  }
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  if (x == 10) return result + PSI_10;
  double y = 0;
  if (x < 1.0e17) {
    double z = 1.0 / (x * x);
    y = z * sf_polevl(z, A, 6);
  }
  return result + log(x) - (0.5 / x) - y;
}

static inline double sf_trigamma(double x) {
  double sign = +1, result = 0;
  if (x < 0.5) {
    sign = -1;
    const double s = sin(SF_PI * x);
    result -= (SF_PI * SF_PI) / (s * s);
    x = 1 - x;
  }
  for (int i = 0; i < 6; ++i) {
    result += 1 / (x * x);
    x += 1;
  }
  const double ixx = 1 / (x * x);
  result += (1 + 1 / (2 * x) + ixx * (1. / 6 - ixx * (1. / 30 - ixx * (1. / 42)))) / x;
  return sign * result;
}

/* polygamma(n, x), n >= 0. */
static inline double sf_polygamma(int64_t n, double x) {
  if (n == 0) return sf_digamma(x);
  if (n == 1) return sf_trigamma(x);
  double nd = (double)n;
  return ((n % 2) ? 1.0 : -1.0) * exp(lgamma(nd + 1)) * sf_zeta(nd + 1, x);
}

/* float versions, as ATen evaluates them for float (and half) tensors:
 * near the poles the float rounding of pi x decides the value, so CPU's
 * results are only reproduced by the same float arithmetic. */
static inline float sf_digamma_f(float x) {
  static const float A[] = {8.33333333333333333333E-2f, -2.10927960927960927961E-2f,
                            7.57575757575757575758E-3f, -4.16666666666666666667E-3f,
                            3.96825396825396825397E-3f, -8.33333333333333333333E-3f,
                            8.33333333333333333333E-2f};
  if (x == 0) return copysignf(INFINITY, -x);
  float result = 0;
  if (x < 0) {
    if (x == truncf(x)) return NAN;
    double q, r = modf((double)x, &q);
    result = -(float)(SF_PI / tan(SF_PI * r));
    x = 1 - x;
  }
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  if (x == 10) return result + 2.25175258906672110764f;
  float y = 0;
  if (x < 1.0e17f) {
    float z = 1 / (x * x), p = 0;
    for (int i = 0; i <= 6; ++i) p = p * z + A[i];
    y = z * p;
  }
  return result + logf(x) - (0.5f / x) - y;
}

static inline float sf_trigamma_f(float x) {
  float sign = +1, result = 0;
  const float pi = (float)SF_PI;
  if (x < 0.5f) {
    sign = -1;
    const float s = sinf(pi * x);
    result -= (pi * pi) / (s * s);
    x = 1 - x;
  }
  for (int i = 0; i < 6; ++i) {
    result += 1 / (x * x);
    x += 1;
  }
  const float ixx = 1 / (x * x);
  result += (1 + 1 / (2 * x) + ixx * (1.f / 6 - ixx * (1.f / 30 - ixx * (1.f / 42)))) / x;
  return sign * result;
}

static inline float sf_polygamma_f(int64_t n, float x) {
  if (n == 0) return sf_digamma_f(x);
  if (n == 1) return sf_trigamma_f(x);
  float nf = (float)n;
  return ((n % 2) ? 1.0f : -1.0f) * expf(lgammaf(nf + 1)) * (float)sf_zeta((double)(nf + 1), (double)x);
}

static inline double sf_erfinv(double y) {
  static const double a[4] = {0.886226899, -1.645349621, 0.914624893, -0.140543331};
  static const double b[4] = {-2.118377725, 1.442710462, -0.329097515, 0.012229801};
  static const double c[4] = {-1.970840454, -1.624906493, 3.429567803, 1.641345311};
  static const double d[2] = {3.543889200, 1.637067800};
  double x, z, num, dem, ya = fabs(y);
  if (ya > 1.0) return NAN;
  if (ya == 1.0) return copysign(INFINITY, y);
  if (ya <= 0.7) {
    z = y * y;
    num = (((a[3] * z + a[2]) * z + a[1]) * z + a[0]);
    dem = ((((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0);
    x = y * num / dem;
  } else {
    z = sqrt(-log((1.0 - ya) / 2.0));
    num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    dem = (d[1] * z + d[0]) * z + 1.0;
    x = copysign(num, y) / dem;
  }
  x = x - (erf(x) - y) / ((2.0 * SF_1_SQRTPI) * exp(-x * x));
  x = x - (erf(x) - y) / ((2.0 * SF_1_SQRTPI) * exp(-x * x));
  return x;
}

/* Chebyshev coefficients of exp(-x) I0(x) on [0, 8] and of exp(-x) sqrt(x)
 * I0(x) on [8, inf); likewise for I1. */
static const double sf_i0e_A[30] = {
    -4.41534164647933937950E-18, 3.33079451882223809783E-17,  -2.43127984654795469359E-16,
    1.71539128555513303061E-15,  -1.16853328779934516808E-14, 7.67618549860493561688E-14,
    -4.85644678311192946090E-13, 2.95505266312963983461E-12,  -1.72682629144155570723E-11,
    9.67580903537323691224E-11,  -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8,  6.04699502254191894932E-8,   -2.67079385394061173391E-7,
    1.11738753912010371815E-6,   -4.41673835845875056359E-6,  1.64484480707288970893E-5,
    -5.75419501008210370398E-5,  1.88502885095841655729E-4,   -5.76375574538582365885E-4,
    1.63947561694133579842E-3,   -4.32430999505057594430E-3,  1.05464603945949983183E-2,
    -2.37374148058994688156E-2,  4.93052842396707084878E-2,   -9.49010970480476444210E-2,
    1.71620901522208775349E-1,   -3.04682672343198398683E-1,  6.76795274409476084995E-1};
static const double sf_i0e_B[25] = {
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
    3.46122286769746109310E-17,  -2.82762398051658348494E-16, -3.42548561967721913462E-16,
    1.77256013305652638360E-15,  3.81168066935262242075E-15,  -9.55484669882830764870E-15,
    -4.15056934728722208663E-14, 1.54008621752140982691E-14,  3.85277838274214270114E-13,
    7.18012445138366623367E-13,  -1.79417853150680611778E-12, -1.32158118404477131188E-11,
    -3.14991652796324136454E-11, 1.18891471078464383424E-11,  4.94060238822496958910E-10,
    3.39623202570838634515E-9,   2.26666899049817806459E-8,   2.04891858946906374183E-7,
    2.89137052083475648297E-6,   6.88975834691682398426E-5,   3.36911647825569408990E-3,
    8.04490411014108831608E-1};
static const double sf_i1e_A[29] = {
    2.77791411276104639959E-18,  -2.11142121435816608115E-17, 1.55363195773620046921E-16,
    -1.10559694773538630805E-15, 7.60068429473540693410E-15,  -5.04218550472791168711E-14,
    3.22379336594557470981E-13,  -1.98397439776494371520E-12, 1.17361862988909016308E-11,
    -6.66348972350202774223E-11, 3.62559028155211703701E-10,  -1.88724975172282928790E-9,
    9.38153738649577178388E-9,   -4.44505912879632808065E-8,  2.00329475355213526229E-7,
    -8.56872026469545474066E-7,  3.47025130813767847674E-6,   -1.32731636560394358279E-5,
    4.78156510755005422638E-5,   -1.61760815825896745588E-4,  5.12285956168575772895E-4,
    -1.51357245063125314899E-3,  4.15642294431288815669E-3,   -1.05640848946261981558E-2,
    2.47264490306265168283E-2,   -5.29459812080949914269E-2,  1.02643658689847095384E-1,
    -1.76416518357834055153E-1,  2.52587186443633654823E-1};
static const double sf_i1e_B[25] = {
    7.51729631084210481353E-18,  4.41434832307170791151E-18,  -4.65030536848935832153E-17,
    -3.20952592199342395980E-17, 2.96262899764595013876E-16,  3.30820231092092828324E-16,
    -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
    4.27244001671195135429E-14,  -2.10154184277266431302E-14, -4.08355111109219731823E-13,
    -7.19855177624590851209E-13, 2.03562854414708950722E-12,  1.41258074366137813316E-11,
    3.25260358301548823856E-11,  -1.89749581235054123450E-11, -5.58974346219658380687E-10,
    -3.83538038596423702205E-9,  -2.63146884688951950684E-8,  -2.51223623787020892529E-7,
    -3.88256480887769039346E-6,  -1.10588938762623716291E-4,  -9.76109749136146840777E-3,
    7.78576235018280120474E-1};

/* exp(-|x|) I0(x) */
static inline double sf_i0e(double x) {
  x = fabs(x);
  if (x <= 8.0) return sf_chbevl(x / 2.0 - 2.0, sf_i0e_A, 30);
  return sf_chbevl(32.0 / x - 2.0, sf_i0e_B, 25) / sqrt(x);
}

static inline double sf_i0(double x) {
  x = fabs(x);
  if (x <= 8.0) return exp(x) * sf_chbevl(x / 2.0 - 2.0, sf_i0e_A, 30);
  return exp(x) * sf_chbevl(32.0 / x - 2.0, sf_i0e_B, 25) / sqrt(x);
}

/* exp(-|x|) I1(x) */
static inline double sf_i1e(double x0) {
  double x = fabs(x0), out;
  if (x <= 8.0)
    out = sf_chbevl(x / 2.0 - 2.0, sf_i1e_A, 29) * x;
  else
    out = sf_chbevl(32.0 / x - 2.0, sf_i1e_B, 25) / sqrt(x);
  return x0 < 0 ? -out : out;
}

static inline double sf_i1(double x0) {
  double x = fabs(x0), out;
  if (x <= 8.0)
    out = exp(x) * x * sf_chbevl(x / 2.0 - 2.0, sf_i1e_A, 29);
  else
    out = exp(x) * sf_chbevl(32.0 / x - 2.0, sf_i1e_B, 25) / sqrt(x);
  return x0 < 0 ? -out : out;
}

/* The x with Phi(x) = y0 (inverse of the standard normal CDF). */
static inline double sf_ndtri(double y0) {
  static const double s2pi = 2.50662827463100050242E0;
  static const double P0[5] = {-5.99633501014107895267E1, 9.80010754185999661536E1,
                               -5.66762857469070293439E1, 1.39312609387279679503E1,
                               -1.23916583867381258016E0};
  static const double Q0[9] = {1.00000000000000000000E0,  1.95448858338141759834E0,
                               4.67627912898881538453E0,  8.63602421390890590575E1,
                               -2.25462687854119370527E2, 2.00260212380060660359E2,
                               -8.20372256168333339912E1, 1.59056225126211695515E1,
                               -1.18331621121330003142E0};
  static const double P1[9] = {4.05544892305962419923E0,   3.15251094599893866154E1,
                               5.71628192246421288162E1,   4.40805073893200834700E1,
                               1.46849561928858024014E1,   2.18663306850790267539E0,
                               -1.40256079171354495875E-1, -3.50424626827848203418E-2,
                               -8.57456785154685413611E-4};
  static const double Q1[9] = {1.00000000000000000000E0,   1.57799883256466749731E1,
                               4.53907635128879210584E1,   4.13172038254672030440E1,
                               1.50425385692907503408E1,   2.50464946208309415979E0,
                               -1.42182922854787788574E-1, -3.80806407691578277194E-2,
                               -9.33259480895457427372E-4};
  static const double P2[9] = {3.23774891776946035970E0,  6.91522889068984211695E0,
                               3.93881025292474443415E0,  1.33303460815807542389E0,
                               2.01485389549179081538E-1, 1.23716634817820021358E-2,
                               3.01581553508235416007E-4, 2.65806974686737550832E-6,
                               6.23974539184983293730E-9};
  static const double Q2[9] = {1.00000000000000000000E0,  6.02427039364742014255E0,
                               3.67983563856160859403E0,  1.37702099489081330271E0,
                               2.16236993594496635890E-1, 1.34204006088543189037E-2,
                               3.28014464682127739104E-4, 2.89247864745380683936E-6,
                               6.79019408009981274425E-9};
  if (y0 == 0) return -INFINITY;
  if (y0 == 1) return INFINITY;
  if (y0 < 0 || y0 > 1 || y0 != y0) return NAN;
  bool code = true;
  double y = y0;
  if (y > 1 - 0.13533528323661269189) {
    y = 1 - y;
    code = false;
  }
  if (y > 0.13533528323661269189) {
    y = y - 0.5;
    const double y2 = y * y;
    double x = y + y * (y2 * sf_polevl(y2, P0, 4) / sf_polevl(y2, Q0, 8));
    return x * s2pi;
  }
  double x = sqrt(-2.0 * log(y));
  const double x0 = x - log(x) / x;
  const double z = 1 / x;
  double x1 = x < 8.0 ? z * sf_polevl(z, P1, 8) / sf_polevl(z, Q1, 8)
                      : z * sf_polevl(z, P2, 8) / sf_polevl(z, Q2, 8);
  x = x0 - x1;
  return code ? -x : x;
}

/* erfcx(x) = exp(x^2) erfc(x). For |x| <= 26 the product is accurate to a
 * few 1e-14 (the relative error of exp(x^2) is x^2 ulp); beyond, erfc
 * underflows and the asymptotic series 1/(x sqrt(pi)) sum (-1)^k
 * (2k-1)!! / (2x^2)^k converges to double precision in a few terms. */
static inline double sf_erfcx(double x) {
  if (x != x) return x;
  if (x < 0) {
    if (x < -26.7) return INFINITY;
    if (x < -6.1) return 2 * exp(x * x);
    return 2 * exp(x * x) - sf_erfcx(-x);
  }
  if (x <= 26.0) return exp(x * x) * erfc(x);
  if (x > 5e7) return SF_1_SQRTPI / x;
  double t = 1 / (2 * x * x), term = 1, sum = 1;
  for (int k = 1; k < 12; ++k) {
    term *= -(2 * k - 1) * t;
    sum += term;
  }
  return SF_1_SQRTPI / x * sum;
}

/* log of the standard normal CDF. */
static inline double sf_log_ndtr(double x) {
  double t = x * SF_SQRT1_2;
  if (x < -1.0) return log(sf_erfcx(-t) / 2) - t * t;
  return log1p(-erfc(t) / 2);
}

/* -x log(x), -inf for x < 0... as torch.special.entr: NaN stays NaN,
 * x > 0: -x log x, x == 0: 0, x < 0: -inf. */
static inline double sf_entr(double x) {
  if (x != x) return x;
  if (x > 0) return -x * log(x);
  if (x == 0) return 0;
  return -INFINITY;
}

/* Bessel functions of the first kind J0, J1 (Cephes j0/j1, as ATen's
 * bessel_j0_forward / bessel_j1_forward), in T arithmetic like ATen: float
 * tensors are evaluated in float. */
static const double sf_j0_PP[] = {7.96936729297347051624e-04, 8.28352392107440799803e-02,
                                  1.23953371646414299388e+00, 5.44725003058768775090e+00,
                                  8.74716500199817011941e+00, 5.30324038235394892183e+00,
                                  9.99999999999999997821e-01};
static const double sf_j0_PQ[] = {9.24408810558863637013e-04, 8.56288474354474431428e-02,
                                  1.25352743901058953537e+00, 5.47097740330417105182e+00,
                                  8.76190883237069594232e+00, 5.30605288235394617618e+00,
                                  1.00000000000000000218e+00};
static const double sf_j0_QP[] = {-1.13663838898469149931e-02, -1.28252718670509318512e+00,
                                  -1.95539544257735972385e+01, -9.32060152123768231369e+01,
                                  -1.77681167980488050595e+02, -1.47077505154951170175e+02,
                                  -5.14105326766599330220e+01, -6.05014350600728481186e+00};
static const double sf_j0_QQ[] = {6.43178256118178023184e+01, 8.56430025976980587198e+02,
                                  3.88240183605401609683e+03, 7.24046774195652478189e+03,
                                  5.93072701187316984827e+03, 2.06209331660327847417e+03,
                                  2.42005740240291393179e+02};
static const double sf_j0_RP[] = {-4.79443220978201773821e+09, 1.95617491946556577543e+12,
                                  -2.49248344360967716204e+14, 9.70862251047306323952e+15};
static const double sf_j0_RQ[] = {4.99563147152651017219e+02, 1.73785401676374683123e+05,
                                  4.84409658339962045305e+07, 1.11855537045356834862e+10,
                                  2.11277520115489217587e+12, 3.10518229857422583814e+14,
                                  3.18121955943204943306e+16, 1.71086294081043136091e+18};
static const double sf_j1_PP[] = {7.62125616208173112003e-04, 7.31397056940917570436e-02,
                                  1.12719608129684925192e+00, 5.11207951146807644818e+00,
                                  8.42404590141772420927e+00, 5.21451598682361504063e+00,
                                  1.00000000000000000254e+00};
static const double sf_j1_PQ[] = {5.71323128072548699714e-04, 6.88455908754495404082e-02,
                                  1.10514232634061696926e+00, 5.07386386128601488557e+00,
                                  8.39985554327604159757e+00, 5.20982848682361821619e+00,
                                  9.99999999999999997461e-01};
static const double sf_j1_QP[] = {5.10862594750176621635e-02, 4.98213872951233449420e+00,
                                  7.58238284132545283818e+01, 3.66779609360150777800e+02,
                                  7.10856304998926107277e+02, 5.97489612400613639965e+02,
                                  2.11688757100572135698e+02, 2.52070205858023719784e+01};
static const double sf_j1_QQ[] = {7.42373277035675149943e+01, 1.05644886038262816351e+03,
                                  4.98641058337653607651e+03, 9.56231892404756170795e+03,
                                  7.99704160447350683650e+03, 2.82619278517639096600e+03,
                                  3.36093607810698293419e+02};
static const double sf_j1_RP[] = {-8.99971225705559398224e+08, 4.52228297998194034323e+11,
                                  -7.27494245221818276015e+13, 3.68295732863852883286e+15};
static const double sf_j1_RQ[] = {6.20836478118054335476e+02, 2.56987256757748830383e+05,
                                  8.35146791431949253037e+07, 2.21511595479792499675e+10,
                                  4.74914122079991414898e+12, 7.84369607876235854894e+14,
                                  8.95222336184627338078e+16, 5.32278620332680085395e+18};

#define SF_POLY(T, acc, z, A, deg)                         \
  do {                                                     \
    acc = 0;                                               \
    for (int i_ = 0; i_ <= (deg); ++i_) acc = acc * (z) + (T)(A)[i_]; \
  } while (0)

#define SF_BESSEL_J(T, SUF, COS, SIN, SQRT)                                                   \
  static inline T sf_bessel_j0##SUF(T x) {                                                    \
    if (x < (T)0) x = -x;                                                                     \
    if (x <= (T)5.0) {                                                                        \
      if (x < (T)0.00001) return (T)1.0 - x * x / (T)4.0;                                     \
      T rp, rq;                                                                               \
      SF_POLY(T, rp, x * x, sf_j0_RP, 3);                                                     \
      SF_POLY(T, rq, x * x, sf_j0_RQ, 7);                                                     \
      return (x * x - (T)5.78318596294678452118e+00) * (x * x - (T)3.04712623436620863991e+01) * \
             rp / rq;                                                                         \
    }                                                                                         \
    T pp, pq, qp, qq, w = (T)25.0 / (x * x);                                                  \
    SF_POLY(T, pp, w, sf_j0_PP, 6);                                                           \
    SF_POLY(T, pq, w, sf_j0_PQ, 6);                                                           \
    SF_POLY(T, qp, w, sf_j0_QP, 7);                                                           \
    SF_POLY(T, qq, w, sf_j0_QQ, 6);                                                           \
    const T ph = x - (T)0.785398163397448309615660845819875721;                               \
    return (pp / pq * COS(ph) - (T)5.0 / x * (qp / qq) * SIN(ph)) *                           \
           (T)0.797884560802865355879892119868763737 / SQRT(x);                               \
  }                                                                                           \
  static inline T sf_bessel_j1##SUF(T x) {                                                    \
    if (x < (T)0) return -sf_bessel_j1##SUF(-x);                                              \
    if (x <= (T)5.0) {                                                                        \
      T rp, rq;                                                                               \
      SF_POLY(T, rp, x * x, sf_j1_RP, 3);                                                     \
      SF_POLY(T, rq, x * x, sf_j1_RQ, 7);                                                     \
      return rp / rq * x * (x * x - (T)1.46819706421238932572e+01) *                          \
             (x * x - (T)4.92184563216946036703e+01);                                         \
    }                                                                                         \
    T pp, pq, qp, qq, w = (T)5.0 / x * ((T)5.0 / x);                                          \
    SF_POLY(T, pp, w, sf_j1_PP, 6);                                                           \
    SF_POLY(T, pq, w, sf_j1_PQ, 6);                                                           \
    SF_POLY(T, qp, w, sf_j1_QP, 7);                                                           \
    SF_POLY(T, qq, w, sf_j1_QQ, 6);                                                           \
    const T ph = x - (T)2.356194490192344928846982537459627163;                               \
    return (pp / pq * COS(ph) - (T)5.0 / x * (qp / qq) * SIN(ph)) *                           \
           (T)0.797884560802865355879892119868763737 / SQRT(x);                               \
  }
SF_BESSEL_J(double, , cos, sin, sqrt)
SF_BESSEL_J(float, _f, cosf, sinf, sqrtf)

#endif /* TPU_KERNELS_SPECFUN_H_ */
