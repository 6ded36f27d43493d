//go:build tools

// Package tools records the main packages built from this module, so that
// `go mod tidy` keeps everything they need in go.sum: kube-apiserver (with
// etcd, ./etcd) for the control plane, kubelet, kube-controller-manager and
// kube-scheduler for the test bed's real nodes (kube_ccm.testing.nodes), and
// kube-proxy for a test bed that asks for it.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
