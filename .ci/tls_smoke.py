#!/usr/bin/env python3
"""The certificates of certs/make-certs.sh, served by the real binary.

Usage: tls_smoke.py BINARY CERT_DIR SERVICE NAMESPACE

Starts `restore-hooks webhook --no-cluster --tls-dir CERT_DIR` on loopback, waits for /readyz,
then, like the API server would: connects over TLS to <SERVICE>.<NAMESPACE>.svc, verifying the
chain against CERT_DIR/ca.crt (the caBundle) and the host name against the certificate's SANs, and
POSTs an AdmissionReview for a restored pod to /mutate. Checks the response uid, allowed and the
JSON patch. Proves make-certs.sh output (ECDSA P-256, PKCS#8 key, chain in tls.crt) loads and
verifies end to end.
"""

import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    binary, cert_dir, svc, ns = sys.argv[1:5]
    host = f"{svc}.{ns}.svc"
    port, admin = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = "/nonexistent"
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [binary, "webhook", "--no-cluster", f"--tls-dir={cert_dir}", f"--listen=127.0.0.1:{port}",
         f"--admin-listen=127.0.0.1:{admin}", "--log-format=text", "--shutdown-delay=0s", "--shutdown-grace=1s"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.time() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"webhook exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("/readyz not 200 within 20s")
            time.sleep(0.2)

        ctx = ssl.create_default_context(cafile=os.path.join(cert_dir, "ca.crt"))
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
        # Verify against the service DNS name, as the API server does.
        conn._create_connection = lambda addr, *a, **k: socket.create_connection(("127.0.0.1", port), *a, **k)
        conn.host = host
        uid = "9f0b6b0e-0000-4000-8000-000000000001"
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "db", "namespace": "shop", "labels": {"velero.io/restore-name": "r1"},
                            "annotations": {"init.hook.restore.velero.io/container-image": "busybox:1.36.1"}},
               "spec": {"containers": [{"name": "db", "image": "busybox:1.36.1"}]}}
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                              "resource": {"group": "", "version": "v1", "resource": "pods"},
                              "namespace": "shop", "operation": "CREATE", "userInfo": {"username": "t"},
                              "object": pod, "dryRun": False}}
        conn.request("POST", "/mutate?timeout=5s", body=json.dumps(review),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        peer = conn.sock.getpeercert()
        sans = sorted(v for k, v in peer.get("subjectAltName", ()) if k == "DNS")
        r = body.get("response") or {}
        problems = []
        if resp.status != 200:
            problems.append(f"HTTP {resp.status}")
        if body.get("apiVersion") != "admission.k8s.io/v1" or body.get("kind") != "AdmissionReview":
            problems.append("response is not an admission.k8s.io/v1 AdmissionReview")
        if r.get("uid") != uid:
            problems.append(f"uid {r.get('uid')!r} != {uid!r}")
        if r.get("allowed") is not True:
            problems.append(f"not allowed: {r.get('status')}")
        print(f"  TLS ok: {host} verified against ca.crt (SANs {sans}, {conn.sock.version()}); "
              f"/mutate -> HTTP {resp.status}, allowed={r.get('allowed')}, patchType={r.get('patchType')}")
        # With --velero-hooks defer the pod label leaves annotation hooks to Velero: no patch is fine.
        if r.get("patch"):
            ops = json.loads(base64.b64decode(r["patch"]))
            if not isinstance(ops, list):
                problems.append("patch is not a JSON Patch array")
        for p in problems:
            print(f"  FAIL  {p}", file=sys.stderr)
        return 1 if problems else 0
    except Exception as e:  # noqa: BLE001
        log.seek(0)
        print(f"  FAIL  {e}\n{log.read().decode(errors='replace')[-3000:]}", file=sys.stderr)
        return 1
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
