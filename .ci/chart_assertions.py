#!/usr/bin/env python3
"""Semantic assertions on the rendered restore-hooks Helm chart.

Usage:
  chart_assertions.py --rendered DIR --binary PATH [--chart DIR] [--release NAME] [--namespace NS]

DIR holds the `helm template --include-crds` output of the chart for these value sets:
  default.yaml          chart defaults
  all-on.yaml           charts/restore-hooks/ci/all-on-values.yaml (every optional part on)
  byo-issuer.yaml       charts/restore-hooks/ci/byo-issuer-values.yaml (own cert-manager issuer)
  no-cert-manager.yaml  certManager.enabled=false, tls.existingSecret and tls.caBundle set;
                        the caBundle used is in no-cert-manager.cabundle
The binary is used to compare the chart's CRD with `restore-hooks crd` and the Deployment's
arguments with the flags `restore-hooks serve --help` lists.

Every failed check is printed; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

FAILURES: list[str] = []
PASSED = 0


def check(cond: bool, what: str) -> bool:
    global PASSED
    if cond:
        PASSED += 1
    else:
        FAILURES.append(what)
    return cond


def load(path: Path) -> list[dict]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def index(docs: list[dict]) -> dict[tuple[str, str], dict]:
    out: dict[tuple[str, str], dict] = {}
    for d in docs:
        key = (d.get("kind"), d.get("metadata", {}).get("name"))
        check(key not in out, f"duplicate object {key}")
        out[key] = d
    return out


CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "CustomResourceDefinition"}
STD_LABELS = ["helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance",
              "app.kubernetes.io/version", "app.kubernetes.io/managed-by"]


class Ctx:
    def __init__(self, name: str, docs: list[dict], release: str, namespace: str, values: dict):
        self.name = name
        self.docs = docs
        self.objs = index(docs)
        self.release = release
        self.ns = namespace
        self.fullname = release if "restore-hooks" in release else f"{release}-restore-hooks"
        self.values = values

    def get(self, kind: str, name: str) -> dict:
        obj = self.objs.get((kind, name))
        check(obj is not None, f"[{self.name}] missing {kind}/{name}")
        return obj or {}

    def of_kind(self, kind: str) -> list[dict]:
        return [d for d in self.docs if d.get("kind") == kind]

    def c(self, cond: bool, what: str) -> bool:
        return check(cond, f"[{self.name}] {what}")


# --------------------------------------------------------------------------------------------
# Object inventory

def expected_objects(fullname: str, *, cert_manager: bool, builtin_ca: bool, optional: bool) -> set:
    objs = {
        ("CustomResourceDefinition", "restorehooks.restore-hooks.dev"),
        ("ServiceAccount", fullname),
        ("ClusterRole", fullname),
        ("ClusterRoleBinding", fullname),
        ("Role", f"{fullname}-leader-election"),
        ("RoleBinding", f"{fullname}-leader-election"),
        ("Service", fullname),
        ("Deployment", fullname),
        ("PodDisruptionBudget", fullname),
        ("MutatingWebhookConfiguration", fullname),
    }
    if cert_manager:
        objs.add(("Certificate", f"{fullname}-serving"))
        if builtin_ca:
            objs |= {("Issuer", f"{fullname}-selfsigned"), ("Certificate", f"{fullname}-ca"),
                     ("Issuer", f"{fullname}-ca")}
    if optional:
        objs |= {("ServiceMonitor", fullname), ("PrometheusRule", fullname), ("NetworkPolicy", fullname)}
    return objs


def check_inventory(ctx: Ctx, expected: set) -> None:
    got = set(ctx.objs)
    missing = sorted(expected - got)
    extra = sorted(got - expected)
    ctx.c(not missing, f"objects missing from the render: {missing}")
    ctx.c(not extra, f"unexpected objects in the render: {extra}")
    for (kind, name), obj in ctx.objs.items():
        md = obj.get("metadata", {})
        if kind in CLUSTER_SCOPED:
            ctx.c("namespace" not in md, f"{kind}/{name} is cluster-scoped but has metadata.namespace")
        else:
            ctx.c(md.get("namespace") == ctx.ns, f"{kind}/{name} namespace is {md.get('namespace')!r}, want {ctx.ns!r}")
        if kind != "CustomResourceDefinition":
            labels = md.get("labels") or {}
            for lab in STD_LABELS:
                ctx.c(lab in labels, f"{kind}/{name} lacks standard label {lab}")


# --------------------------------------------------------------------------------------------
# Deployment and Pod Security "restricted"

ALLOWED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                        "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}


def check_restricted(ctx: Ctx, pod: dict) -> None:
    """Pod Security Standards 'restricted' (baseline + restricted controls), by construction."""
    what = "pod template"
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        ctx.c(pod.get(f) is not True, f"{what}: {f} must not be true")
    psc = pod.get("securityContext") or {}
    ctx.c(psc.get("runAsNonRoot") is True, f"{what}: securityContext.runAsNonRoot must be true")
    ctx.c(psc.get("runAsUser") == 65532, f"{what}: securityContext.runAsUser must be 65532, got {psc.get('runAsUser')!r}")
    ctx.c((psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
          f"{what}: securityContext.seccompProfile.type must be RuntimeDefault")
    for s in psc.get("sysctls") or []:
        ctx.c(s.get("name") in SAFE_SYSCTLS, f"{what}: unsafe sysctl {s.get('name')}")
    se = (psc.get("seLinuxOptions") or {})
    ctx.c(se.get("type") in (None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
          and not se.get("user") and not se.get("role"), f"{what}: forbidden seLinuxOptions")
    ctx.c(((psc.get("appArmorProfile") or {}).get("type")) in (None, "RuntimeDefault", "Localhost"),
          f"{what}: appArmorProfile must be RuntimeDefault or Localhost")
    ctx.c(not (psc.get("windowsOptions") or {}).get("hostProcess"), f"{what}: windows hostProcess")
    for ann, val in ((pod.get("metadata") or {}).get("annotations") or {}).items():
        if ann.startswith("container.apparmor.security.beta.kubernetes.io/"):
            ctx.c(val != "unconfined", f"{what}: AppArmor unconfined")

    for vol in pod.get("volumes") or []:
        types = set(vol) - {"name"}
        ctx.c(types <= ALLOWED_VOLUME_TYPES, f"{what}: volume {vol.get('name')} has disallowed type {sorted(types - ALLOWED_VOLUME_TYPES)}")
        ctx.c("hostPath" not in vol, f"{what}: hostPath volume {vol.get('name')}")

    containers = [("container", c) for c in pod.get("containers") or []]
    containers += [("initContainer", c) for c in pod.get("initContainers") or []]
    containers += [("ephemeralContainer", c) for c in pod.get("ephemeralContainers") or []]
    ctx.c(len(pod.get("containers") or []) >= 1, f"{what}: no containers")
    for kind, c in containers:
        w = f"{kind} {c.get('name')}"
        sc = c.get("securityContext") or {}
        ctx.c(sc.get("allowPrivilegeEscalation") is False, f"{w}: allowPrivilegeEscalation must be false")
        ctx.c(sc.get("privileged") is not True, f"{w}: privileged")
        caps = sc.get("capabilities") or {}
        ctx.c("ALL" in (caps.get("drop") or []), f"{w}: capabilities.drop must contain ALL")
        ctx.c(set(caps.get("add") or []) <= {"NET_BIND_SERVICE"}, f"{w}: capabilities.add beyond NET_BIND_SERVICE")
        ctx.c(sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, f"{w}: runAsNonRoot must be true")
        ctx.c(sc.get("runAsNonRoot") is True, f"{w}: runAsNonRoot must be set at container level too")
        ctx.c(sc.get("runAsUser", psc.get("runAsUser")) not in (0, None), f"{w}: runAsUser must be non-zero")
        ctx.c((sc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
              f"{w}: seccompProfile.type must be RuntimeDefault at container level")
        ctx.c(sc.get("readOnlyRootFilesystem") is True, f"{w}: readOnlyRootFilesystem must be true")
        ctx.c(sc.get("procMount") in (None, "Default"), f"{w}: procMount must be Default")
        ctx.c(not (sc.get("windowsOptions") or {}).get("hostProcess"), f"{w}: windows hostProcess")
        for p in c.get("ports") or []:
            ctx.c(not p.get("hostPort"), f"{w}: hostPort {p.get('hostPort')}")


def parse_args(args: list[str]) -> dict[str, str]:
    out = {}
    for a in args[1:]:
        m = re.fullmatch(r"--([a-z0-9-]+)=(.*)", a)
        check(m is not None, f"container arg {a!r} is not of the form --flag=value")
        if m:
            out[m.group(1)] = m.group(2)
    return out


def check_args_parse(ctx: Ctx, binary: str, args: list[str]) -> None:
    """Run the binary with exactly the rendered arguments (addresses on loopback port 0): a flag or
    value it cannot parse is a clap usage error (exit 2, "error: ..."); failing later for want of
    a cluster or a certificate (exit 1) is fine."""
    import tempfile
    run_args = [a.replace("$(POD_NAME)", "chart-check-pod") for a in args]
    run_args = [a for a in run_args if not a.startswith(("--listen=", "--admin-listen="))]
    run_args += ["--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0"]
    env = {k: x for k, x in os.environ.items() if not k.startswith(("KUBERNETES_", "RESTORE_HOOKS_"))}
    env["KUBECONFIG"] = "/nonexistent/kubeconfig"
    with tempfile.TemporaryDirectory() as home:
        env["HOME"] = home
        try:
            r = subprocess.run([binary, *run_args], capture_output=True, text=True, timeout=15, env=env)
            code, err = r.returncode, r.stderr
        except subprocess.TimeoutExpired:
            code, err = None, ""
    ctx.c(not (code == 2 and err.lstrip().startswith("error:")),
          f"restore-hooks rejects the rendered arguments: {err.strip()[:300]} "
          f"(ran: restore-hooks {' '.join(run_args)})")


def secs(go_duration: str) -> float:
    m = re.fullmatch(r"(\d+)s", go_duration)
    check(m is not None, f"expected a whole-second duration, got {go_duration!r}")
    return float(m.group(1)) if m else 0.0


def check_deployment(ctx: Ctx, serve_flags: set[str], binary: str) -> None:
    v = ctx.values
    dep = ctx.get("Deployment", ctx.fullname)
    if not dep:
        return
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    sel = spec["selector"]["matchLabels"]
    ctx.c(spec.get("replicas") == v["replicas"], f"Deployment replicas {spec.get('replicas')} != {v['replicas']}")
    ctx.c(all(pod_labels.get(k) == val for k, val in sel.items()), "Deployment selector does not match pod labels")
    ctx.c(set(sel) == {"app.kubernetes.io/name", "app.kubernetes.io/instance"}, f"selector labels are {sorted(sel)}")
    ctx.c(spec.get("strategy", {}).get("rollingUpdate", {}).get("maxUnavailable") == 0, "rolling update must keep maxUnavailable 0")

    check_restricted(ctx, pod | {"metadata": spec["template"]["metadata"]})

    ctx.c(len(pod["containers"]) == 1, "exactly one container expected")
    c = pod["containers"][0]
    args = c.get("args") or []
    ctx.c(not c.get("command"), "container must not override the image entrypoint (command)")
    ctx.c(args[:1] == ["serve"], f"first arg must be 'serve', got {args[:1]}")
    flags = parse_args(args)
    unknown = sorted(set(flags) - serve_flags)
    ctx.c(not unknown, f"args use flags `restore-hooks serve` does not have: {unknown}")
    check_args_parse(ctx, binary, args)
    cfg = v["config"]
    want = {
        "listen": f"0.0.0.0:{v['webhook']['port']}",
        "tls-dir": "/etc/restore-hooks/tls",
        "tls-reload-interval": cfg["tlsReloadInterval"],
        "shutdown-delay": f"{v['shutdown']['delaySeconds']}s",
        "shutdown-grace": f"{v['shutdown']['graceSeconds']}s",
        "admin-listen": f"0.0.0.0:{v['metrics']['port']}",
        "log-format": cfg["logFormat"],
        "log-level": cfg["logLevel"],
        "restore-label": cfg["restoreLabel"],
        "restore-namespace-label": cfg["restoreNamespaceLabel"],
        "velero-namespace": cfg["veleroNamespace"],
        "velero-hooks": cfg["veleroHooks"],
        "on-invalid": cfg["onInvalid"],
        "max-concurrent-pods": str(cfg["maxConcurrentPods"]),
        "lease-name": cfg["leaseName"] or f"{ctx.fullname}-controller",
        "lease-namespace": ctx.ns,
        "identity": "$(POD_NAME)",
        "lease-duration": cfg["leaseDuration"],
    }
    for k, val in want.items():
        ctx.c(flags.get(k) == val, f"arg --{k}={flags.get(k)!r}, want {val!r}")

    env = {e["name"]: e for e in c.get("env") or []}
    ctx.c(env.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name",
          "env POD_NAME must come from fieldRef metadata.name")
    ctx.c(env.get("POD_NAMESPACE", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace",
          "env POD_NAMESPACE must come from fieldRef metadata.namespace")

    ports = {p["name"]: p for p in c.get("ports") or []}
    ctx.c(ports.get("https", {}).get("containerPort") == v["webhook"]["port"], "container port https != webhook.port")
    ctx.c(ports.get("metrics", {}).get("containerPort") == v["metrics"]["port"], "container port metrics != metrics.port")
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        hg = (c.get(probe) or {}).get("httpGet") or {}
        ctx.c(hg.get("path") == path and hg.get("port") in ("metrics", v["metrics"]["port"]),
              f"{probe} must GET {path} on the admin (metrics) port, got {hg}")
        ctx.c(hg.get("scheme", "HTTP") == "HTTP", f"{probe} must be plain HTTP")
    res = c.get("resources") or {}
    ctx.c(bool(res.get("requests", {}).get("cpu")) and bool(res.get("requests", {}).get("memory")),
          "resources.requests cpu and memory must be set")
    ctx.c(bool(res.get("limits", {}).get("memory")), "resources.limits.memory must be set")

    # TLS Secret mounted as a directory, never with subPath.
    tls_secret = (ctx.values["tls"]["existingSecret"] if not v["certManager"]["enabled"] else f"{ctx.fullname}-tls")
    vols = {vol["name"]: vol for vol in pod.get("volumes") or []}
    tls_vols = [n for n, vol in vols.items() if (vol.get("secret") or {}).get("secretName") == tls_secret]
    ctx.c(len(tls_vols) == 1, f"exactly one volume must mount Secret {tls_secret}, got {tls_vols}")
    mounts = [m for m in c.get("volumeMounts") or [] if m["name"] in tls_vols]
    ctx.c(len(mounts) == 1, f"the TLS volume must be mounted exactly once, got {len(mounts)}")
    for m in mounts:
        ctx.c("subPath" not in m and "subPathExpr" not in m, "TLS volume must not use subPath (renewals would never arrive)")
        ctx.c(m.get("mountPath") == flags.get("tls-dir"), f"TLS mountPath {m.get('mountPath')} != --tls-dir {flags.get('tls-dir')}")
        ctx.c(m.get("readOnly") is True, "TLS mount must be readOnly")
    for m in c.get("volumeMounts") or []:
        if "secret" in vols.get(m["name"], {}):
            ctx.c("subPath" not in m and "subPathExpr" not in m, f"secret mount {m['name']} uses subPath")
    ctx.c(pod.get("automountServiceAccountToken") is True, "controller needs its ServiceAccount token")

    budget = secs(flags.get("shutdown-delay", "0s")) + secs(flags.get("shutdown-grace", "0s"))
    tgps = pod.get("terminationGracePeriodSeconds") or 30
    ctx.c(tgps > budget, f"terminationGracePeriodSeconds {tgps} must exceed shutdown-delay + shutdown-grace = {budget}")

    # Spreading replicas across nodes.
    aff = pod.get("affinity") or {}
    if not v["affinity"]:
        paa = aff.get("podAntiAffinity") or {}
        terms = [t.get("podAffinityTerm", {}) for t in paa.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
        terms += paa.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        ctx.c(any(t.get("topologyKey") == "kubernetes.io/hostname" and
                  (t.get("labelSelector") or {}).get("matchLabels") == sel for t in terms),
              "pod anti-affinity on kubernetes.io/hostname selecting this Deployment's pods is required")
    if not v["topologySpreadConstraints"]:
        tsc = pod.get("topologySpreadConstraints") or []
        ctx.c(any(t.get("topologyKey") == "kubernetes.io/hostname" and
                  (t.get("labelSelector") or {}).get("matchLabels") == sel for t in tsc),
              "topologySpreadConstraints on kubernetes.io/hostname selecting this Deployment's pods are required")
    if v["priorityClassName"]:
        ctx.c(pod.get("priorityClassName") == v["priorityClassName"], "priorityClassName not applied")
    else:
        ctx.c("priorityClassName" not in pod, "priorityClassName set although empty")
    ctx.c((pod.get("nodeSelector") or {}) == v["nodeSelector"], "nodeSelector not applied")
    ctx.c((pod.get("tolerations") or []) == v["tolerations"], "tolerations not applied")
    ctx.c(c.get("imagePullPolicy") == v["image"]["pullPolicy"], "imagePullPolicy not applied")
    tag = v["image"]["tag"] or "0.1.0"
    ctx.c(c.get("image") == f"{v['image']['repository']}:{tag}", f"image {c.get('image')!r} unexpected")
    ctx.c(pod.get("serviceAccountName") == ctx.fullname, "serviceAccountName must be the chart's ServiceAccount")

    # PodDisruptionBudget
    pdb = ctx.get("PodDisruptionBudget", ctx.fullname)
    if pdb:
        ctx.c(pdb["spec"].get("minAvailable") == v["podDisruptionBudget"]["minAvailable"], "PDB minAvailable")
        ctx.c(pdb["spec"].get("selector", {}).get("matchLabels") == sel, "PDB selector must equal the Deployment selector")

    # Service
    svc = ctx.get("Service", ctx.fullname)
    if svc:
        sports = {p["name"]: p for p in svc["spec"]["ports"]}
        ctx.c(sports.get("https", {}).get("port") == v["service"]["port"],
              f"Service https port must be service.port ({v['service']['port']})")
        ctx.c(sports.get("https", {}).get("targetPort") in ("https", v["webhook"]["port"]), "Service https must target the webhook port")
        ctx.c(sports.get("metrics", {}).get("port") == v["metrics"]["port"] and
              sports.get("metrics", {}).get("targetPort") in ("metrics", v["metrics"]["port"]),
              "Service needs a port named metrics targeting the admin port")
        ctx.c(svc["spec"].get("selector") == sel, "Service selector must equal the Deployment selector")


# --------------------------------------------------------------------------------------------
# MutatingWebhookConfiguration

def check_webhooks(ctx: Ctx, ca_bundle: str | None) -> None:
    v = ctx.values
    mwc = ctx.get("MutatingWebhookConfiguration", ctx.fullname)
    if not mwc:
        return
    hooks = mwc.get("webhooks") or []
    if not ctx.c(len(hooks) == 2, f"expected exactly 2 webhooks, got {len(hooks)}"):
        return
    names = [h["name"] for h in hooks]
    ctx.c(len(set(names)) == 2, "webhook names must be unique")
    for n in names:
        ctx.c(n.count(".") >= 2 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", n) is not None,
              f"webhook name {n!r} must be a fully qualified DNS name")
    excluded_want = {ctx.ns, "kube-system", "kube-node-lease"} | set(v["webhook"]["excludeNamespaces"])
    ann = (mwc["metadata"].get("annotations") or {})
    rl, nl = v["config"]["restoreLabel"], v["config"]["restoreNamespaceLabel"]
    for h in hooks:
        w = f"webhook {h['name']}"
        ctx.c(h.get("admissionReviewVersions") == ["v1"], f"{w}: admissionReviewVersions must be [v1]")
        ctx.c(h.get("sideEffects") == "None", f"{w}: sideEffects must be None")
        ctx.c(h.get("reinvocationPolicy") == v["webhook"]["reinvocationPolicy"], f"{w}: reinvocationPolicy")
        ctx.c(h.get("timeoutSeconds") == v["webhook"]["timeoutSeconds"], f"{w}: timeoutSeconds")
        ctx.c(h.get("failurePolicy") == v["webhook"]["failurePolicy"], f"{w}: failurePolicy")
        ctx.c(h.get("matchPolicy") == "Equivalent", f"{w}: matchPolicy must be Equivalent")
        cc = h.get("clientConfig") or {}
        ctx.c("url" not in cc, f"{w}: clientConfig.url must not be used")
        ctx.c(cc.get("service") == {"name": ctx.fullname, "namespace": ctx.ns, "path": "/mutate",
                                     "port": v["service"]["port"]}, f"{w}: clientConfig.service is {cc.get('service')}")
        ctx.c(h.get("rules") == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                  "resources": ["pods"], "scope": "Namespaced"}],
              f"{w}: rules must be exactly CREATE on core v1 pods (Namespaced), got {h.get('rules')}")
        nsexp = (h.get("namespaceSelector") or {}).get("matchExpressions") or []
        ctx.c(not (h.get("namespaceSelector") or {}).get("matchLabels"), f"{w}: unexpected namespaceSelector.matchLabels")
        notin = [e for e in nsexp if e.get("key") == "kubernetes.io/metadata.name" and e.get("operator") == "NotIn"]
        ctx.c(len(notin) == 1 and set(notin[0].get("values") or []) == excluded_want,
              f"{w}: namespaceSelector must exclude exactly {sorted(excluded_want)}, got {notin}")
        objexp = (h.get("objectSelector") or {}).get("matchExpressions") or []
        if v["webhook"]["matchConditions"]:
            ctx.c(h.get("matchConditions") == v["webhook"]["matchConditions"], f"{w}: matchConditions not applied")
        else:
            ctx.c("matchConditions" not in h, f"{w}: matchConditions set although empty")
        if ca_bundle is None:
            ctx.c("caBundle" not in cc, f"{w}: caBundle must be left to cert-manager's cainjector")
        else:
            ctx.c(cc.get("caBundle") == ca_bundle, f"{w}: caBundle must be tls.caBundle")
            try:
                pem = base64.b64decode(cc.get("caBundle") or "", validate=True).decode()
                ctx.c("-----BEGIN CERTIFICATE-----" in pem, f"{w}: caBundle must decode to a PEM certificate")
            except Exception as e:  # noqa: BLE001
                ctx.c(False, f"{w}: caBundle is not base64 PEM: {e}")
        h["_nsexp"], h["_objexp"] = nsexp, objexp
    by_label, by_ns = hooks
    ctx.c({"key": rl, "operator": "Exists"} in by_label["_objexp"],
          f"first webhook must select pods with objectSelector {rl} Exists")
    ctx.c(not any(e.get("key") == nl for e in by_label["_nsexp"]),
          "first webhook must not require the restore-namespace label")
    ctx.c({"key": nl, "operator": "Exists"} in by_ns["_nsexp"],
          f"second webhook must select namespaces with namespaceSelector {nl} Exists")
    ctx.c({"key": rl, "operator": "DoesNotExist"} in by_ns["_objexp"],
          f"second webhook must leave pods with {rl} to the first one (objectSelector DoesNotExist)")
    if v["certManager"]["enabled"]:
        want = f"{ctx.ns}/{ctx.fullname}-serving"
        ctx.c(ann.get("cert-manager.io/inject-ca-from") == want,
              f"MWC needs annotation cert-manager.io/inject-ca-from: {want}")
    else:
        ctx.c("cert-manager.io/inject-ca-from" not in ann, "inject-ca-from set although cert-manager is off")
    for h in hooks:
        h.pop("_nsexp", None)
        h.pop("_objexp", None)


# --------------------------------------------------------------------------------------------
# RBAC

EXPECTED_CLUSTER_RULES = {
    ("", "pods"): {"get", "list", "watch", "patch"},
    ("", "pods/exec"): {"get", "create"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("", "namespaces"): {"get", "list", "watch"},
    ("restore-hooks.dev", "restorehooks"): {"get", "list", "watch"},
    ("restore-hooks.dev", "restorehooks/status"): {"get", "patch", "update"},
    ("velero.io", "restores"): {"get", "list", "watch"},
}


def rule_triples(rules: list[dict]) -> dict:
    out: dict = {}
    for r in rules:
        for g in r.get("apiGroups") or []:
            for res in r.get("resources") or []:
                key = (g, res, tuple(r.get("resourceNames") or []))
                out.setdefault(key, set()).update(r.get("verbs") or [])
    return out


def check_rbac(ctx: Ctx) -> None:
    cr = ctx.get("ClusterRole", ctx.fullname)
    if cr:
        rules = cr.get("rules") or []
        for r in rules:
            for f in ("apiGroups", "resources", "verbs"):
                ctx.c("*" not in (r.get(f) or []), f"ClusterRole rule uses a wildcard in {f}: {r}")
            ctx.c(not r.get("nonResourceURLs"), "ClusterRole must not grant nonResourceURLs")
            ctx.c(not r.get("resourceNames"), "ClusterRole rules are not name-restricted")
        got = {(g, res): verbs for (g, res, _), verbs in rule_triples(rules).items()}
        ctx.c(got == EXPECTED_CLUSTER_RULES,
              "ClusterRole verbs must be exactly the least set:\n      want " +
              str(sorted((k, sorted(v)) for k, v in EXPECTED_CLUSTER_RULES.items())) + "\n      got  " +
              str(sorted((k, sorted(v)) for k, v in got.items())))
        ctx.c(cr.get("aggregationRule") is None, "ClusterRole must not aggregate")
    lease = ctx.values["config"]["leaseName"] or f"{ctx.fullname}-controller"
    role = ctx.get("Role", f"{ctx.fullname}-leader-election")
    if role:
        got = rule_triples(role.get("rules") or [])
        want = {("coordination.k8s.io", "leases", ()): {"create"},
                ("coordination.k8s.io", "leases", (lease,)): {"get", "update", "patch"}}
        ctx.c(got == want, f"Role must grant leases create, and get/update/patch on {lease} only; got {got}")
    sa = ctx.fullname
    for kind, name, rkind, rname in (("ClusterRoleBinding", ctx.fullname, "ClusterRole", ctx.fullname),
                                     ("RoleBinding", f"{ctx.fullname}-leader-election", "Role", f"{ctx.fullname}-leader-election")):
        b = ctx.get(kind, name)
        if b:
            ctx.c(b.get("roleRef") == {"apiGroup": "rbac.authorization.k8s.io", "kind": rkind, "name": rname},
                  f"{kind}/{name} roleRef")
            ctx.c(b.get("subjects") == [{"kind": "ServiceAccount", "name": sa, "namespace": ctx.ns}],
                  f"{kind}/{name} must bind only ServiceAccount {ctx.ns}/{sa}")
    sa_obj = ctx.get("ServiceAccount", sa)
    if sa_obj:
        ctx.c(sa_obj.get("automountServiceAccountToken") is False,
              "ServiceAccount should not automount by default (the pod opts in)")


# --------------------------------------------------------------------------------------------
# cert-manager

CERT_SPEC_FIELDS = {"subject", "literalSubject", "commonName", "duration", "renewBefore", "renewBeforePercentage",
                    "dnsNames", "ipAddresses", "uris", "otherNames", "emailAddresses", "secretName",
                    "secretTemplate", "keystores", "issuerRef", "isCA", "usages", "privateKey",
                    "signatureAlgorithm", "encodeUsagesInRequest", "revisionHistoryLimit", "additionalOutputFormats",
                    "nameConstraints"}
PRIVATE_KEY_FIELDS = {"rotationPolicy", "encoding", "algorithm", "size"}
ISSUER_KINDS = {"selfSigned", "ca", "acme", "vault", "venafi"}


def check_cert_manager(ctx: Ctx) -> None:
    v = ctx.values
    cm = v["certManager"]
    certs = ctx.of_kind("Certificate") + ctx.of_kind("Issuer")
    if not cm["enabled"]:
        ctx.c(not certs, "no cert-manager objects when certManager.enabled=false")
        return
    for cert in ctx.of_kind("Certificate"):
        spec = cert.get("spec") or {}
        unknown = set(spec) - CERT_SPEC_FIELDS
        ctx.c(not unknown, f"Certificate/{cert['metadata']['name']}: unknown spec fields {sorted(unknown)}")
        ctx.c(set(spec.get("privateKey") or {}) <= PRIVATE_KEY_FIELDS, f"Certificate/{cert['metadata']['name']}: unknown privateKey fields")
        ctx.c(bool(spec.get("secretName")) and bool((spec.get("issuerRef") or {}).get("name")),
              f"Certificate/{cert['metadata']['name']}: secretName and issuerRef.name are required")
    for iss in ctx.of_kind("Issuer"):
        ctx.c(len(set(iss.get("spec") or {}) & ISSUER_KINDS) == 1 and set(iss.get("spec") or {}) <= ISSUER_KINDS,
              f"Issuer/{iss['metadata']['name']}: spec must name exactly one issuer type")
    fn, ns = ctx.fullname, ctx.ns
    serving = ctx.get("Certificate", f"{fn}-serving")
    if serving:
        s = serving["spec"]
        ctx.c(s.get("dnsNames") == [fn, f"{fn}.{ns}", f"{fn}.{ns}.svc", f"{fn}.{ns}.svc.cluster.local"],
              f"serving Certificate dnsNames are {s.get('dnsNames')}")
        pk = s.get("privateKey") or {}
        ctx.c(pk.get("algorithm") == "ECDSA", "serving key algorithm must be ECDSA")
        ctx.c(pk.get("encoding") == "PKCS8", "serving key encoding must be PKCS8 (a PKCS1/SEC1 EC key may not load)")
        ctx.c(pk.get("rotationPolicy") == "Always", "serving key rotationPolicy must be Always")
        ctx.c(s.get("duration") == cm["duration"] and s.get("renewBefore") == cm["renewBefore"],
              "serving Certificate duration/renewBefore must come from values")
        ctx.c(s.get("secretName") == f"{fn}-tls", "serving Certificate must write the Secret the Deployment mounts")
        ctx.c(not s.get("isCA"), "serving Certificate must not be a CA")
        ctx.c("server auth" in (s.get("usages") or []), "serving Certificate needs usage 'server auth'")
        if cm["issuerRef"]["name"]:
            ctx.c(s.get("issuerRef") == cm["issuerRef"], "serving Certificate must use certManager.issuerRef")
            ctx.c(not ctx.of_kind("Issuer") and ("Certificate", f"{fn}-ca") not in ctx.objs,
                  "no built-in CA chain with a user-supplied issuer")
        else:
            ctx.c(s.get("issuerRef") == {"name": f"{fn}-ca", "kind": "Issuer", "group": "cert-manager.io"},
                  "serving Certificate must be issued by the CA Issuer")
            ss = ctx.get("Issuer", f"{fn}-selfsigned")
            ca = ctx.get("Certificate", f"{fn}-ca")
            cai = ctx.get("Issuer", f"{fn}-ca")
            if ss:
                ctx.c(ss["spec"] == {"selfSigned": {}}, "self-signed Issuer")
            if ca:
                cs = ca["spec"]
                ctx.c(cs.get("isCA") is True, "CA Certificate must have isCA: true")
                ctx.c(cs.get("duration") == cm["caDuration"], "CA duration must come from values")
                ctx.c(cs.get("issuerRef") == {"name": f"{fn}-selfsigned", "kind": "Issuer", "group": "cert-manager.io"},
                      "CA Certificate must be issued by the self-signed Issuer")
                ctx.c(bool(cs.get("commonName")) and bool(cs.get("subject")), "CA Certificate needs a non-empty subject")
                if cai:
                    ctx.c(cai["spec"] == {"ca": {"secretName": cs.get("secretName")}},
                          "CA Issuer must use the CA Certificate's Secret")


# --------------------------------------------------------------------------------------------
# Optional monitoring and NetworkPolicy

ALERTS = {"RestoreHooksWebhookDown", "RestoreHooksNoLeader", "RestoreHooksAdmissionErrors",
          "RestoreHooksAdmissionDenied", "RestoreHooksExecHookFailures", "RestoreHooksTLSReloadFailures",
          "RestoreHooksAdmissionSlow", "RestoreHooksWebhookFailOpen"}
METRICS = ["restore_hooks_admission_requests_total", "restore_hooks_exec_hooks_total",
           "restore_hooks_tls_reloads_total", "restore_hooks_leader", "restore_hooks_admission_duration_seconds"]


def check_optional(ctx: Ctx) -> None:
    v = ctx.values
    dep = ctx.objs.get(("Deployment", ctx.fullname)) or {}
    sel = dep.get("spec", {}).get("selector", {}).get("matchLabels")
    sm = ctx.objs.get(("ServiceMonitor", ctx.fullname))
    if sm:
        s = sm["spec"]
        svc = ctx.objs.get(("Service", ctx.fullname), {})
        svc_labels = svc.get("metadata", {}).get("labels", {})
        ctx.c(all(svc_labels.get(k) == x for k, x in s["selector"]["matchLabels"].items()),
              "ServiceMonitor selector must match the Service's labels")
        ctx.c(s.get("namespaceSelector") == {"matchNames": [ctx.ns]}, "ServiceMonitor namespaceSelector")
        eps = s.get("endpoints") or []
        ctx.c(len(eps) == 1 and eps[0].get("port") == "metrics" and eps[0].get("path") == "/metrics",
              "ServiceMonitor must scrape port 'metrics' at /metrics")
        for k, x in v["metrics"]["serviceMonitor"]["labels"].items():
            ctx.c(sm["metadata"]["labels"].get(k) == x, f"ServiceMonitor label {k}")
    pr = ctx.objs.get(("PrometheusRule", ctx.fullname))
    if pr:
        rules = [r for g in pr["spec"]["groups"] for r in g["rules"]]
        names = {r.get("alert") for r in rules}
        ctx.c(names == ALERTS, f"PrometheusRule alerts {sorted(names)} != {sorted(ALERTS)}")
        exprs = " ".join(str(r.get("expr")) for r in rules)
        for m in METRICS:
            ctx.c(m in exprs, f"no alert uses metric {m}")
        for r in rules:
            w = f"alert {r.get('alert')}"
            e = str(r.get("expr", ""))
            ctx.c(e.count("(") == e.count(")") and e.count("{") == e.count("}") and e.count("[") == e.count("]"),
                  f"{w}: unbalanced brackets in expr {e!r}")
            ctx.c(bool((r.get("labels") or {}).get("severity")), f"{w}: needs a severity label")
            ctx.c(bool((r.get("annotations") or {}).get("summary")), f"{w}: needs a summary")
            ctx.c(set(r) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, f"{w}: unknown fields")
    np = ctx.objs.get(("NetworkPolicy", ctx.fullname))
    if np:
        s = np["spec"]
        ctx.c(s["podSelector"].get("matchLabels") == sel, "NetworkPolicy must select the Deployment's pods")
        ctx.c(sorted(s.get("policyTypes") or []) == ["Egress", "Ingress"], "NetworkPolicy must restrict ingress and egress")
        ing = s.get("ingress") or []
        wh = [r for r in ing if {"port": v["webhook"]["port"], "protocol": "TCP"} in (r.get("ports") or [])]
        ctx.c(len(wh) == 1, "NetworkPolicy needs one ingress rule for the webhook port")
        if wh:
            cidrs = v["networkPolicy"]["webhookIngress"]["cidrs"]
            got = [f["ipBlock"]["cidr"] for f in wh[0].get("from") or []]
            ctx.c(got == cidrs, f"webhook ingress must come from {cidrs or 'anywhere'}, got {got}")
        mt = [r for r in ing if {"port": v["metrics"]["port"], "protocol": "TCP"} in (r.get("ports") or [])]
        ctx.c(len(mt) == 1 and (mt[0].get("from") or [{}])[0].get("namespaceSelector") ==
              v["networkPolicy"]["metricsIngress"]["namespaceSelector"],
              "metrics ingress must be limited to the monitoring namespace selector")
        eg = s.get("egress") or []
        ports = [p for r in eg for p in r.get("ports") or []]
        for p in v["networkPolicy"]["apiServer"]["ports"]:
            ctx.c({"port": p, "protocol": "TCP"} in ports, f"egress to the API server port {p}")
        ctx.c({"port": 53, "protocol": "UDP"} in ports and {"port": 53, "protocol": "TCP"} in ports, "egress to DNS 53/UDP+TCP")


# --------------------------------------------------------------------------------------------

def values_for(chart: Path, *files: Path, overrides: dict | None = None) -> dict:
    def merge(a: dict, b: dict) -> dict:
        out = dict(a)
        for k, x in b.items():
            out[k] = merge(out[k], x) if isinstance(x, dict) and isinstance(out.get(k), dict) else x
        return out
    v = yaml.safe_load((chart / "values.yaml").read_text())
    for f in files:
        v = merge(v, yaml.safe_load(f.read_text()) or {})
    return merge(v, overrides or {})


def serve_flags(binary: str) -> set[str]:
    out = subprocess.run([binary, "serve", "--help"], check=True, capture_output=True, text=True).stdout
    return set(re.findall(r"--([a-z][a-z0-9-]+)", out)) - {"help"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rendered", required=True, type=Path)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--chart", type=Path, default=Path(__file__).resolve().parent.parent / "charts" / "restore-hooks")
    ap.add_argument("--release", default="restore-hooks")
    ap.add_argument("--namespace", default="restore-hooks")
    a = ap.parse_args()

    if not (os.path.isfile(a.binary) and os.access(a.binary, os.X_OK)):
        print(f"chart_assertions: binary {a.binary} not found or not executable (cargo build)", file=sys.stderr)
        return 2
    flags = serve_flags(a.binary)
    check({"listen", "tls-dir", "admin-listen", "lease-namespace", "identity"} <= flags,
          f"`{a.binary} serve --help` does not list the expected flags (got {sorted(flags)})")

    # The CRD: chart copy == binary output, byte for byte.
    crd_out = subprocess.run([a.binary, "crd"], check=True, capture_output=True).stdout
    chart_crd = (a.chart / "crds" / "restorehooks.yaml").read_bytes()
    check(chart_crd == crd_out, "charts/restore-hooks/crds/restorehooks.yaml differs from `restore-hooks crd`; "
          "regenerate: cargo run -q -- crd > charts/restore-hooks/crds/restorehooks.yaml")
    crd = yaml.safe_load(crd_out)
    check(crd.get("metadata", {}).get("name") == "restorehooks.restore-hooks.dev" and crd["spec"]["scope"] == "Namespaced",
          "CRD must be restorehooks.restore-hooks.dev, Namespaced")
    vers = crd["spec"]["versions"]
    check([x["name"] for x in vers] == ["v1alpha1"] and vers[0].get("subresources", {}).get("status") == {},
          "CRD must serve v1alpha1 with the status subresource")

    rd = a.rendered
    ca_bundle = (rd / "no-cert-manager.cabundle").read_text().strip()
    variants = [
        ("default", values_for(a.chart), dict(cert_manager=True, builtin_ca=True, optional=False), None),
        ("all-on", values_for(a.chart, a.chart / "ci" / "all-on-values.yaml"),
         dict(cert_manager=True, builtin_ca=True, optional=True), None),
        ("byo-issuer", values_for(a.chart, a.chart / "ci" / "byo-issuer-values.yaml"),
         dict(cert_manager=True, builtin_ca=False, optional=False), None),
        ("no-cert-manager", values_for(a.chart, overrides={"certManager": {"enabled": False},
                                                            "tls": {"existingSecret": "restore-hooks-tls-manual", "caBundle": ca_bundle}}),
         dict(cert_manager=False, builtin_ca=False, optional=False), ca_bundle),
    ]
    for name, values, inv, ca in variants:
        before = len(FAILURES)
        ctx = Ctx(name, load(rd / f"{name}.yaml"), a.release, a.namespace, values)
        check_inventory(ctx, expected_objects(ctx.fullname, **inv))
        rendered_crd = ctx.objs.get(("CustomResourceDefinition", "restorehooks.restore-hooks.dev"))
        ctx.c(rendered_crd == crd, "rendered CRD (--include-crds) differs from `restore-hooks crd`")
        check_deployment(ctx, flags, a.binary)
        check_webhooks(ctx, ca)
        check_rbac(ctx)
        check_cert_manager(ctx)
        check_optional(ctx)
        status = "ok" if len(FAILURES) == before else f"{len(FAILURES) - before} failure(s)"
        print(f"  assertions [{name}]: {len(ctx.docs)} objects, {status}")

    if FAILURES:
        print(f"\nchart assertions FAILED ({len(FAILURES)} of {len(FAILURES) + PASSED}):", file=sys.stderr)
        for f in FAILURES:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print(f"  chart assertions: all {PASSED} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
