//go:build tools

// Package tools records the main packages built from this module, so that
// `go mod tidy` keeps everything they need in go.sum: agnhost (the one image the
// Service and LoadBalancer specs run) and kubectl (which the specs' helpers run
// for `kubectl exec`).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
