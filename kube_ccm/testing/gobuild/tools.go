//go:build tools

// Package tools records the kube-apiserver main package as a dependency so
// that `go mod tidy` keeps everything it needs in go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
