//go:build tools

// Package tools records CoreDNS's main package as a dependency so that
// `go mod tidy` keeps everything it needs in go.sum.
package tools

import (
	_ "github.com/coredns/coredns"
)
