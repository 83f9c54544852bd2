//go:build tools

// Package tools pins Prometheus and promtool (one module, github.com/prometheus/prometheus; its
// v0.3XY.Z tags are Prometheus v3.XY.Z) that e2e/realcp/build.sh builds: promtool runs the
// chart's alert unit tests (.ci/promtool-tests.sh), prometheus scrapes the product in
// tests/real_metrics.rs. Its own module: Prometheus' client libraries (k8s.io/* for its
// Kubernetes service discovery, the cloud SDKs) must not be raised by the control plane's
// pins, nor raise them. It is never compiled: the blank imports only make `go mod tidy` keep
// every module they need.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
