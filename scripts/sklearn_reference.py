#!/usr/bin/env python3
"""Checks cohort's agreement and calibration figures against scikit-learn.

Usage: sklearn_reference.py FILE.json

FILE.json (written by core/tests/agreement_sklearn.rs) holds fixed data sets
and the figures cohort_core::agreement computed on them:

  {"agreement": [{"name", "k", "a", "b", "weights": "none"|"linear"|"quadratic",
                  "rust": {"matrix", "raw_agreement", "kappa"}}],
   "binary":    [{"name", "gold", "predicted",
                  "rust": {"tp", "fp", "tn", "fn", "precision", "recall", "f1",
                           "kappa", "pass_rate_drift", "fpr", "fnr"}}]}

where every statistic is {"value": x} or {"undefined": "why"} (cohort's Stat).

scikit-learn computes each figure independently (cohen_kappa_score,
confusion_matrix, accuracy_score, precision_score, recall_score, f1_score;
FPR, FNR and drift from its confusion matrix). A figure must agree to 1e-12.
Where scikit-learn cannot define a figure (it returns nan, or 0 with an
UndefinedMetricWarning, or FPR/FNR/drift have a zero denominator) cohort
must say "undefined"; where scikit-learn defines it, cohort must give the
value. Prints "all agree" and exits 0, or lists every difference and exits 1.
"""

import json
import math
import sys
import warnings

try:
    import numpy as np
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import (
        accuracy_score,
        cohen_kappa_score,
        confusion_matrix,
        f1_score,
        precision_score,
        recall_score,
    )
except ImportError as e:  # pragma: no cover - the message is the point
    print(
        f"sklearn_reference.py: {e}; install scikit-learn with "
        "'python3 -m pip install scikit-learn' (scripts/test.sh does it)"
    )
    sys.exit(2)

TOLERANCE = 1e-12
problems = []
checked = 0


def sk(fn, *args, **kwargs):
    """fn's value, or None when scikit-learn says it is undefined."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = float(fn(*args, **kwargs))
    undefined = any(issubclass(w.category, UndefinedMetricWarning) for w in caught)
    if undefined or math.isnan(value):
        return None
    return value


def ratio(num, den):
    return None if den == 0 else num / den


def compare(case, name, ours, theirs):
    """ours: cohort's Stat; theirs: scikit-learn's value or None (undefined)."""
    global checked
    checked += 1
    if theirs is None:
        if "undefined" not in ours:
            problems.append(f"{case}: {name}: scikit-learn says undefined, cohort gives {ours}")
        elif not ours["undefined"]:
            problems.append(f"{case}: {name}: undefined without a reason")
        return
    if "value" not in ours:
        problems.append(f"{case}: {name}: scikit-learn gives {theirs!r}, cohort says {ours}")
    elif abs(ours["value"] - theirs) > TOLERANCE:
        problems.append(f"{case}: {name}: cohort {ours['value']!r} vs scikit-learn {theirs!r}")


def check_agreement(case):
    name, k, a, b = case["name"], case["k"], case["a"], case["b"]
    rust = case["rust"]
    labels = list(range(k))
    # scikit-learn refuses empty input; no items is a k x k matrix of zeros.
    matrix = confusion_matrix(a, b, labels=labels).tolist() if a else [[0] * k for _ in labels]
    global checked
    checked += 1
    if matrix != rust["matrix"]:
        problems.append(f"{name}: matrix: cohort {rust['matrix']} vs scikit-learn {matrix}")
    raw = sk(accuracy_score, a, b) if a else None
    compare(name, "raw_agreement", rust["raw_agreement"], raw)
    weights = None if case["weights"] == "none" else case["weights"]
    kappa = sk(cohen_kappa_score, a, b, labels=labels, weights=weights) if a else None
    compare(name, f"kappa({case['weights']})", rust["kappa"], kappa)
    # The reason of the one undefined kappa the protocol names.
    if kappa is None and a and len(set(a) | set(b)) == 1:
        why = rust["kappa"].get("undefined", "")
        if "same single label" not in why:
            problems.append(f"{name}: kappa undefined with the wrong reason: {why!r}")


def check_binary(case):
    name, gold, pred = case["name"], case["gold"], case["predicted"]
    rust = case["rust"]
    g = np.array(gold, dtype=int)
    p = np.array(pred, dtype=int)
    tn, fp, fn, tp = (int(x) for x in confusion_matrix(g, p, labels=[0, 1]).ravel())
    global checked
    checked += 1
    if (tp, fp, tn, fn) != (rust["tp"], rust["fp"], rust["tn"], rust["fn"]):
        problems.append(
            f"{name}: confusion: cohort tp/fp/tn/fn {rust['tp']}/{rust['fp']}/{rust['tn']}/{rust['fn']}"
            f" vs scikit-learn {tp}/{fp}/{tn}/{fn}"
        )
    compare(name, "precision", rust["precision"], sk(precision_score, g, p, pos_label=1, zero_division=np.nan))
    compare(name, "recall", rust["recall"], sk(recall_score, g, p, pos_label=1, zero_division=np.nan))
    compare(name, "f1", rust["f1"], sk(f1_score, g, p, pos_label=1, zero_division=np.nan))
    compare(name, "kappa", rust["kappa"], sk(cohen_kappa_score, g, p, labels=[0, 1]))
    compare(name, "fpr", rust["fpr"], ratio(fp, fp + tn))
    compare(name, "fnr", rust["fnr"], ratio(fn, fn + tp))
    drift = float(np.mean(p) - np.mean(g)) if len(g) else None
    compare(name, "pass_rate_drift", rust["pass_rate_drift"], drift)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    with open(sys.argv[1], encoding="utf-8") as f:
        data = json.load(f)
    for case in data["agreement"]:
        check_agreement(case)
    for case in data["binary"]:
        check_binary(case)
    if problems:
        print(f"{len(problems)} of {checked} figures differ from scikit-learn:")
        for p in problems:
            print(f"  {p}")
        sys.exit(1)
    print(f"all agree: {checked} figures on {len(data['agreement'])} agreement and {len(data['binary'])} binary data sets")


if __name__ == "__main__":
    main()
