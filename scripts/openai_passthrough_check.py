#!/usr/bin/env python3
"""Drives the judge proxy's OpenAI-compatible passthrough with the official
`openai` Python package (PyPI), as any OpenAI client of a team would.

Usage (a proxy and its upstream must be running; the Rust test
`tests/tests/judge_proxy_openai_client.rs` starts the mock provider and
`cohort judge-proxy`, then runs this script):

    COHORT_PROXY_URL=http://127.0.0.1:8081 COHORT_TEAM_KEY=... \
        python3 scripts/openai_passthrough_check.py --judge j

Checks, with the real client:
- a chat completion through a judge route answers, and the proxy names the
  served model in `x-cohort-served-model`;
- a wrong team key is an AuthenticationError (401);
- an unknown model is a NotFoundError (404);
- a Responses API call (`client.responses.create`) answers, with
  `output_text`, the served model in the header and the body, and usage;
- `previous_response_id` (state the proxy does not keep) is a
  BadRequestError (400) naming the field.
Exits non-zero with a message on the first failed check.
"""

import argparse
import os
import sys

import openai


def fail(message: str) -> None:
    print(f"openai-python passthrough check FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--judge", default="j", help="a judge name configured in the proxy")
    parser.add_argument("--expect-served", default=None, help="the served model to expect")
    args = parser.parse_args()
    base = os.environ["COHORT_PROXY_URL"].rstrip("/") + "/v1"
    key = os.environ["COHORT_TEAM_KEY"]

    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=30)

    raw = client.chat.completions.with_raw_response.create(
        model=args.judge,
        messages=[{"role": "user", "content": "Say hello to the judge proxy."}],
    )
    completion = raw.parse()
    content = completion.choices[0].message.content or ""
    if not content:
        fail("the completion has no content")
    served = raw.headers.get("x-cohort-served-model")
    if not served:
        fail("no x-cohort-served-model header")
    if args.expect_served and served != args.expect_served:
        fail(f"served model {served!r}, expected {args.expect_served!r}")
    if completion.usage is None or completion.usage.prompt_tokens <= 0:
        fail("no usage in the completion")
    print(f"completion ok: served by {served}, {completion.usage.total_tokens} tokens: {content[:40]!r}")

    wrong = openai.OpenAI(base_url=base, api_key=key + "-wrong", max_retries=0, timeout=30)
    try:
        wrong.chat.completions.create(model=args.judge, messages=[{"role": "user", "content": "x"}])
        fail("a wrong team key was accepted")
    except openai.AuthenticationError as e:
        if key in str(e):
            fail("the 401 echoes the team key")
        print("wrong key ok: AuthenticationError")

    try:
        client.chat.completions.create(model="no-such-route", messages=[{"role": "user", "content": "x"}])
        fail("an unknown model was accepted")
    except openai.NotFoundError:
        print("unknown model ok: NotFoundError")

    raw = client.responses.with_raw_response.create(
        model=args.judge,
        instructions="Answer in one line.",
        input="Say hello through the Responses API.",
        max_output_tokens=64,
    )
    response = raw.parse()
    text = response.output_text or ""
    if not text:
        fail("the response has no output_text")
    served = raw.headers.get("x-cohort-served-model")
    if not served:
        fail("no x-cohort-served-model header on the response")
    if args.expect_served and (served != args.expect_served or response.model != args.expect_served):
        fail(f"response served by {served!r} (body {response.model!r}), expected {args.expect_served!r}")
    if response.usage is None or response.usage.input_tokens <= 0:
        fail("no usage in the response")
    print(f"responses ok: served by {served}, {response.usage.total_tokens} tokens: {text[:40]!r}")

    try:
        client.responses.create(model=args.judge, input="again", previous_response_id=response.id)
        fail("previous_response_id was accepted")
    except openai.BadRequestError as e:
        if "previous_response_id" not in str(e):
            fail(f"the 400 does not name previous_response_id: {e}")
        print("previous_response_id ok: BadRequestError")

    print("openai-python passthrough check: ok")


if __name__ == "__main__":
    main()
