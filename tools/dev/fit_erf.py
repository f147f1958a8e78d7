#!/usr/bin/env python3
"""fit_erf.py - the coefficients of act_simd.inc's piecewise erf.

erf(a) on [0, 4) in NI intervals of width 4 / NI, each a polynomial of
degree DEG in u = a - c_i (c_i the interval's centre, |u| <= 2 / NI),
fitted by least squares on Chebyshev nodes then refined by a few
Lawson (iteratively reweighted) passes towards the minimax fit, in double
against mpmath's erf. Prints the tables as C (coefficient k of every
interval in one row, so a vector permute looks a row up by interval
index; a last row holds the low part of each constant term, so the sum
ends as fma(p, u, lo) + hi) and the worst error of the float evaluation, simulated with one
rounding per FMA as the SIMD code runs it.

    python3 tools/dev/fit_erf.py [NI] [DEG]     (default 8 7)
"""
import sys

import mpmath
import numpy as np

mpmath.mp.dps = 40
NI = int(sys.argv[1]) if len(sys.argv) > 1 else 8
DEG = int(sys.argv[2]) if len(sys.argv) > 2 else 7
W = 4.0 / NI


def erf(x):
    return float(mpmath.erf(x))


def fit(c):
    h = W / 2
    n = 4 * (DEG + 1) * 8
    u = h * np.cos(np.pi * (np.arange(n) + 0.5) / n)
    y = np.array([erf(c + t) for t in u])
    V = np.vander(u, DEG + 1, increasing=True)
    w = np.ones(n)
    for _ in range(30):  # Lawson: weights grow where the error is largest
        coef, *_ = np.linalg.lstsq(V * w[:, None], y * w, rcond=None)
        e = np.abs(V @ coef - y)
        w = w * (e / e.max() + 1e-3) ** 0.5
        w /= w.max()
    return coef


def f32(x):
    return float(np.float32(x))


def eval_f32(coef, lo, u):
    """Horner with one rounding per FMA (float32 operands: the product is
    exact in double, so double add + one rounding to float is an FMA up to
    double rounding, which is rare), the constant term last as hi + lo:
    fma(p, u, lo) + hi, so its own rounding adds nothing."""
    p = coef[DEG]
    for k in range(DEG - 1, 0, -1):
        p = f32(p * u + coef[k])
    return f32(f32(p * u + lo) + coef[0])


tables = []
worst = 0.0
for i in range(NI):
    c = f32(i * W + W / 2)
    fc = fit(c)
    coef = [f32(v) for v in fc]
    coef.append(f32(fc[0] - coef[0]))  # the constant term's low part
    tables.append(coef)
    for a in np.linspace(i * W, (i + 1) * W, 4001)[:-1]:
        a = f32(a)
        got = eval_f32(coef, coef[DEG + 1], f32(a - c))
        worst = max(worst, abs(got - erf(a)))
print(f"/* {NI} intervals of {W}, degree {DEG}: worst |error| {worst:.3e} (float evaluation) */")
for k in range(DEG + 2):  # the last row: the constant term's low part
    vals = [f"{tables[i][k]:.9e}f" for i in range(NI)]
    lines = [", ".join(vals[j:j + 4]) for j in range(0, NI, 4)]
    print("    {" + ",\n     ".join(lines) + "},")
