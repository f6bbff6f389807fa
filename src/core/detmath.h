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
