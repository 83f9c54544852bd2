//go:build tools

// Package tools pins kwok, the fake kubelet that e2e/realcp/build.sh builds. It is its own
// module, not part of ../controlplane: there k8s.io/kubernetes' staging replaces would force
// kwok's client libraries (k8s.io/* v0.36.1) onto v0.37.2, a minor kwok v0.8.0 was not
// released against (it compiles that way, but is no longer the kwok its release tested), and
// kwok would raise some of kubectl's dependencies in turn.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
