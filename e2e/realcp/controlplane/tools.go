//go:build tools

// Package tools pins the Kubernetes control plane (and kubectl) and etcd that
// e2e/realcp/build.sh builds. It is never compiled: the blank imports only make `go mod tidy`
// keep every module those commands need. etcd shares the module: it raises kubernetes' own
// go.etcd.io/etcd client from v3.7.0 to v3.7.3 (same minor), and grpc, otel and golang.org/x/*
// by a minor, which the shared compile (etcd takes seconds after the apiserver) is worth.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
