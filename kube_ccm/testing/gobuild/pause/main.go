// Command pause is the process of the test bed's pod sandboxes (the pause image
// of kube_ccm.testing.nodes), doing what registry.k8s.io/pause's C program
// does: wait for SIGINT or SIGTERM, then exit 0, and meanwhile reap the
// zombies of the pod's processes. Built with CGO_ENABLED=0, it is one static
// file, so the image needs nothing else and no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
