//go:build tools

// Package tools pins the kube-apiserver of the oldest Kubernetes minor restore-hooks supports
// (charts/restore-hooks/Chart.yaml kubeVersion; why that minor: docs/install.md "Kubernetes
// versions"), which e2e/realcp/build.sh builds as bin/kube-apiserver-floor. It is never compiled:
// the blank import only makes `go mod tidy` keep every module kube-apiserver needs. Only the API
// server: the floor tests run the v1.37 controller-manager and scheduler of controlplane/ with
// --emulated-version set to this minor, and etcd, kubectl and kwok from there too.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
