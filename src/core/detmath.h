/* Deterministic elementary functions.
 *
 * libm's expf/sinf/... may pick a different code path (and different last bits) per CPU
 * model through ifunc dispatch.  Strict paths call these instead: plain IEEE double
 * arithmetic (compiled with -ffp-contract=off), a fixed range reduction and a fixed
 * polynomial, so the bits are the same on every x86-64 or ARM machine.  Accuracy is a few
 * ulp of double, far below float resolution; the float wrappers round the double result
 * once. */
#ifndef H3S_DETMATH_H
#define H3S_DETMATH_H

/* h3s_det_exp's constants, shared with the vectorised copy in src/ops/attention.c, which must give the same bits:
 * ln 2 split so that k * H3S_DET_LN2_HI is exact for |k| < 2^11, 1 / ln 2, and the Taylor polynomial of exp(r) to
 * r^14 / 14!, evaluated by Horner's rule from H3S_DET_EXP_C14 through the coefficients of H3S_DET_EXP_POLY (an
 * initializer: 1 / 13! down to 1 / 0!). */
#define H3S_DET_LN2_HI 6.93147180369123816490e-01
#define H3S_DET_LN2_LO 1.90821492927058770002e-10
#define H3S_DET_INV_LN2 1.44269504088896338700e+00
#define H3S_DET_EXP_C14 (1.0 / 87178291200.0)
#define H3S_DET_EXP_POLY                                                                                               \
    {                                                                                                                  \
        1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,       \
            1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0                               \
    }

double h3s_det_exp(double x);
double h3s_det_log(double x); /* x > 0; returns -inf for 0 and NaN for x < 0 */
/* sin/cos reduce by pi/2 in three Cody-Waite parts: accurate to a few ulp for
 * |x| <= H3S_DET_TRIG_MAX; beyond it they return NaN (operators refuse such arguments
 * before computing, see rope.c and timestep.c). */
#define H3S_DET_TRIG_MAX 1048576.0
double h3s_det_sin(double x);
double h3s_det_cos(double x);

static inline float h3s_det_expf(float x) { return (float)h3s_det_exp((double)x); }
/* silu(x) = x / (1 + exp(-x)) evaluated in double, rounded once to float. */
static inline float h3s_det_siluf(float x) {
    double xd = (double)x;
    return (float)(xd / (1.0 + h3s_det_exp(-xd)));
}
/* d silu / dx = s * (1 + x * (1 - s)), s = sigmoid(x), in double, rounded once. */
static inline float h3s_det_silu_gradf(float x) {
    double xd = (double)x;
    double s = 1.0 / (1.0 + h3s_det_exp(-xd));
    return (float)(s * (1.0 + xd * (1.0 - s)));
}

#endif
