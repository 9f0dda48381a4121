#!/usr/bin/env python3
"""Re-derive a cohort report's headline numbers from its exported files
alone, with Python's standard library, independently of cohort's Rust code.

    scripts/rederive_report.py REPORT_DIR              # counts, rates, statuses
    scripts/rederive_report.py REPORT_DIR --intervals  # and every 95% interval

Reads REPORT_DIR/runs.csv (one row per planned run), claims.jsonl (a
header line, then one line per claim), sources.jsonl (one line per cited
source of each scored output) and review.jsonl (the human review's
final decisions, when the report has one), recomputes every arm's counts, claim
and citation totals and rates, and compares them with summary.json. Extra
columns and fields are ignored.

Definitions (seed 004 "Metrics and denominators"), per arm:
  planned = its rows of runs.csv; attempted = planned - not_run - pending;
  completion = completed / planned;
  support_micro = sum supported / sum judged over the arm's claims;
  support_macro = the mean over questions with judged > 0 of supported/judged
    (the arm's runs pooled per question); numerator = the sum of those rates,
    denominator = the number of those questions;
  resolution_micro = sum(citations - unresolved) / sum(citations) over runs;
  resolution_macro = the same per question, over questions with citations > 0;
  status: support not_applicable with 0 cited claims (claims with at least
    one cited index), unmeasured with cited claims but none judged;
    resolution not_applicable with 0 citations; both unmeasured instead when
    there is nothing to count but some completed run has no scored output
    (empty `claims` column); completion not_applicable with 0 planned;
    otherwise measured. A rate that is not measured has value, ci_low and
    ci_high null.
  claim_fidelity, citation_precision, citation_coverage (micro and macro,
    as support's) from review.jsonl's final decisions: per question, factual
    = claim lines labelled or unresolved (excluded ones out), fully = those
    labelled fully_supported, covered = those with covered true, pairs =
    pair lines, supporting = status supports; status: with no output line
    for the arm, not_applicable with 0 completed runs else unmeasured; with
    a zero denominator not_applicable; with an unresolved claim (fidelity),
    pair (precision) or either (coverage) unmeasured; else measured.
  sources (sources.jsonl: one line per distinct normalised URL of a scored
    output's reference table, status accessible, inaccessible or
    uncaptured): per arm and category cited = lines, unique = distinct
    url_sha256, accessible / inaccessible / uncaptured by status;
    sources_per_output = lines / scored runs (runs.csv rows with a claims
    column), not_applicable with 0 scored (unmeasured when a completed run is
    unscored); inaccessible_source_rate = inaccessible / (accessible +
    inaccessible), not_applicable with 0 lines, unmeasured with none
    captured; secondary_only_sources = sources only secondary / reviewed
    sources, from review.jsonl's pair lines (one source per run and URL:
    original when any pair says so, unresolved when one awaits
    adjudication, else only secondary; duplicate pairs count once), with the
    review rates' status rule.
runs.csv's claims, judged and supported columns must agree with claims.jsonl,
and its sources, inaccessible_sources and uncaptured_sources columns with
sources.jsonl, run by run; every file must carry the same metrics_version and
manifest hash.
  time_cost (runs.csv): estimated_cost = the sum of estimated_cost over
    completed runs that have one (null with none, or in two currencies),
    estimated_cost_runs, unknown_estimated_cost_runs; the same for
    actual_cost; credits_runs and credits_debited (their sum; null when
    none, or when one is not a number).

--intervals also re-derives each comparison's paired review differences
(claim_fidelity_micro, citation_precision_micro, citation_coverage_micro:
a - b over the questions where both arms completed a run, both sides on
the same draw) and re-derives the cluster bootstrap exactly (algorithm
cohort-bootstrap-v1, documented in core/src/stats.rs): clusters are the
questions in summary.json's "questions" order;
  key = SHA-256(b"cohort-bootstrap-v1:" + decimal ASCII seed);
  draw b reads ChaCha20 (RFC 8439) with that key, nonce = b as 4
    little-endian bytes + 8 zero bytes, block counter from 0, as
    little-endian u64 words;
  Q times: draw x until x < 2^64 - (2^64 mod Q); m[x mod Q] += 1;
  a rate is sum_q m[q]*num[q] / sum_q m[q]*den[q], summed in q order,
    undefined when the denominator is 0;
  ci = the linear percentile (h = (n-1)p) at 0.025 and 0.975 of the sorted
    defined values.

Integers must agree exactly, floats within 1e-9. Exits 0 and prints
"rederived N numbers, all agree", or exits 1 naming each number that
differs (report value vs rederived); exits 2 when the files cannot be read.
"""
import argparse
import csv
import hashlib
import json
import math
import struct
import sys
from pathlib import Path

# Importing the neighbour must not leave a __pycache__ in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rederive_order import chacha20_block  # noqa: E402  (pure-Python RFC 8439 block)

ALGORITHM = "cohort-bootstrap-v1"
OUTCOMES = ("completed", "refused", "failed", "timed_out", "unavailable", "not_run")
RATES = ("completion", "support_micro", "support_macro", "resolution_micro", "resolution_macro", "claim_fidelity_micro", "claim_fidelity_macro", "citation_precision_micro", "citation_precision_macro", "citation_coverage_micro", "citation_coverage_macro", "sources_per_output", "inaccessible_source_rate", "secondary_only_sources")
# The human-review rates: (numerator, denominator, unresolved counts) of
# review.jsonl's per-question sums, and what a zero denominator means.
REVIEW_RATES = {
    "claim_fidelity": ("fully", "factual", ("unresolved_claims",)),
    "citation_precision": ("supporting", "pairs", ("unresolved_pairs",)),
    "citation_coverage": ("covered", "factual", ("unresolved_claims", "unresolved_pairs")),
    # Pooled only: reviewed cited sources that are only secondary.
    "secondary_only_sources": ("secondary_sources", "sources", ("unresolved_sources",)),
}
# Review figures with no paired comparison (a pooled source count).
UNCOMPARED = ("secondary_only_sources",)
FLOAT_TOLERANCE = 1e-9


class ReportError(Exception):
    """The report's files cannot be read as the format says."""


# === reading ===

def _count(row, column):
    """A numeric scoring column: empty when the run has no scored output."""
    text = (row.get(column) or "").strip()
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ReportError(f"runs.csv: run {row.get('run_id')}: column {column} is {text!r}, not an integer")


def read_runs(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for column in ("run_id", "question_id", "arm", "outcome"):
        if rows and column not in rows[0]:
            raise ReportError(f"runs.csv: no column {column}")
    for row in rows:
        if row["outcome"] not in OUTCOMES:
            raise ReportError(f"runs.csv: run {row['run_id']}: unknown outcome {row['outcome']!r}")
    return rows


def read_claims(path):
    header, claims = None, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ReportError(f"claims.jsonl line {number}: not JSON ({e})")
            if record.get("kind") == "header":
                header = record
            elif record.get("kind") == "claim":
                claims.append(record)
    if header is None:
        raise ReportError("claims.jsonl: no header line")
    return header, claims


def read_review(path):
    """review.jsonl's decision lines (empty when the report has no review)."""
    if not path.exists():
        return []
    _, lines = None, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ReportError(f"review.jsonl line {number}: not JSON ({e})")
            if record.get("kind") in ("output", "claim", "pair"):
                lines.append(record)
    return lines


def read_sources(path):
    """sources.jsonl's source lines (empty when the report has none)."""
    if not path.exists():
        return []
    lines = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ReportError(f"sources.jsonl line {number}: not JSON ({e})")
            if record.get("kind") == "source":
                if record.get("status") not in ("accessible", "inaccessible", "uncaptured"):
                    raise ReportError(f"sources.jsonl line {number}: unknown status {record.get('status')!r}")
                lines.append(record)
    return lines


def source_counts(lines):
    """The sources block of summary.json for a set of source lines."""
    return {"cited": len(lines), "unique": len({l["url_sha256"] for l in lines}),
            "accessible": sum(1 for l in lines if l["status"] == "accessible"),
            "inaccessible": sum(1 for l in lines if l["status"] == "inaccessible"),
            "uncaptured": sum(1 for l in lines if l["status"] == "uncaptured")}


def cost_block(rows):
    """time_cost's cost counts from runs.csv: the price-catalogue estimate
    over completed runs (a total only with at least one run and one
    currency), the actual cost likewise, and the credits a person reported
    (a total when every value reads as a number)."""
    out = {}
    completed = [r for r in rows if r["outcome"] == "completed"]
    for kind in ("estimated", "actual"):
        known = [r for r in completed if (r.get(f"{kind}_cost") or "") != ""]
        currencies = {r.get(f"{kind}_cost_currency") or "" for r in known}
        total = _ordered_sum(float(r[f"{kind}_cost"]) for r in known)
        out[f"{kind}_cost_runs"] = len(known)
        out[f"unknown_{kind}_cost_runs"] = len(completed) - len(known)
        out[f"{kind}_cost"] = total if known and len(currencies) == 1 else None
    credits = [r["credits_debited"] for r in rows if (r.get("credits_debited") or "") != ""]
    out["credits_runs"] = len(credits)
    try:
        out["credits_debited"] = _ordered_sum(float(c) for c in credits) if credits else None
    except ValueError:
        out["credits_debited"] = None
    return out


def review_vectors(review, arm, index):
    """Per question sums of review.jsonl for one arm: outputs, factual
    claims (labelled or unresolved), fully supported, covered, pairs,
    supporting pairs, unresolved claims and pairs."""
    Q = len(index)
    v = {k: [0] * Q for k in ("outputs", "factual", "fully", "covered", "pairs", "supporting",
                               "unresolved_claims", "unresolved_pairs", "sources", "secondary_sources",
                               "unresolved_sources")}
    # A cited source of an output (run, URL or [index]) is original when any
    # of its exported pairs finally says so, else unresolved when one awaits
    # adjudication, else only secondary; added claims' pairs carry no label.
    labels = {}
    for line in review:
        if line.get("arm") != arm or line.get("question_id") not in index:
            continue
        q, status = index[line["question_id"]], line.get("status")
        if line["kind"] == "output":
            v["outputs"][q] += 1
        elif line["kind"] == "claim" and status in ("labelled", "unresolved"):
            v["factual"][q] += 1
            v["unresolved_claims"][q] += status == "unresolved"
            v["fully"][q] += line.get("label") == "fully_supported"
            v["covered"][q] += bool(line.get("covered"))
        elif line["kind"] == "pair":
            if "added_by" not in line:
                source = (q, line["run_id"], line.get("url") or f"[{line.get('citation')}]")
                rank = {True: 0, None: 1, False: 2}[line.get("secondary")]
                labels[source] = max(labels.get(source, 0), rank)
            if status == "duplicate":
                continue
            v["pairs"][q] += 1
            v["supporting"][q] += status == "supports"
            v["unresolved_pairs"][q] += status == "unresolved"
    for (q, _, _), rank in labels.items():
        v["sources"][q] += 1
        v["secondary_sources"][q] += rank == 0
        v["unresolved_sources"][q] += rank == 1
    return v


# === the bootstrap, algorithm cohort-bootstrap-v1 ===

def bootstrap_key(seed):
    return hashlib.sha256(f"{ALGORITHM}:{seed}".encode()).digest()


def multiplicities(key, draw, clusters):
    """Times each cluster is drawn in draw `draw` (steps 2-3)."""
    nonce = struct.pack("<I", draw) + bytes(8)
    m = [0] * clusters
    if clusters == 0:
        return m
    limit = 2**64 - (2**64 % clusters)
    words, counter = [], 0
    for _ in range(clusters):
        while True:
            if not words:
                words = list(struct.unpack("<8Q", chacha20_block(key, counter, nonce)))[::-1]
                counter += 1
            x = words.pop()
            if x < limit:
                break
        m[x % clusters] += 1
    return m


def percentile_linear(values, p):
    if not values:
        return None
    h = (len(values) - 1) * p
    lo = math.floor(h)
    if lo + 1 >= len(values):
        return values[lo]
    return values[lo] + (h - lo) * (values[lo + 1] - values[lo])


def intervals(ratios, clusters, draws, seed):
    """One (ci_low, ci_high) per (num, den) ratio, all on the same draws."""
    key = bootstrap_key(seed)
    # Only non-zero terms: adding m*0 changes no bit of a sum.
    sparse = [[(q, n, d) for q, (n, d) in enumerate(zip(num, den)) if n != 0 or d != 0] for num, den in ratios]
    values = [[] for _ in ratios]
    for b in range(draws):
        m = multiplicities(key, b, clusters)
        for terms, out in zip(sparse, values):
            n = d = 0.0
            for q, tn, td in terms:
                n += m[q] * tn
                d += m[q] * td
            if d != 0:
                out.append(n / d)
    result = []
    for v in values:
        v.sort()
        result.append((percentile_linear(v, 0.025), percentile_linear(v, 0.975)))
    return result


# === deriving ===

def _ordered_sum(values):
    """Left to right, as cohort sums (Python's sum() compensates rounding)."""
    total = 0.0
    for v in values:
        total += v
    return total


def _micro(num, den):
    return (num / den) if den else None


def _macro(per_question):
    """(numerator, denominator, value) of an equal-question macro rate over
    (num_q, den_q) pairs in cluster order."""
    rates = [n / d for n, d in per_question if d > 0]
    total = _ordered_sum(rates)
    return total, len(rates), (total / len(rates)) if rates else None


def derive(runs, claims, questions, arm_ids, with_intervals=False, draws=0, seed=0, review=(), sources=()):
    """The summary numbers of every arm, as a dict shaped like summary.json's
    arms[] (plus per-question vectors under "_vectors")."""
    problems = []
    claims_by_run = {}
    for c in claims:
        claims_by_run.setdefault(c["run_id"], []).append(c)
    index = {q: i for i, q in enumerate(questions)}
    run_ids = set()
    for row in runs:
        run_ids.add(row["run_id"])
        if row["question_id"] not in index:
            problems.append(f"runs.csv: run {row['run_id']}: question {row['question_id']} is not in summary.json's questions")
        own = claims_by_run.get(row["run_id"], [])
        expected = {
            "claims": len(own),
            "judged": sum(1 for c in own if c.get("status") == "judged"),
            "supported": sum(1 for c in own if c.get("status") == "judged" and c.get("verdict") == "YES"),
        }
        for column, want in expected.items():
            got = _count(row, column)
            if (got or 0) != want:
                problems.append(f"runs.csv: run {row['run_id']}: {column} {row.get(column)!r} but claims.jsonl has {want}")
    sources_by_run = {}
    for l in sources:
        sources_by_run.setdefault(l["run_id"], []).append(l)
    for row in runs:
        own = source_counts(sources_by_run.get(row["run_id"], []))
        for column, key in (("sources", "cited"), ("inaccessible_sources", "inaccessible"),
                            ("uncaptured_sources", "uncaptured")):
            if column in row and (_count(row, column) or 0) != own[key]:
                problems.append(f"runs.csv: run {row['run_id']}: {column} {row.get(column)!r} but sources.jsonl has {own[key]}")
    for run_id in sources_by_run.keys() - run_ids:
        problems.append(f"sources.jsonl: sources of run {run_id}, which runs.csv does not plan")
    for run_id in claims_by_run.keys() - run_ids:
        problems.append(f"claims.jsonl: claims of run {run_id}, which runs.csv does not plan")
    for c in claims:
        if c.get("status") == "judged" and c.get("verdict") not in ("YES", "NO"):
            problems.append(f"claims.jsonl: run {c['run_id']} claim {c.get('claim_index')}: judged without a YES/NO verdict")

    arms = []
    Q = len(questions)
    for arm in arm_ids:
        rows = [r for r in runs if r["arm"] == arm and r["question_id"] in index]
        own_claims = [c for c in claims if c["arm"] == arm and c["question_id"] in index]
        counts = {o: sum(1 for r in rows if r["outcome"] == o) for o in OUTCOMES}
        counts["planned"] = len(rows)
        pending = sum(1 for r in rows if r["outcome"] == "pending")
        counts["attempted"] = len(rows) - counts["not_run"] - pending
        vec = {k: [0] * Q for k in ("completed", "planned", "supported", "judged", "resolved", "citations")}
        for r in rows:
            q = index[r["question_id"]]
            vec["planned"][q] += 1
            vec["completed"][q] += r["outcome"] == "completed"
            citations = _count(r, "citations") or 0
            vec["citations"][q] += citations
            vec["resolved"][q] += citations - (_count(r, "unresolved_citations") or 0)
        for c in own_claims:
            if c.get("status") == "judged":
                q = index[c["question_id"]]
                vec["judged"][q] += 1
                vec["supported"][q] += c.get("verdict") == "YES"
        extracted = len(own_claims)
        judged, supported = sum(vec["judged"]), sum(vec["supported"])
        citations, resolved = sum(vec["citations"]), sum(vec["resolved"])

        def rate(status, num, den, value, vectors):
            measured = status == "measured"
            return {"value": value if measured else None, "numerator": num, "denominator": den,
                    "status": status, "_vectors": vectors if measured else None}

        cited = sum(1 for c in own_claims if c.get("cited_indices"))
        unscored = sum(1 for r in rows if r["outcome"] == "completed" and (r.get("claims") or "") == "")
        if cited == 0:
            support_status = "unmeasured" if unscored > 0 else "not_applicable"
        else:
            support_status = "unmeasured" if judged == 0 else "measured"
        if citations == 0:
            resolution_status = "unmeasured" if unscored > 0 else "not_applicable"
        else:
            resolution_status = "measured"
        completion_status = "not_applicable" if len(rows) == 0 else "measured"
        s_macro = _macro(list(zip(vec["supported"], vec["judged"])))
        r_macro = _macro(list(zip(vec["resolved"], vec["citations"])))
        macro_vectors = lambda num, den: ([n / d if d > 0 else 0.0 for n, d in zip(num, den)],
                                          [1.0 if d > 0 else 0.0 for d in den])
        rates = {
            "completion": rate(completion_status, counts["completed"], len(rows),
                               _micro(counts["completed"], len(rows)), (vec["completed"], vec["planned"])),
            "support_micro": rate(support_status, supported, judged, _micro(supported, judged),
                                  (vec["supported"], vec["judged"])),
            "support_macro": rate(support_status, s_macro[0], s_macro[1], s_macro[2],
                                  macro_vectors(vec["supported"], vec["judged"])),
            "resolution_micro": rate(resolution_status, resolved, citations, _micro(resolved, citations),
                                     (vec["resolved"], vec["citations"])),
            "resolution_macro": rate(resolution_status, r_macro[0], r_macro[1], r_macro[2],
                                     macro_vectors(vec["resolved"], vec["citations"])),
        }
        # Cited sources of scored outputs (sources.jsonl).
        own_sources = [l for l in sources if l.get("arm") == arm and l.get("question_id") in index]
        sv = {k: [0] * Q for k in ("scored", "cited", "inaccessible", "captured")}
        for r in rows:
            sv["scored"][index[r["question_id"]]] += (r.get("claims") or "") != ""
        for l in own_sources:
            q = index[l["question_id"]]
            sv["cited"][q] += 1
            sv["inaccessible"][q] += l["status"] == "inaccessible"
            sv["captured"][q] += l["status"] != "uncaptured"
        scored, cited_sources, captured = sum(sv["scored"]), sum(sv["cited"]), sum(sv["captured"])
        if scored == 0:
            spo_status = "unmeasured" if unscored > 0 else "not_applicable"
        else:
            spo_status = "measured"
        if cited_sources == 0:
            inacc_status = "unmeasured" if unscored > 0 else "not_applicable"
        else:
            inacc_status = "unmeasured" if captured == 0 else "measured"
        rates["sources_per_output"] = rate(spo_status, cited_sources, scored, _micro(cited_sources, scored),
                                           (sv["cited"], sv["scored"]))
        rates["inaccessible_source_rate"] = rate(inacc_status, sum(sv["inaccessible"]), captured,
                                             _micro(sum(sv["inaccessible"]), captured),
                                             (sv["inaccessible"], sv["captured"]))
        source_blocks = {"": source_counts(own_sources)}
        for category in sorted({r["category"] for r in rows if r.get("category")}):
            source_blocks[category] = source_counts([l for l in own_sources if l.get("category") == category])
        rv = review_vectors(review, arm, index)
        for name, (num_key, den_key, unresolved_keys) in REVIEW_RATES.items():
            num, den = rv[num_key], rv[den_key]
            nothing = "no claim-citation pairs" if den_key == "pairs" else "no factual claims"
            if sum(rv["outputs"]) == 0:
                status = "not_applicable" if counts["completed"] == 0 else "unmeasured"
            elif sum(den) == 0:
                status = "not_applicable"
            elif sum(sum(rv[k]) for k in unresolved_keys) > 0:
                status = "unmeasured"
            else:
                status = "measured"
            m = _macro(list(zip(num, den)))
            if name == "secondary_only_sources":
                rates[name] = rate(status, sum(num), sum(den), _micro(sum(num), sum(den)), (num, den))
                continue
            rates[f"{name}_micro"] = rate(status, sum(num), sum(den), _micro(sum(num), sum(den)), (num, den))
            rates[f"{name}_macro"] = rate(status, m[0], m[1], m[2], macro_vectors(num, den))
        arms.append({"id": arm, "counts": counts,
                     "claims": {"extracted": extracted, "judged": judged, "supported": supported},
                     "citations": {"total": citations, "unresolved": citations - resolved},
                     "sources": source_blocks[""],
                     "time_cost": cost_block(rows),
                     "category_sources": {k: v for k, v in source_blocks.items() if k},
                     "rates": rates})

    if with_intervals:
        wanted = [(a, name) for a in arms for name in RATES if a["rates"][name]["_vectors"] is not None]
        ratios = [a["rates"][name]["_vectors"] for a, name in wanted]
        for (a, name), (low, high) in zip(wanted, intervals(ratios, Q, draws, seed)):
            a["rates"][name]["ci_low"], a["rates"][name]["ci_high"] = low, high
        for a in arms:
            for name in RATES:
                a["rates"][name].setdefault("ci_low", None)
                a["rates"][name].setdefault("ci_high", None)
    return arms, problems


def difference_intervals(pairs, clusters, draws, seed):
    """One (ci_low, ci_high) per ((num_a, den_a), (num_b, den_b)) difference
    a - b, both sides on the same draw (paired), undefined draws left out."""
    key = bootstrap_key(seed)
    values = [[] for _ in pairs]
    for b in range(draws):
        m = multiplicities(key, b, clusters)
        for (ra, rb), out in zip(pairs, values):
            sides = []
            for num, den in (ra, rb):
                n = d = 0.0
                for q in range(clusters):
                    if num[q] != 0 or den[q] != 0:
                        n += m[q] * num[q]
                        d += m[q] * den[q]
                sides.append(n / d if d != 0 else None)
            if None not in sides:
                out.append(sides[0] - sides[1])
    result = []
    for v in values:
        v.sort()
        result.append((percentile_linear(v, 0.025), percentile_linear(v, 0.975)))
    return result


def derive_review_differences(runs, review, questions, comparisons, draws, seed):
    """The paired review differences (micro, a - b over the questions where
    both arms completed a run) of summary.json's comparisons: {(a, b, key):
    (value, ci_low, ci_high, questions)}."""
    index = {q: i for i, q in enumerate(questions)}
    completed = {}
    for r in runs:
        if r["outcome"] == "completed" and r["question_id"] in index:
            completed.setdefault(r["arm"], set()).add(index[r["question_id"]])
    wanted, out = [], {}
    for c in comparisons:
        a, b = c["a"], c["b"]
        paired = completed.get(a, set()) & completed.get(b, set())
        va, vb = review_vectors(review, a, index), review_vectors(review, b, index)
        for name, (num_key, den_key, _) in REVIEW_RATES.items():
            if name in UNCOMPARED:
                continue
            mask = lambda v: [x if q in paired else 0 for q, x in enumerate(v)]
            sa, sb = (mask(va[num_key]), mask(va[den_key])), (mask(vb[num_key]), mask(vb[den_key]))
            value = None
            if sum(sa[1]) and sum(sb[1]):
                value = sum(sa[0]) / sum(sa[1]) - sum(sb[0]) / sum(sb[1])
            both = sum(1 for q in range(len(questions)) if sa[1][q] > 0 and sb[1][q] > 0)
            wanted.append(((a, b, f"{name}_micro"), (sa, sb), value, both))
    cis = difference_intervals([w[1] for w in wanted], len(questions), draws, seed) if wanted else []
    for (k, _, value, both), (lo, hi) in zip(wanted, cis):
        out[k] = (value, lo if value is not None else None, hi if value is not None else None, both)
    return out


# === comparing ===

class Comparison:
    def __init__(self):
        self.compared = 0
        self.differences = []

    def number(self, name, reported, derived):
        self.compared += 1
        if isinstance(derived, float) or isinstance(reported, float):
            same = (reported is None) == (derived is None) and (
                derived is None or (isinstance(reported, (int, float)) and not isinstance(reported, bool)
                                    and abs(reported - derived) <= FLOAT_TOLERANCE))
        else:
            same = reported == derived and type(reported) is type(derived)
        if not same:
            self.differences.append(f"{name}: report {reported!r} vs rederived {derived!r}")


def compare(summary, header, runs, arms_derived, problems, with_intervals):
    cmp = Comparison()
    versions = {("summary.json", summary.get("metrics_version"), summary.get("manifest_sha256")),
                ("claims.jsonl", header.get("metrics_version"), header.get("manifest_sha256"))}
    for row in runs:
        try:
            mv = int(row.get("metrics_version", ""))
        except ValueError:
            mv = row.get("metrics_version")
        versions.add((f"runs.csv run {row['run_id']}", mv, row.get("manifest_sha256")))
    reference = (summary.get("metrics_version"), summary.get("manifest_sha256"))
    for where, mv, sha in sorted(versions, key=str):
        cmp.number(f"{where}: metrics_version", reference[0], mv)
        cmp.number(f"{where}: manifest_sha256", reference[1], sha)

    run_arms = sorted({r["arm"] for r in runs})
    summary_arms = {a.get("id"): a for a in summary.get("arms", [])}
    for arm in run_arms:
        if arm not in summary_arms:
            cmp.differences.append(f"arms[{arm}]: in runs.csv but not in summary.json")
    run_questions = {r["question_id"] for r in runs}
    if run_questions != set(summary.get("questions", [])):
        cmp.differences.append(f"questions: summary.json lists {sorted(summary.get('questions', []))}, "
                               f"runs.csv plans {sorted(run_questions)}")

    for derived in arms_derived:
        arm = derived["id"]
        reported = summary_arms.get(arm, {})
        for group in ("counts", "claims", "citations", "sources", "time_cost"):
            for key, value in derived[group].items():
                cmp.number(f"arms[{arm}].{group}.{key}", reported.get(group, {}).get(key), value)
        reported_categories = {c.get("category"): c for c in reported.get("categories", [])}
        for category, block in derived["category_sources"].items():
            for key, value in block.items():
                cmp.number(f"arms[{arm}].categories[{category}].sources.{key}",
                           reported_categories.get(category, {}).get("sources", {}).get(key), value)
        for name in RATES:
            mine = derived["rates"][name]
            theirs = reported.get("rates", {}).get(name, {})
            fields = ["value", "numerator", "denominator", "status"]
            if with_intervals:
                fields += ["ci_low", "ci_high"]
            for field in fields:
                cmp.number(f"arms[{arm}].rates.{name}.{field}", theirs.get(field), mine[field])
            if not with_intervals and mine["status"] != "measured":
                # A rate that is not measured has no interval, whatever the draws.
                for field in ("ci_low", "ci_high"):
                    cmp.number(f"arms[{arm}].rates.{name}.{field}", theirs.get(field), None)
    cmp.differences = problems + cmp.differences
    return cmp


def rederive(report_dir, with_intervals=False):
    """(numbers compared, differences) for a report folder."""
    d = Path(report_dir)
    try:
        summary = json.loads((d / "summary.json").read_text(encoding="utf-8"))
        runs = read_runs(d / "runs.csv")
        header, claims = read_claims(d / "claims.jsonl")
        review = read_review(d / "review.jsonl")
        sources = read_sources(d / "sources.jsonl")
    except (OSError, json.JSONDecodeError, ReportError) as e:
        raise ReportError(str(e))
    boot = summary.get("bootstrap", {})
    if with_intervals and boot.get("algorithm") != ALGORITHM:
        raise ReportError(f"summary.json: bootstrap algorithm {boot.get('algorithm')!r}; this script re-derives {ALGORITHM}")
    arm_ids = [a["id"] for a in summary.get("arms", [])]
    derived, problems = derive(runs, claims, summary.get("questions", []), arm_ids, with_intervals,
                               int(boot.get("draws", 0)), int(boot.get("seed", 0)), review, sources)
    cmp = compare(summary, header, runs, derived, problems, with_intervals)
    if with_intervals and review:
        # The paired review differences, re-derived independently.
        diffs = derive_review_differences(runs, review, summary.get("questions", []),
                                          summary.get("comparisons", []), int(boot.get("draws", 0)),
                                          int(boot.get("seed", 0)))
        for c in summary.get("comparisons", []):
            for name in REVIEW_RATES:
                if name in UNCOMPARED:
                    continue
                key = f"{name}_micro"
                value, lo, hi, both = diffs[(c["a"], c["b"], key)]
                theirs = c.get(key, {})
                where = f"comparisons[{c['a']} vs {c['b']}].{key}"
                for field, mine in (("value", value), ("ci_low", lo), ("ci_high", hi), ("questions", both)):
                    cmp.number(f"{where}.{field}", theirs.get(field), mine)
    return cmp.compared, cmp.differences


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report_dir")
    p.add_argument("--intervals", action="store_true", help="also re-derive every bootstrap interval exactly")
    a = p.parse_args(argv)
    try:
        compared, differences = rederive(a.report_dir, a.intervals)
    except ReportError as e:
        print(f"rederive_report.py: {e}", file=sys.stderr)
        return 2
    if differences:
        print(f"rederived {compared} numbers, {len(differences)} differ:")
        for line in differences:
            print(f"  {line}")
        return 1
    print(f"rederived {compared} numbers, all agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
