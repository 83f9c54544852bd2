//! A restored PostgreSQL StatefulSet pod and the hooks that apply to it: the workload of the
//! load harness, of the criterion bench (the same request's pure cost, measured on its own) and
//! of the webhook fault tests.

/// What the webhook serves from `--hooks`: an init container and two exec hooks for the
/// database, one exec hook for its metrics sidecar (the shape of `examples/hooks.yaml`).
pub const HOOKS: &str = r#"apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata:
  name: postgres-rehydrate
  namespace: shop
spec:
  restores: ["nightly-*"]
  labelSelector:
    matchLabels: {app: postgres}
  postHooks:
  - init:
      initContainers:
      - name: fetch-wal
        image: busybox:1.36
        command: ["/bin/sh", "-c", "echo fetching WAL segments"]
        volumeMounts:
        - {name: data, mountPath: /var/lib/postgresql/data}
  - exec:
      container: db
      command: ["/bin/sh", "-c", "until pg_isready; do sleep 1; done"]
      onError: Fail
      execTimeout: 2m
      waitTimeout: 10m
  - exec:
      container: db
      command: ["/bin/sh", "-c", "psql -c 'ANALYZE'"]
      execTimeout: 5m
---
apiVersion: restore-hooks.dev/v1alpha1
kind: RestoreHook
metadata:
  name: zz-cache-warmup
  namespace: shop
spec:
  labelSelector:
    matchExpressions:
    - {key: app, operator: In, values: [postgres, mysql]}
  postHooks:
  - exec:
      container: metrics
      command: ["/bin/sh", "-c", "wget -qO- localhost:9187/metrics >/dev/null"]
      waitForReady: true
"#;

/// A restored StatefulSet pod as the API server sends it to a mutating webhook: defaulted
/// fields, owner reference, Velero's restore label, two containers with probes and resources.
pub fn restored_pod() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "postgres-0",
            "generateName": "postgres-",
            "namespace": "shop",
            "labels": {
                "app": "postgres",
                "apps.kubernetes.io/pod-index": "0",
                "controller-revision-hash": "postgres-6d4b9c7f58",
                "statefulset.kubernetes.io/pod-name": "postgres-0",
                "velero.io/backup-name": "nightly",
                "velero.io/restore-name": "nightly-2026-12-02"
            },
            "annotations": {"kubectl.kubernetes.io/default-container": "db"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "postgres",
                "uid": "0b1c7a3e-7f0e-4c55-9f5a-3d0c2f9e8a11",
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "containers": [
                {
                    "name": "db",
                    "image": "postgres:17",
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 5432, "name": "pg", "protocol": "TCP"}],
                    "env": [
                        {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"},
                        {"name": "POSTGRES_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "password"}}}
                    ],
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                    "readinessProbe": {"exec": {"command": ["pg_isready"]}, "periodSeconds": 5,
                                       "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/var/lib/postgresql/data"},
                        {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"
                },
                {
                    "name": "metrics",
                    "image": "prometheuscommunity/postgres-exporter:v0.16.0",
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 9187, "name": "metrics", "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                    "volumeMounts": [
                        {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-postgres-0"}},
                {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]}}
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "hostname": "postgres-0",
            "subdomain": "postgres",
            "schedulerName": "default-scheduler",
            "securityContext": {"fsGroup": 999},
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        }
    })
}
