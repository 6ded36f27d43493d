//go:build tools

// Package tools records helm's main package as a dependency so that
// `go mod tidy` keeps everything it needs in go.sum.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
