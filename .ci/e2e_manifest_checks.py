#!/usr/bin/env python3
"""Offline checks of the kind e2e sample (e2e/kind/manifests) with the real engine.

Usage: e2e_manifest_checks.py BINARY MANIFEST_DIR

Validates the sample RestoreHooks and ClusterRestoreHooks against the CRD schemas that
`restore-hooks crd` prints (strictly: unknown fields are errors, as the API server would prune
them silently). Runs
`restore-hooks inject` on every sample pod, as the webhook would see it (namespace label,
restore name), and checks the injected init containers and the exec plan that e2e/kind/run.sh
later expects from the cluster. Catches a sample that drifted from the engine's rules before
anyone spends ten minutes on a kind run.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

# pod -> (namespace restore name or None, expected injected init containers, expected exec hooks)
EXPECT = {
    "db": ("e2e-restore-1", ["seed-data"], 2),
    "web": ("e2e-restore-1", ["restore-data"], 1),
    "cache": (None, [], 1),
    "bystander": (None, [], 0),
}


def strict(schema):
    """Reject unknown fields where the API server would prune them."""
    if isinstance(schema, dict):
        if (schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        for v in schema.values():
            strict(v)
    elif isinstance(schema, list):
        for v in schema:
            strict(v)
    return schema


def check_restorehooks(binary, path, failures):
    import jsonschema
    out = subprocess.run([binary, "crd"], check=True, capture_output=True, text=True).stdout
    by_kind = {}
    for crd in yaml.safe_load_all(out):
        if crd:
            by_kind[crd["spec"]["names"]["kind"]] = crd
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc.get("kind") not in ("RestoreHook", "ClusterRestoreHook"):
            continue
        crd = by_kind.get(doc["kind"])
        ns = doc["metadata"].get("namespace")
        name = f"{doc['kind']} {ns + '/' if ns else ''}{doc['metadata']['name']}"
        if crd is None:
            failures.append(f"{name}: `restore-hooks crd` prints no CRD for kind {doc['kind']}")
            continue
        schemas = {v["name"]: strict(v["schema"]["openAPIV3Schema"]) for v in crd["spec"]["versions"]}
        group = crd["spec"]["group"]
        grp, _, ver = doc["apiVersion"].partition("/")
        if grp != group or ver not in schemas:
            failures.append(f"{name}: apiVersion {doc['apiVersion']} not served by the CRD")
            continue
        body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
        errors = sorted(jsonschema.Draft7Validator(schemas[ver]).iter_errors(body), key=str)
        for e in errors:
            failures.append(f"{name}: {'.'.join(str(x) for x in e.absolute_path) or '<root>'}: {e.message}")
        print(f"  {'ok' if not errors else 'FAIL':5} {name} against the CRD schema ({ver})")


def main() -> int:
    binary, mdir = sys.argv[1], Path(sys.argv[2])
    pods = [d for d in yaml.safe_load_all((mdir / "pods.yaml").read_text()) if d]
    hooks = mdir / "restorehooks.yaml"
    failures = []
    check_restorehooks(binary, hooks, failures)
    for pod in pods:
        name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
        if name not in EXPECT:
            failures.append(f"{ns}/{name}: no expectation in {__file__}")
            continue
        restore, want_init, want_hooks = EXPECT[name]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump(pod, f)
            f.flush()
            cmd = [binary, "inject", "-f", f.name, "--hooks", str(hooks), "-n", ns, "-o", "json"]
            if restore:
                cmd += ["--restore", restore]
            r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"{ns}/{name}: inject failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
            continue
        out = json.loads(r.stdout)
        got_init = [c["name"] for c in out.get("spec", {}).get("initContainers") or []]
        ann = out.get("metadata", {}).get("annotations") or {}
        plan = json.loads(ann.get("restore-hooks.dev/plan", '{"hooks": []}'))
        label = (out.get("metadata", {}).get("labels") or {}).get("restore-hooks.dev/exec")
        ok = got_init == want_init and len(plan["hooks"]) == want_hooks
        ok = ok and (label == "pending") == (want_hooks > 0)
        if want_init:
            ok = ok and ann.get("restore-hooks.dev/injected") == ",".join(want_init)
        status = "ok" if ok else "FAIL"
        print(f"  {status:5} {ns}/{name}: init {got_init}, {len(plan['hooks'])} exec hook(s), label {label}")
        if not ok:
            failures.append(f"{ns}/{name}: want init {want_init} and {want_hooks} exec hooks")
    for f in failures:
        print(f"  FAIL  {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
