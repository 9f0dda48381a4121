#!/usr/bin/env python3
"""Parses a Prometheus text exposition with an independent parser and prints
its families as JSON, or fails.

The parser is the official Python client's (`prometheus_client`, PyPI:
`prometheus_client.parser.text_string_to_metric_families`), which raises on
malformed exposition. On top of it this script checks what that parser lets
through but Prometheus itself refuses or misreads: a family's samples split
by another family, a `# TYPE` after its samples or given twice, a histogram
whose buckets are not cumulative or whose +Inf bucket differs from its
count.

Usage: check_metrics.py [FILE]   (stdin when no FILE)
Output (stdout, one JSON object):
  {"families": {NAME: {"type": T, "help": H,
                       "samples": [{"name": N, "labels": {...}, "value": V}]}}}
NAME is the family name as the parser gives it (a counter's without
`_total`). Exit 0 when the text parses and passes the checks, 1 otherwise,
with the reason on stderr.
"""

import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def structural_problems(text):
    """What the text format requires and the parser does not check: every
    family's lines are contiguous, and its TYPE comes once, before its
    samples."""
    problems = []
    typed = {}
    seen_family_order = []
    last_family = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("# TYPE "):
            parts = line.split()
            name = parts[2] if len(parts) > 2 else ""
            if name in typed:
                problems.append(f"line {number}: a second TYPE line for {name}")
            typed[name] = parts[3] if len(parts) > 3 else ""
            family = name
        elif line.startswith("# HELP "):
            parts = line.split()
            family = parts[2] if len(parts) > 2 else ""
        elif line.startswith("#"):
            continue
        else:
            sample = line.split("{", 1)[0].split(" ", 1)[0]
            family = sample
            for suffix in ("_bucket", "_sum", "_count", "_total", "_created"):
                base = sample[: -len(suffix)] if sample.endswith(suffix) else None
                if base and base in typed:
                    family = base
                    break
            if family not in typed:
                problems.append(f"line {number}: sample {sample} before any TYPE line of its family")
        if family != last_family:
            if family in seen_family_order:
                problems.append(f"line {number}: the lines of {family} are split by another family")
            seen_family_order.append(family)
            last_family = family
    return problems


def histogram_problems(family):
    """Buckets cumulative per label set, and +Inf equal to _count."""
    problems = []
    series = {}
    counts = {}
    for s in family.samples:
        labels = {k: v for k, v in s.labels.items() if k != "le"}
        key = tuple(sorted(labels.items()))
        if s.name.endswith("_bucket"):
            series.setdefault(key, []).append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            counts[key] = s.value
    for key, buckets in series.items():
        buckets.sort()
        values = [v for _, v in buckets]
        if values != sorted(values):
            problems.append(f"{family.name}{dict(key)}: buckets are not cumulative: {buckets}")
        if not buckets or not math.isinf(buckets[-1][0]):
            problems.append(f"{family.name}{dict(key)}: no +Inf bucket")
        elif counts.get(key) != buckets[-1][1]:
            problems.append(f"{family.name}{dict(key)}: +Inf bucket {buckets[-1][1]} != count {counts.get(key)}")
    return problems


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else None
    text = open(path, encoding="utf-8").read() if path else sys.stdin.read()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser's own refusal: malformed exposition
        print(f"check_metrics: prometheus_client refused the exposition: {e!r}", file=sys.stderr)
        return 1
    problems = structural_problems(text)
    out = {}
    for family in families:
        if family.type == "histogram":
            problems.extend(histogram_problems(family))
        if family.name in out:
            problems.append(f"family {family.name} appears twice")
        out[family.name] = {
            "type": family.type,
            "help": family.documentation,
            "samples": [{"name": s.name, "labels": dict(s.labels), "value": s.value} for s in family.samples],
        }
    if problems:
        for p in problems:
            print(f"check_metrics: {p}", file=sys.stderr)
        return 1
    json.dump({"families": out}, sys.stdout, sort_keys=True, allow_nan=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
