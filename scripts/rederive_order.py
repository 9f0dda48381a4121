#!/usr/bin/env python3
"""Re-derive a cohort's run order (algorithm v1) with Python's standard
library alone, independently of cohort's Rust code.

    scripts/rederive_order.py COHORT_DIR          # compare with manifest.json
    scripts/rederive_order.py --questions q1,q2 --arms a,b --repeats 2 --seed 7

Algorithm v1 (also documented in core/src/order.rs and ARCHITECTURE.md):
  1. canonical list: for each question in file order, for each arm in config
     order, for each repeat 1..=R: "{question_id}:{arm_id}:{repeat}";
  2. key = SHA-256(b"cohort-order-v1:" + decimal ASCII seed);
  3. keystream = ChaCha20 (RFC 8439), that key, 12-byte zero nonce, block
     counter from 0, read as little-endian u64 words;
  4. Fisher-Yates: for i from n-1 down to 1, bound = i+1, draw x until
     x < 2^64 - (2^64 mod bound), j = x mod bound, swap i and j.
Exits 0 when the manifest's order matches, 1 when it does not.
"""
import argparse
import hashlib
import json
import struct
import sys
import tomllib
from pathlib import Path

MASK = 0xFFFFFFFF


def _rotl(v, n):
    return ((v << n) & MASK) | (v >> (32 - n))


def _quarter(s, a, b, c, d):
    s[a] = (s[a] + s[b]) & MASK; s[d] = _rotl(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & MASK; s[b] = _rotl(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b]) & MASK; s[d] = _rotl(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & MASK; s[b] = _rotl(s[b] ^ s[c], 7)


def chacha20_block(key, counter, nonce):
    state = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574]
    state += list(struct.unpack("<8I", key)) + [counter] + list(struct.unpack("<3I", nonce))
    w = list(state)
    for _ in range(10):
        _quarter(w, 0, 4, 8, 12); _quarter(w, 1, 5, 9, 13)
        _quarter(w, 2, 6, 10, 14); _quarter(w, 3, 7, 11, 15)
        _quarter(w, 0, 5, 10, 15); _quarter(w, 1, 6, 11, 12)
        _quarter(w, 2, 7, 8, 13); _quarter(w, 3, 4, 9, 14)
    return struct.pack("<16I", *[(w[i] + state[i]) & MASK for i in range(16)])


def words(seed):
    key = hashlib.sha256(b"cohort-order-v1:" + str(seed).encode()).digest()
    counter = 0
    while True:
        block = chacha20_block(key, counter, bytes(12))
        counter += 1
        yield from struct.unpack("<8Q", block)


def run_order(questions, arms, repeats, seed):
    runs = [f"{q}:{a}:{r}" for q in questions for a in arms for r in range(1, repeats + 1)]
    stream = words(seed)
    for i in range(len(runs) - 1, 0, -1):
        bound = i + 1
        limit = 2**64 - (2**64 % bound)
        while True:
            x = next(stream)
            if x < limit:
                break
        j = x % bound
        runs[i], runs[j] = runs[j], runs[i]
    return runs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cohort_dir", nargs="?")
    p.add_argument("--questions")
    p.add_argument("--arms")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int)
    a = p.parse_args()
    if a.cohort_dir is None:
        order = run_order(a.questions.split(","), a.arms.split(","), a.repeats, a.seed)
        print(json.dumps(order))
        return 0
    d = Path(a.cohort_dir)
    cfg = tomllib.loads((d / "cohort.toml").read_text(encoding="utf-8"))
    questions = [q["id"] for q in json.loads((d / "questions.json").read_text(encoding="utf-8"))]
    arms = [arm["id"] for arm in cfg["arms"]]
    seed = int(cfg["seed"])
    order = run_order(questions, arms, int(cfg.get("repeats", 1)), seed)
    manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    digest = hashlib.sha256("".join(r + "\n" for r in order).encode()).hexdigest()
    ok = manifest["order"] == order and manifest["order_sha256"] == digest
    print(f"{len(order)} runs, order_sha256 {digest}: {'matches' if ok else 'DOES NOT MATCH'} manifest.json")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
