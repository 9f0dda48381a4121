#!/usr/bin/env python3
"""An independent check of `cohort calibrate --cohort`'s intervals
(procedure cohort-calibration-v2, answers resampled; core/src/agreement.rs
and docs/calibration.md), with Python's standard library alone: the
scripts' own ChaCha20 (RFC 8439, rederive_order.py's), its own draws, counts, figures and percentiles.

    python3 scripts/calibration_reference.py FILE.json

FILE.json is written by the test in report/src/calibrate.rs:
  {"seed": S, "resamples": B,
   "gold": [[ITEM, PASS], ...],            # in the order calibrate read it
   "answers": {ITEM: ANSWER, ...},          # the run each claim belongs to
   "judges": {NAME: [[ITEM, VOTE], ...]},   # "majority" is recomputed here
   "rust": {NAME: {"items": n, "answers": m, "tp": .., "fp": .., "tn": .., "fn": ..,
                   "intervals": {FIGURE: [LOW, HIGH]}}}}   # null for undefined

The procedure, re-implemented from its description:
  1. key = SHA-256(b"cohort-calibration-v2:" + decimal ASCII seed);
  2. a judge's items are the gold items it gave a verdict on (the majority
     vote's: those with a decided vote), in gold order; their answers are
     numbered 0..m in the order their first item appears;
  3. resample r: ChaCha20 with that key, nonce = r as 4 little-endian bytes
     then 8 zero bytes, block counter from 0, read as little-endian u64
     words; m times: words x until x < 2^64 - (2^64 mod m), answer x mod m;
  4. the resample is every item of every drawn answer (an answer drawn
     twice counts twice): tp/fp/tn/fn, then each figure;
  5. numpy's linear percentile (2.5, 97.5) of the resamples where the
     figure is defined.
Checks: counts equal; every interval end equal within 1e-9. And the data
can tell a wrong bootstrap apart: resampling items one by one (procedure
cohort-calibration-v1) moves some interval end by more than 0.01, or this
check would prove nothing. Exits 0 when all agree, 1 otherwise.
"""
import hashlib
import json
import struct
import sys

# The ChaCha20 block function is rederive_order.py's (beside this file): one
# stdlib implementation for both reference scripts.
from rederive_order import chacha20_block

EXACT = 1e-9
DISTINCT = 0.01
FIGURES = ["f1", "precision", "recall", "kappa", "pass_rate_drift", "fpr", "fnr"]


def draws(key, r, m):
    """Step 3: the m indices below m drawn by resample r."""
    nonce = struct.pack("<I", r) + bytes(8)
    counter, words, out = 0, [], []
    limit = 2**64 - (2**64 % m)
    while len(out) < m:
        if not words:
            words = list(struct.unpack("<8Q", chacha20_block(key, counter, nonce)))
            counter += 1
        x = words.pop(0)
        if x < limit:
            out.append(x % m)
    return out


def ratio(num, den):
    return None if den == 0 else num / den


def figures(tp, fp, tn, fn):
    n = tp + fp + tn + fn
    out = {
        "precision": ratio(tp, tp + fp),
        "recall": ratio(tp, tp + fn),
        "f1": ratio(2 * tp, 2 * tp + fp + fn),
        "fpr": ratio(fp, fp + tn),
        "fnr": ratio(fn, fn + tp),
        "pass_rate_drift": None if n == 0 else (tp + fp) / n - (tp + fn) / n,
        "kappa": None,
    }
    if n:
        po = (tp + tn) / n
        # Labels [fail, pass]; gold rows, judge columns.
        pe = ((tn + fp) * (tn + fn) + (fn + tp) * (fp + tp)) / (n * n)
        if pe != 1:
            out["kappa"] = (po - pe) / (1 - pe)
    return out


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    h = (len(sorted_values) - 1) * p
    lo = int(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def counts(pairs):
    tp = sum(1 for g, p in pairs if g and p)
    fp = sum(1 for g, p in pairs if not g and p)
    tn = sum(1 for g, p in pairs if not g and not p)
    fn = sum(1 for g, p in pairs if g and not p)
    return tp, fp, tn, fn


def intervals(resampled):
    """Step 5 over a list of (tp, fp, tn, fn) per resample."""
    values = {f: [] for f in FIGURES}
    for c in resampled:
        for f, v in figures(*c).items():
            if v is not None:
                values[f].append(v)
    return {f: [percentile(sorted(v), 0.025), percentile(sorted(v), 0.975)] for f, v in values.items()}


def answer_level(pairs, answers, resamples, seed):
    key = hashlib.sha256(b"cohort-calibration-v2:" + str(seed).encode()).digest()
    order, members = [], {}
    for i, a in enumerate(answers):
        if a not in members:
            members[a] = []
            order.append(a)
        members[a].append(i)
    groups = [members[a] for a in order]
    resampled = []
    for r in range(resamples):
        drawn = [i for a in draws(key, r, len(groups)) for i in groups[a]]
        resampled.append(counts([pairs[i] for i in drawn]))
    return intervals(resampled), len(groups)


def item_level(pairs, resamples, seed):
    key = hashlib.sha256(b"cohort-calibration-v1:" + str(seed).encode()).digest()
    return intervals([counts([pairs[i] for i in draws(key, r, len(pairs))]) for r in range(resamples)])


def main():
    data = json.load(open(sys.argv[1]))
    seed, resamples = data["seed"], data["resamples"]
    gold = data["gold"]
    answers = data["answers"]
    judges = {name: dict(votes) for name, votes in data["judges"].items()}
    if len(judges) > 1:
        majority = {}
        for item, _ in gold:
            votes = [j[item] for j in judges.values() if item in j]
            yes, no = votes.count(True), votes.count(False)
            if yes != no:
                majority[item] = yes > no
        judges["majority"] = majority
    ok, told_apart = True, False
    for name, votes in judges.items():
        scored = [(item, g) for item, g in gold if item in votes]
        pairs = [(g, votes[item]) for item, g in scored]
        mine, m = answer_level(pairs, [answers[item] for item, _ in scored], resamples, seed)
        rust = data["rust"][name]
        c = counts(pairs)
        print(f"{name}: {len(pairs)} items in {m} answers, tp/fp/tn/fn {c}")
        if [rust["tp"], rust["fp"], rust["tn"], rust["fn"]] != list(c) or rust["answers"] != m:
            print(f"  DISAGREE counts: rust {rust}", file=sys.stderr)
            ok = False
        items = item_level(pairs, resamples, seed)
        for f in FIGURES:
            r, p = rust["intervals"][f], mine[f]
            same = all((a is None and b is None) or (a is not None and b is not None and abs(a - b) <= EXACT)
                       for a, b in zip(r, p))
            print(f"  {f:16} rust {r}  python {p}  items-resampled {items[f]}")
            if not same:
                print(f"  DISAGREE {name} {f}: rust {r}, python {p}", file=sys.stderr)
                ok = False
            if any(a is not None and b is not None and abs(a - b) > DISTINCT for a, b in zip(items[f], p)):
                told_apart = True
    if not told_apart:
        print("the data cannot tell answer resampling from item resampling: the check proves nothing",
              file=sys.stderr)
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
