#!/usr/bin/env python3
"""An independent check of cohort's cluster bootstrap (core/src/stats.rs)
with numpy: its own random numbers, its own sums, np.percentile.

    python3 scripts/bootstrap_reference.py FILE.json

FILE.json is written by core/tests/bootstrap_numpy.rs:
  {"questions": Q, "draws": B, "seed": S,
   "arms": {ARM: {"supported": [Q numbers], "judged": [Q numbers]}, ...},
   "pair": [ARM_A, ARM_B],
   "rust": {"points": {NAME: float}, "intervals": {NAME: [low, high]},
            "undefined_draws": {NAME: int}},
   "percentiles": {"values": [...], "p": [...], "rust": [...]}}
NAME is "ARM.micro", "ARM.macro", "diff.micro" or "diff.macro" (ARM_A - ARM_B).

Checks, printing both sets of figures:
  - point values (micro rates, equal-question macro rates, the paired
    differences) equal numpy's within 1e-12;
  - percentile_linear equals np.percentile (method "linear") within 1e-12;
  - each interval end agrees with numpy's cluster bootstrap within TOLERANCE;
  - the data can tell a wrong bootstrap apart: resampling claims instead of
    questions, or the two arms independently instead of paired, moves some
    interval end by more than TOLERANCE (otherwise this check would prove
    nothing).
Exits 0 when all agree, 1 on a disagreement, 2 when numpy is missing.
"""
import json
import sys

try:
    import numpy as np
except ImportError:
    print("bootstrap_reference.py: numpy is missing; install it with 'python3 -m pip install numpy' "
          "(scripts/test.sh does)", file=sys.stderr)
    sys.exit(2)

EXACT = 1e-12

# Monte Carlo tolerance for an interval end. The p-quantile of n draws has
# standard error sqrt(p(1-p)/n) / f(x_p), f the density of the bootstrap
# distribution at x_p. For a near-normal bootstrap distribution with
# standard deviation s, f(x_0.025) = phi(1.96)/s = 0.0584/s, so with
# n = 10,000 the SE is 0.0156/0.0584 * s = 0.027 s. Rust and numpy draw
# independently, so their ends differ with SE sqrt(2) * 0.027 s = 0.038 s.
# The rates here have s <= 0.08 (printed below as "sd"), so that SE is at
# most 0.003 and 0.015 is at least 5 standard errors: agreement is expected
# every time, and a bootstrap that resamples the wrong unit, checked below,
# lands further away than that.
TOLERANCE = 0.015


def rates(m, num, den):
    """Ratio of sums per draw (rows of m); NaN where the denominator is 0."""
    n, d = m @ num, m @ den
    out = np.full(n.shape, np.nan)
    np.divide(n, d, out=out, where=d != 0)
    return out


def macro_vectors(sup, jud):
    counted = jud > 0
    return np.where(counted, sup / np.where(counted, jud, 1.0), 0.0), counted.astype(float)


def interval(values):
    defined = values[~np.isnan(values)]
    if defined.size == 0:
        return None, None, values.size
    low, high = np.percentile(defined, [2.5, 97.5])
    return float(low), float(high), int(values.size - defined.size)


def statistics(m_a, m_b, arms, pair):
    """Per-draw values of every named statistic; arm A on m_a, arm B on m_b."""
    out = {}
    per_arm = {}
    for name, data in arms.items():
        m = m_a if name == pair[0] else m_b
        sup, jud = data
        r, w = macro_vectors(sup, jud)
        per_arm[name] = {"micro": rates(m, sup, jud), "macro": rates(m, r, w)}
        out[f"{name}.micro"] = per_arm[name]["micro"]
        out[f"{name}.macro"] = per_arm[name]["macro"]
    for kind in ("micro", "macro"):
        out[f"diff.{kind}"] = per_arm[pair[0]][kind] - per_arm[pair[1]][kind]
    return out


def multiplicities(rng, draws, q):
    idx = rng.integers(0, q, size=(draws, q))
    m = np.zeros((draws, q))
    np.add.at(m, (np.repeat(np.arange(draws), q), idx.ravel()), 1.0)
    return m


def main(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    q, draws, seed = data["questions"], data["draws"], data["seed"]
    pair = data["pair"]
    arms = {name: (np.array(a["supported"], dtype=float), np.array(a["judged"], dtype=float))
            for name, a in data["arms"].items()}
    rust = data["rust"]
    problems = []

    # Point values: every multiplicity 1.
    ones = np.ones((1, q))
    points = {name: float(v[0]) for name, v in statistics(ones, ones, arms, pair).items()}
    print(f"{'statistic':<12} {'rust point':>20} {'numpy point':>20}")
    for name, value in points.items():
        got = rust["points"].get(name)
        print(f"{name:<12} {got!r:>20} {value!r:>20}")
        if got is None or not abs(got - value) < EXACT:
            problems.append(f"point {name}: rust {got} vs numpy {value}")

    # percentile_linear against np.percentile on the same sorted values.
    pc = data["percentiles"]
    values = np.array(pc["values"], dtype=float)
    for p, got in zip(pc["p"], pc["rust"]):
        want = float(np.percentile(values, 100.0 * p))
        if not abs(got - want) < EXACT:
            problems.append(f"percentile_linear p={p}: rust {got} vs np.percentile {want}")
    print(f"percentile_linear vs np.percentile: {len(pc['p'])} percentiles compared")

    # The cluster bootstrap with numpy's own generator: questions resampled
    # with replacement, every statistic of a draw on the same resample.
    rng = np.random.default_rng(seed)
    m = multiplicities(rng, draws, q)
    reference = {name: interval(v) for name, v in statistics(m, m, arms, pair).items()}
    sds = {name: float(np.nanstd(v)) for name, v in statistics(m, m, arms, pair).items()}
    print(f"{'statistic':<12} {'rust low':>10} {'numpy low':>10} {'rust high':>10} {'numpy high':>10} "
          f"{'sd':>7} {'undefined r/n':>14}")
    for name, (low, high, undefined) in reference.items():
        r_low, r_high = rust["intervals"].get(name, (None, None))
        r_undef = rust["undefined_draws"].get(name)
        print(f"{name:<12} {r_low!s:>10.8} {low!s:>10.8} {r_high!s:>10.8} {high!s:>10.8} "
              f"{sds[name]:>7.4f} {r_undef!s:>6}/{undefined:<6}")
        for end, got, want in (("ci_low", r_low, low), ("ci_high", r_high, high)):
            if got is None or want is None or not abs(got - want) < TOLERANCE:
                problems.append(f"{end} {name}: rust {got} vs numpy {want} (tolerance {TOLERANCE})")

    # Power: wrong bootstraps must land outside the tolerance somewhere.
    m_other = multiplicities(rng, draws, q)
    unpaired = {name: interval(v) for name, v in statistics(m, m_other, arms, pair).items()}
    worst_unpaired = max(max(abs(unpaired[n][0] - reference[n][0]), abs(unpaired[n][1] - reference[n][1]))
                         for n in ("diff.micro", "diff.macro"))
    worst_claims = 0.0
    for name, (sup, jud) in arms.items():
        # Every judged claim an independent sample: the naive bootstrap.
        outcomes = np.concatenate([np.r_[np.ones(int(s)), np.zeros(int(j - s))] for s, j in zip(sup, jud)])
        picks = rng.integers(0, outcomes.size, size=(draws, outcomes.size))
        low, high = np.percentile(outcomes[picks].mean(axis=1), [2.5, 97.5])
        ref = reference[f"{name}.micro"]
        worst_claims = max(worst_claims, abs(low - ref[0]), abs(high - ref[1]))
    print(f"power: unpaired arms move a difference's interval by {worst_unpaired:.4f}, "
          f"claim-level resampling moves a micro interval by {worst_claims:.4f} (tolerance {TOLERANCE})")
    for label, shift in (("resampling the arms unpaired", worst_unpaired),
                         ("resampling claims instead of questions", worst_claims)):
        if not shift > TOLERANCE:
            problems.append(f"the synthetic cohort cannot tell {label} from the cluster bootstrap "
                            f"(shift {shift:.4f} <= tolerance {TOLERANCE}); make its questions more varied")

    if problems:
        print(f"{len(problems)} disagreement(s):")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"all agree: {len(points)} point values exactly, {2 * len(reference)} interval ends within {TOLERANCE}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
