#include "core/detmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const double LN2_HI = H3S_DET_LN2_HI, LN2_LO = H3S_DET_LN2_LO, INV_LN2 = H3S_DET_INV_LN2;

double h3s_det_exp(double x) {
    if (isnan(x)) return x;
    if (x > 709.782712893384) return INFINITY;
    if (x < -745.2) return 0.0;
    double k = nearbyint(x * INV_LN2);
    double r = (x - k * LN2_HI) - k * LN2_LO; /* |r| <= 0.347 */
    /* Taylor series to r^14/14!: truncation < 1e-18 relative for |r| <= 0.35. */
    double p = H3S_DET_EXP_C14;
    static const double c[] = H3S_DET_EXP_POLY;
    for (unsigned i = 0; i < sizeof c / sizeof c[0]; i++)
        p = p * r + c[i];
    return ldexp(p, (int)k);
}

double h3s_det_log(double x) {
    if (isnan(x) || x < 0) return NAN;
    if (x == 0) return -INFINITY;
    if (isinf(x)) return x;
    int e;
    double m = frexp(x, &e); /* x = m * 2^e, m in [0.5, 1) */
    if (m < 0.70710678118654752440) {
        m *= 2.0;
        e -= 1;
    }
    /* log(m) = 2 atanh(f), f = (m-1)/(m+1), |f| <= 0.1716 */
    double f = (m - 1.0) / (m + 1.0);
    double f2 = f * f;
    double s = 1.0 / 25.0;
    for (int n = 11; n >= 0; n--)
        s = s * f2 + 1.0 / (double)(2 * n + 1);
    double lm = 2.0 * f * s;
    return ((double)e * LN2_HI + lm) + (double)e * LN2_LO;
}

/* pi/2 in three parts of 33 significant bits each (Cody-Waite). */
static const double PIO2_1 = 1.57079632673412561417e+00;
static const double PIO2_2 = 6.07710050650619224932e-11;
static const double PIO2_3 = 2.02226624879595063154e-21;
static const double TWO_OVER_PI = 6.36619772367581382433e-01;

static double sin_poly(double r) { /* |r| <= pi/4 */
    double r2 = r * r, p;
    /* Horner on odd terms up to r^23 */
    static const double k[] = {-1.0 / 25852016738884976640000.0, /* -1/23! */
                               1.0 / 51090942171709440000.0,     /* 1/21! */
                               -1.0 / 121645100408832000.0,      /* -1/19! */
                               1.0 / 355687428096000.0,          /* 1/17! */
                               -1.0 / 1307674368000.0,           /* -1/15! */
                               1.0 / 6227020800.0,               /* 1/13! */
                               -1.0 / 39916800.0,                /* -1/11! */
                               1.0 / 362880.0,                   /* 1/9! */
                               -1.0 / 5040.0,                    /* -1/7! */
                               1.0 / 120.0,                      /* 1/5! */
                               -1.0 / 6.0,                       /* -1/3! */
                               1.0};
    p = k[0];
    for (unsigned i = 1; i < sizeof k / sizeof k[0]; i++)
        p = p * r2 + k[i];
    return p * r;
}

static double cos_poly(double r) { /* |r| <= pi/4 */
    double r2 = r * r;
    static const double c[] = {1.0 / 620448401733239439360000.0, /* 1/24! */
                               -1.0 / 1124000727777607680000.0,  /* -1/22! */
                               1.0 / 2432902008176640000.0,      /* 1/20! */
                               -1.0 / 6402373705728000.0,        /* -1/18! */
                               1.0 / 20922789888000.0,           /* 1/16! */
                               -1.0 / 87178291200.0,             /* -1/14! */
                               1.0 / 479001600.0,                /* 1/12! */
                               -1.0 / 3628800.0,                 /* -1/10! */
                               1.0 / 40320.0,                    /* 1/8! */
                               -1.0 / 720.0,                     /* -1/6! */
                               1.0 / 24.0,                       /* 1/4! */
                               -0.5,                             /* -1/2! */
                               1.0};
    double p = c[0];
    for (unsigned i = 1; i < sizeof c / sizeof c[0]; i++)
        p = p * r2 + c[i];
    return p;
}

static double reduce_pio2(double x, int *quadrant) {
    double k = nearbyint(x * TWO_OVER_PI);
    double r = ((x - k * PIO2_1) - k * PIO2_2) - k * PIO2_3;
    *quadrant = (int)((int64_t)k & 3);
    return r;
}

double h3s_det_sin(double x) {
    if (!(fabs(x) <= H3S_DET_TRIG_MAX)) return NAN;
    int q;
    double r = reduce_pio2(x, &q);
    switch (q) {
    case 0: return sin_poly(r);
    case 1: return cos_poly(r);
    case 2: return -sin_poly(r);
    default: return -cos_poly(r);
    }
}

double h3s_det_cos(double x) {
    if (!(fabs(x) <= H3S_DET_TRIG_MAX)) return NAN;
    int q;
    double r = reduce_pio2(x, &q);
    switch (q) {
    case 0: return cos_poly(r);
    case 1: return -sin_poly(r);
    case 2: return -cos_poly(r);
    default: return sin_poly(r);
    }
}
