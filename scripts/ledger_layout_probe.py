#!/usr/bin/env python3
"""What a run's lifecycle costs Redis in several key layouts (issue 24).

A probe, not the ledger (which now keeps a run's state in one field of a
shared `runs` hash, close to the no-key layout here: `ledger/src/lua/`):
it measures the Redis CPU a run's lease and final result cost when each
run creates two keys (a hash `run:ID` at its lease and a list
`attempts:ID` at its result: the ledger's layout 1, before 2026-12-07)
against one where a run creates none (its lease a field of one small
`leased` hash, its final state and attempts one field of one
large `runs` hash), and against two with one key a run (the run's hash, the
attempt written into it at the result instead of a list of its own: as one
JSON field, or as small fields of under 64 bytes each, so the hash stays a
listpack; or in one hash shared by every run). What the no-key layout
saves is commands more than keys: one HMGET, HSET and HDEL a batch of
32, where a hash a run takes an HMGET and an HSET (and an RPUSH) a run.
All do the same batched work around the runs (a lease
set, an audit entry a batch, counters), in batches of 32 as the lifecycle
bench's load generators lease and report, on a private redis-server with
`appendonly yes` and `appendfsync everysec` (the bench's durable case).
Redis's own CPU (`INFO cpu`, main thread) is read before and after, so
the client's speed does not count.

    python3 scripts/ledger_layout_probe.py [RUNS]     # default 200000

Needs redis-server and redis-cli. Prints microseconds of Redis CPU a run
for each layout; asserts nothing.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

BATCH = 32
ATTEMPT = (
    '{{"worker":"bench-7-1a2b3c4d5e-0","attempt":1,"token":{token},"class":"ok","http_status":200,'
    '"detail":"","started_ms":1796631259123,"ended_ms":1796631259456,"observed_version":"sim-1"}}'
)
RECORD = "9f" * 32

# Layout 1 (the ledger before 2026-12-07): a hash at the lease (7 fields), an attempt list and the
# final fields at the result.
TWO_KEYS_LEASE = """
local now, w = ARGV[1], ARGV[2]
local z = {}
for i = 3, #ARGV, 2 do
  local id, pos = ARGV[i], ARGV[i + 1]
  redis.call('HSET', 'run:' .. id, 'pos', pos, 'state', 'leased', 'attempts', 1, 'token', pos,
    'worker', w, 'expires', now, 'started', now)
  z[#z + 1] = now
  z[#z + 1] = id
end
redis.call('ZADD', 'leases', unpack(z))
redis.call('HINCRBY', 'arms', 'a|leased', #z / 2)
"""


def run_hash_finish(attempt_writes):
    """A finish over the run's hash: `attempt_writes` is the Lua that stores
    the attempt `body` of run `id` and ends the run (`key` is its hash,
    `held` what HMGET read of it); the batched work around it is the same
    for every layout that keeps a hash a run."""
    return """
local now, rec = ARGV[1], ARGV[2]
local ended, f = {}, {}
for i = 3, #ARGV, 2 do
  local id, body = ARGV[i], ARGV[i + 1]
  local key = 'run:' .. id
  local held = redis.call('HMGET', key, 'state', 'token', 'record', 'outcome', 'attempts')
""" + attempt_writes.strip("\n") + """
  ended[#ended + 1] = id
  f[#f + 1] = 'run_id'; f[#f + 1] = id; f[#f + 1] = 'detail'; f[#f + 1] = 'completed'
end
redis.call('ZREM', 'leases', unpack(ended))
redis.call('XADD', 'events', 'MAXLEN', '~', 100000, '*', 'at_ms', now, 'kind', 'final', unpack(f))
redis.call('HINCRBY', 'arms', 'a|leased', -#ended)
redis.call('HINCRBY', 'counts', 'o|completed', #ended)
"""


FINAL_FIELDS = "'record', rec, 'state', 'final', 'outcome', 'completed', 'reason', '', 'ended', now"
TWO_KEYS_FINISH = run_hash_finish(f"""
  redis.call('RPUSH', 'attempts:' .. id, body)
  redis.call('HSET', key, {FINAL_FIELDS})""")

# One key a run: the attempt's JSON a field of the run's hash (longer than
# `hash-max-listpack-value`, so the hash becomes a table).
ONE_KEY_FINISH = run_hash_finish(f"""
  redis.call('HSET', key, {FINAL_FIELDS}, 'a1', body)""")

# One key a run: the attempt as small fields of the run's hash (a listpack,
# each field found by a scan).
SMALL_FIELDS_FINISH = run_hash_finish(f"""
  redis.call('HSET', key, {FINAL_FIELDS},
    'a1c', 'ok', 'a1h', 200, 'a1s', now, 'a1e', now, 'a1w', 'bench-7-1a2b3c4d5e-0', 'a1t', held[2] or 1,
    'a1v', 'sim-1', 'a1d', '')""")

# One key a run: the attempt a field of one shared `attempts` hash (the
# run's hash stays a listpack).
SHARED_ATTEMPTS_FINISH = run_hash_finish(f"""
  redis.call('HSET', 'attempts', id, body)
  redis.call('HSET', key, {FINAL_FIELDS})""")

# No key a run: the lease a field of a small hash, the final state with its
# attempts one field of a large one.
NO_KEY_LEASE = """
local now, w = ARGV[1], ARGV[2]
local z, h = {}, {}
for i = 3, #ARGV, 2 do
  local id, pos = ARGV[i], ARGV[i + 1]
  h[#h + 1] = id
  h[#h + 1] = pos .. '|' .. w .. '|' .. now .. '|1|' .. now .. '|' .. pos
  z[#z + 1] = now
  z[#z + 1] = id
end
redis.call('HSET', 'leased', unpack(h))
redis.call('ZADD', 'leases', unpack(z))
redis.call('HINCRBY', 'arms', 'a|leased', #z / 2)
"""
NO_KEY_FINISH = """
local now, rec = ARGV[1], ARGV[2]
local ended, f, ids = {}, {}, {}
for i = 3, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local held = redis.call('HMGET', 'leased', unpack(ids))
local finals = {}
for k, id in ipairs(ids) do
  local body = ARGV[2 + 2 * k]
  finals[#finals + 1] = id
  finals[#finals + 1] = 'final|completed||' .. now .. '|' .. rec .. '|' .. (held[k] or '') .. '|[' .. body .. ']'
  f[#f + 1] = 'run_id'; f[#f + 1] = id; f[#f + 1] = 'detail'; f[#f + 1] = 'completed'
end
redis.call('HSET', 'runs', unpack(finals))
redis.call('HDEL', 'leased', unpack(ids))
redis.call('ZREM', 'leases', unpack(ids))
redis.call('XADD', 'events', 'MAXLEN', '~', 100000, '*', 'at_ms', now, 'kind', 'final', unpack(f))
redis.call('HINCRBY', 'arms', 'a|leased', -#ids)
redis.call('HINCRBY', 'counts', 'o|completed', #ids)
"""


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def main_cpu(port):
    info = cli(port, "INFO", "cpu")
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return float(fields["used_cpu_user_main_thread"]) + float(fields["used_cpu_sys_main_thread"])


def measure(name, lease, finish, runs):
    tmp = tempfile.mkdtemp(prefix="layout-probe-")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp, "--save", "",
         "--appendonly", "yes", "--appendfsync", "everysec"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                cli(port, "PING")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.05)
        lease_sha = cli(port, "SCRIPT", "LOAD", lease)
        finish_sha = cli(port, "SCRIPT", "LOAD", finish)
        now = "1796631259123"
        commands = []
        for first in range(0, runs, BATCH):
            ids = [f"q{n // 10:06d}:arm-{n % 10}:1" for n in range(first, min(first + BATCH, runs))]
            lease_args = [a for n, i in enumerate(ids, first) for a in (i, n)]
            commands.append(resp("EVALSHA", lease_sha, 0, now, "bench-7-1a2b3c4d5e-0", *lease_args))
            finish_args = [a for n, i in enumerate(ids, first) for a in (i, ATTEMPT.format(token=n))]
            commands.append(resp("EVALSHA", finish_sha, 0, now, RECORD, *finish_args))
        payload = b"".join(commands)
        before = main_cpu(port)
        piped = subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=payload, capture_output=True)
        after = main_cpu(port)
        if b"errors: 0" not in piped.stdout:
            sys.exit(f"{name}: redis-cli --pipe reported errors: {piped.stdout.decode()[-300:]}")
        keys = cli(port, "DBSIZE")
        memory = cli(port, "INFO", "memory")
        used = next(line.split(":")[1] for line in memory.splitlines() if line.startswith("used_memory_human"))
        print(f"{name:<38} {(after - before) * 1e6 / runs:6.1f} us of Redis CPU a run ({runs} runs, "
              f"{keys} keys, {used} used)")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    for tool in ("redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not on PATH")
    print(f"lease + final result of each run, batches of {BATCH}, AOF everysec, {os.cpu_count()} cores")
    for _ in range(2):
        measure("two keys a run (ledger layout 1)", TWO_KEYS_LEASE, TWO_KEYS_FINISH, runs)
        measure("no key a run (shared hashes)", NO_KEY_LEASE, NO_KEY_FINISH, runs)
        measure("one key a run (attempt JSON in hash)", TWO_KEYS_LEASE, ONE_KEY_FINISH, runs)
        measure("one key, attempt as small fields", TWO_KEYS_LEASE, SMALL_FIELDS_FINISH, runs)
        measure("one key, attempt in a shared hash", TWO_KEYS_LEASE, SHARED_ATTEMPTS_FINISH, runs)


if __name__ == "__main__":
    main()
