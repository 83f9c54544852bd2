//go:build tools

// Package tools pins Velero (server and CLI are one binary) that e2e/realcp/build.sh builds.
// It is never compiled: the blank import only makes `go mod tidy` keep every module it needs.
package tools

import _ "github.com/vmware-tanzu/velero/cmd/velero"
