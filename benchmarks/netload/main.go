// netload: the load generator and backend of benchmarks/servicelb_forwarder.py.
//
// Python cannot drive a forwarder hard enough on two shared cores, so the
// client and the backend are this small Go program (standard library only).
//
//	netload server -echo ADDR -sink ADDR -udp ADDR   TCP echo, TCP discard, UDP echo
//	netload cps  -addr ADDR -conc N -duration D      connect, 1-byte request/response, close
//	netload tput -addr ADDR -duration D              one connection writing 64 KiB chunks
//	netload rr   -addr ADDR -n N -size B             one connection, N sequential round trips
//	netload udp  -addr ADDR -conc N -duration D      N sockets, datagram ping-pong
//
// Each client prints one JSON object on stdout.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: netload server|cps|tput|rr|udp [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "", "address to connect to")
	echo := fs.String("echo", "", "server: TCP echo address")
	sink := fs.String("sink", "", "server: TCP discard address")
	udp := fs.String("udp", "", "server: UDP echo address")
	conc := fs.Int("conc", 4, "concurrent clients")
	duration := fs.Duration("duration", 5*time.Second, "how long to run")
	n := fs.Int("n", 2000, "rr: round trips")
	size := fs.Int("size", 64, "rr/udp: message size")
	_ = fs.Parse(os.Args[2:])
	var result map[string]any
	switch os.Args[1] {
	case "server":
		server(*echo, *sink, *udp)
		return
	case "cps":
		result = cps(*addr, *conc, *duration)
	case "tput":
		result = tput(*addr, *duration)
	case "rr":
		result = rr(*addr, *n, *size)
	case "udp":
		result = udpPing(*addr, *conc, *duration, *size)
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
	_ = json.NewEncoder(os.Stdout).Encode(result)
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func server(echoAddr, sinkAddr, udpAddr string) {
	serve := func(addr string, handle func(net.Conn)) {
		ln, err := net.Listen("tcp", addr)
		must(err)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					continue
				}
				go handle(c)
			}
		}()
	}
	serve(echoAddr, func(c net.Conn) { _, _ = io.Copy(c, c); c.Close() })
	serve(sinkAddr, func(c net.Conn) { _, _ = io.Copy(io.Discard, c); c.Close() })
	pc, err := net.ListenPacket("udp", udpAddr)
	must(err)
	go func() {
		buf := make([]byte, 65536)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err == nil {
				_, _ = pc.WriteTo(buf[:k], from)
			}
		}
	}()
	fmt.Println("ready")
	select {}
}

func cps(addr string, conc int, d time.Duration) map[string]any {
	var ok, failed atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			for time.Now().Before(deadline) {
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					failed.Add(1)
					continue
				}
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err = c.Write([]byte{'x'}); err == nil {
					_, err = io.ReadFull(c, buf)
				}
				c.Close()
				if err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return map[string]any{"per_s": float64(ok.Load()) / d.Seconds(), "failed": failed.Load()}
}

func tput(addr string, d time.Duration) map[string]any {
	c, err := net.Dial("tcp", addr)
	must(err)
	chunk := make([]byte, 64*1024)
	var sent int64
	start := time.Now()
	deadline := start.Add(d)
	for time.Now().Before(deadline) {
		k, err := c.Write(chunk)
		must(err)
		sent += int64(k)
	}
	c.(*net.TCPConn).CloseWrite()
	_, _ = io.Copy(io.Discard, c) // the sink closes after reading everything
	elapsed := time.Since(start).Seconds()
	return map[string]any{"mb_per_s": float64(sent) / elapsed / 1e6}
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func rr(addr string, n, size int) map[string]any {
	c, err := net.Dial("tcp", addr)
	must(err)
	defer c.Close()
	msg := make([]byte, size)
	buf := make([]byte, size)
	rtts := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		t := time.Now()
		_, err := c.Write(msg)
		must(err)
		_, err = io.ReadFull(c, buf)
		must(err)
		rtts = append(rtts, float64(time.Since(t).Microseconds()))
	}
	sort.Float64s(rtts)
	return map[string]any{"p50_us": percentile(rtts, 0.5), "p99_us": percentile(rtts, 0.99)}
}

func udpPing(addr string, conc int, d time.Duration, size int) map[string]any {
	var ok, lost atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("udp", addr)
			must(err)
			defer c.Close()
			msg := make([]byte, size)
			buf := make([]byte, 65536)
			for time.Now().Before(deadline) {
				_, _ = c.Write(msg)
				_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if _, err := c.Read(buf); err != nil {
					lost.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return map[string]any{"per_s": float64(ok.Load()) / d.Seconds(), "lost": lost.Load()}
}
