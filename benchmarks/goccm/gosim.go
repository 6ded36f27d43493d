package main

// gosim: an in-memory cloud for the upstream CCM, the Go twin of kube-ccm's
// simulated cloud as the benchmarks use it (unknownNodes: create, an IP pool).
//
//   - One mutex guards all state. The configured latency is slept once per
//     contract method, outside the lock, and every method call is counted once
//     (gosim_cloud_calls_total{method} on /metrics, and a log line at exit).
//   - InstancesV2: every node name exists. On first sight a node gets an
//     instance: a zone picked by a hash of its name, the region, the instance
//     type, an InternalIP from 10.128.0.0/9 (sequential, as kube-ccm's simulated
//     cloud allocates them) and a Hostname address; providerID
//     gosim://<zone>/<name>.
//   - LoadBalancer: per LB name, an ingress IP from the pool, the number of
//     backend nodes and an order-independent hash of their names (no name
//     lists: they would dominate RSS at thousands of LBs × nodes);
//     gosim_load_balancers and gosim_load_balancer_backends (summed) on /metrics.
//   - Routes: an in-memory map.
//   - A restart over a cluster gosim already served (the benchmarks' start-up
//     runs) finds its state in the cluster, as kube-ccm's simulated cloud finds
//     it in its database: a node first seen with a gosim providerID and an
//     InternalIP keeps that zone and address, and a load balancer first ensured
//     for a Service whose status has an ingress IP of the pool keeps that IP. So
//     neither the addresses nor the ingress are rewritten after a restart. A node
//     with another cloud's providerID keeps its InternalIP too (the scale
//     benchmark seeds one cluster, with kube-ccm's providerIDs, for both CCMs).

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

const providerName = "gosim"

// Configuration: flags whose defaults come from the environment.
var (
	flagLatency      time.Duration
	flagZones        []string
	flagRegion       string
	flagInstanceType string
	flagIPPool       string
)

func envOr(name, fallback string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return fallback
}

func addGosimFlags(fs *pflag.FlagSet) {
	latency, err := time.ParseDuration(envOr("GOSIM_LATENCY", "0s"))
	if err != nil {
		klog.Fatalf("GOSIM_LATENCY: %v", err)
	}
	fs.DurationVar(&flagLatency, "gosim-latency", latency,
		"latency of every gosim cloud call, slept once per method outside the state lock (default: $GOSIM_LATENCY)")
	fs.StringSliceVar(&flagZones, "gosim-zones",
		strings.Split(envOr("GOSIM_ZONES", "sim-zone-a,sim-zone-b,sim-zone-c"), ","),
		"zones instances are spread over by a hash of the node name (default: $GOSIM_ZONES)")
	fs.StringVar(&flagRegion, "gosim-region", envOr("GOSIM_REGION", "sim-region-1"),
		"region of every instance (default: $GOSIM_REGION)")
	fs.StringVar(&flagInstanceType, "gosim-instance-type", envOr("GOSIM_INSTANCE_TYPE", "sim.standard-2"),
		"instance type of every instance (default: $GOSIM_INSTANCE_TYPE)")
	fs.StringVar(&flagIPPool, "gosim-ip-pool", envOr("GOSIM_IP_POOL", "10.200.0.0/16"),
		"CIDR whose host addresses load balancers get as ingress IPs (default: $GOSIM_IP_POOL)")
}

var cloudCalls = metrics.NewCounterVec(
	&metrics.CounterOpts{
		Subsystem:      "gosim",
		Name:           "cloud_calls_total",
		Help:           "Calls to the gosim cloud, by contract method.",
		StabilityLevel: metrics.ALPHA,
	},
	[]string{"method"},
)

var (
	lbCount = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      "gosim",
		Name:           "load_balancers",
		Help:           "Load balancers in the gosim cloud.",
		StabilityLevel: metrics.ALPHA,
	})
	lbBackends = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      "gosim",
		Name:           "load_balancer_backends",
		Help:           "Backend nodes summed over the gosim cloud's load balancers.",
		StabilityLevel: metrics.ALPHA,
	})
)

// One gosim cloud per process (the factory may be called more than once).
var (
	theCloud     *cloud
	theCloudOnce sync.Once
	theCloudErr  error
)

func init() {
	legacyregistry.MustRegister(cloudCalls, lbCount, lbBackends)
	cloudprovider.RegisterCloudProvider(providerName, func(_ io.Reader) (cloudprovider.Interface, error) {
		theCloudOnce.Do(func() { theCloud, theCloudErr = newCloud() })
		return theCloud, theCloudErr
	})
}

func logCallCounts(why string) {
	if theCloud == nil {
		klog.InfoS("gosim: no cloud was created", "reason", why)
		return
	}
	theCloud.mu.Lock()
	methods := make([]string, 0, len(theCloud.calls))
	for m := range theCloud.calls {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	parts := make([]string, 0, len(methods))
	for _, m := range methods {
		parts = append(parts, fmt.Sprintf("%s=%d", m, theCloud.calls[m]))
	}
	theCloud.mu.Unlock()
	klog.InfoS("gosim cloud calls", "reason", why, "calls", strings.Join(parts, " "))
}

type instance struct {
	zone       string
	internalIP string
}

type loadBalancer struct {
	ip        netip.Addr
	nodeCount int
	nodeHash  uint64
}

type cloud struct {
	latency      time.Duration
	zones        []string
	region       string
	instanceType string

	mu        sync.Mutex
	calls     map[string]int64
	instances map[string]*instance // by node name
	lbs       map[string]*loadBalancer
	backends  int // nodeCount summed over lbs
	routes    map[string]cloudprovider.Route
	pool      netip.Prefix
	nextIP    netip.Addr   // the next never-used pool address
	freeIPs   []netip.Addr // released ones, reused first
	usedIPs   map[netip.Addr]bool
	internal  netip.Addr // the last InternalIP handed out
}

func newCloud() (*cloud, error) {
	pool, err := netip.ParsePrefix(flagIPPool)
	if err != nil {
		return nil, fmt.Errorf("--gosim-ip-pool: %w", err)
	}
	pool = pool.Masked()
	zones := make([]string, 0, len(flagZones))
	for _, z := range flagZones {
		if z = strings.TrimSpace(z); z != "" {
			zones = append(zones, z)
		}
	}
	if len(zones) == 0 {
		return nil, fmt.Errorf("--gosim-zones: name at least one zone")
	}
	c := &cloud{
		latency:      flagLatency,
		zones:        zones,
		region:       flagRegion,
		instanceType: flagInstanceType,
		calls:        map[string]int64{},
		instances:    map[string]*instance{},
		lbs:          map[string]*loadBalancer{},
		routes:       map[string]cloudprovider.Route{},
		usedIPs:      map[netip.Addr]bool{},
		pool:         pool,
		nextIP:       pool.Addr().Next(),
		internal:     netip.MustParseAddr("10.128.0.0"),
	}
	klog.InfoS("gosim cloud", "latency", c.latency, "zones", c.zones, "region", c.region,
		"instanceType", c.instanceType, "ipPool", c.pool)
	return c, nil
}

// call counts one call of method and sleeps the latency (outside the lock).
func (c *cloud) call(ctx context.Context, method string) error {
	cloudCalls.WithLabelValues(method).Inc()
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
	if c.latency <= 0 {
		return nil
	}
	timer := time.NewTimer(c.latency)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// instanceLocked finds or creates the instance behind a node. A new one adopts the
// zone and InternalIP the node already has from gosim (a restart), else gets the
// zone by a hash of the name and the next InternalIP. Caller holds c.mu.
func (c *cloud) instanceLocked(node *v1.Node) *instance {
	name := nodeName(node)
	if found, ok := c.instances[name]; ok {
		return found
	}
	if found := adopted(node, name); found != nil {
		if found.zone == "" {
			found.zone = c.zones[hashString(name)%uint64(len(c.zones))]
		}
		if ip, err := netip.ParseAddr(found.internalIP); err == nil && c.internal.Less(ip) {
			c.internal = ip
		}
		c.instances[name] = found
		return found
	}
	c.internal = c.internal.Next()
	found := &instance{
		zone:       c.zones[hashString(name)%uint64(len(c.zones))],
		internalIP: c.internal.String(),
	}
	c.instances[name] = found
	return found
}

// adopted is the instance a node initialised by an earlier gosim shows: the zone of
// its providerID (gosim://<zone>/<name>) and its InternalIP; nil if it has neither.
// A node another cloud initialised (any other providerID: the scale benchmark runs
// both CCMs over one cluster) keeps its InternalIP, with the zone left to the caller.
func adopted(node *v1.Node, name string) *instance {
	zone := ""
	if rest, ok := strings.CutPrefix(node.Spec.ProviderID, providerName+"://"); ok {
		found, instanceName, ok := strings.Cut(rest, "/")
		if !ok || found == "" || instanceName != name {
			return nil
		}
		zone = found
	} else if node.Spec.ProviderID == "" {
		return nil
	}
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			if _, err := netip.ParseAddr(a.Address); err == nil {
				return &instance{zone: zone, internalIP: a.Address}
			}
		}
	}
	return nil
}

// nodeName is the instance name behind a node: from a gosim providerID, else the node's name.
func nodeName(node *v1.Node) string {
	if rest, ok := strings.CutPrefix(node.Spec.ProviderID, providerName+"://"); ok {
		if i := strings.LastIndex(rest, "/"); i >= 0 && i+1 < len(rest) {
			return rest[i+1:]
		}
	}
	return node.Name
}

// -- cloudprovider.Interface ---------------------------------------------------------

func (c *cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

func (c *cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }
func (c *cloud) Instances() (cloudprovider.Instances, bool)       { return nil, false }
func (c *cloud) InstancesV2() (cloudprovider.InstancesV2, bool)   { return c, true }
func (c *cloud) Zones() (cloudprovider.Zones, bool)               { return nil, false }
func (c *cloud) Clusters() (cloudprovider.Clusters, bool)         { return nil, false }
func (c *cloud) Routes() (cloudprovider.Routes, bool)             { return c, true }
func (c *cloud) ProviderName() string                             { return providerName }
func (c *cloud) HasClusterID() bool                               { return true }

// -- InstancesV2 -----------------------------------------------------------------------

func (c *cloud) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	if err := c.call(ctx, "InstanceExists"); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.instanceLocked(node)
	return true, nil
}

func (c *cloud) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	if err := c.call(ctx, "InstanceShutdown"); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.instanceLocked(node)
	return false, nil
}

func (c *cloud) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	if err := c.call(ctx, "InstanceMetadata"); err != nil {
		return nil, err
	}
	name := nodeName(node)
	c.mu.Lock()
	found := c.instanceLocked(node)
	zone, ip := found.zone, found.internalIP
	c.mu.Unlock()
	return &cloudprovider.InstanceMetadata{
		ProviderID:   fmt.Sprintf("%s://%s/%s", providerName, zone, name),
		InstanceType: c.instanceType,
		NodeAddresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: ip},
			{Type: v1.NodeHostName, Address: name},
		},
		Zone:   zone,
		Region: c.region,
	}, nil
}

// -- LoadBalancer ----------------------------------------------------------------------

func (c *cloud) GetLoadBalancerName(_ context.Context, _ string, service *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(service)
}

func status(ip netip.Addr) *v1.LoadBalancerStatus {
	mode := v1.LoadBalancerIPModeVIP
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: ip.String(), IPMode: &mode}}}
}

func (c *cloud) GetLoadBalancer(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	if err := c.call(ctx, "GetLoadBalancer"); err != nil {
		return nil, false, err
	}
	name := c.GetLoadBalancerName(ctx, clusterName, service)
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.lbs[name]
	if !ok {
		return nil, false, nil
	}
	return status(lb.ip), true, nil
}

// backends: the number of nodes and an order-independent hash of their names.
func backends(nodes []*v1.Node) (int, uint64) {
	var sum uint64
	for _, n := range nodes {
		sum += hashString(n.Name)
	}
	return len(nodes), sum
}

// setBackendsLocked records an LB's backends and updates the gauges. Caller holds c.mu.
func (c *cloud) setBackendsLocked(lb *loadBalancer, count int, sum uint64) {
	c.backends += count - lb.nodeCount
	lb.nodeCount, lb.nodeHash = count, sum
	lbCount.Set(float64(len(c.lbs)))
	lbBackends.Set(float64(c.backends))
}

// allocateLocked hands out an ingress IP: the Service's current one if it is a free
// address of the pool (a restart), else a released one, else the next never-used
// one. Caller holds c.mu.
func (c *cloud) allocateLocked(service *v1.Service) (netip.Addr, error) {
	for _, ingress := range service.Status.LoadBalancer.Ingress {
		ip, err := netip.ParseAddr(ingress.IP)
		if err == nil && c.pool.Contains(ip) && !c.usedIPs[ip] {
			c.usedIPs[ip] = true
			return ip, nil
		}
	}
	for len(c.freeIPs) > 0 {
		n := len(c.freeIPs)
		ip := c.freeIPs[n-1]
		c.freeIPs = c.freeIPs[:n-1]
		if !c.usedIPs[ip] {
			c.usedIPs[ip] = true
			return ip, nil
		}
	}
	for {
		ip := c.nextIP
		// The pool's last address (its broadcast address for IPv4) is never handed out.
		if !c.pool.Contains(ip) || !c.pool.Contains(ip.Next()) {
			return netip.Addr{}, fmt.Errorf("the gosim IP pool %s is exhausted", c.pool)
		}
		c.nextIP = ip.Next()
		if !c.usedIPs[ip] {
			c.usedIPs[ip] = true
			return ip, nil
		}
	}
}

func (c *cloud) EnsureLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if err := c.call(ctx, "EnsureLoadBalancer"); err != nil {
		return nil, err
	}
	name := c.GetLoadBalancerName(ctx, clusterName, service)
	count, sum := backends(nodes)
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.lbs[name]
	if !ok {
		ip, err := c.allocateLocked(service)
		if err != nil {
			return nil, err
		}
		lb = &loadBalancer{ip: ip}
		c.lbs[name] = lb
	}
	c.setBackendsLocked(lb, count, sum)
	return status(lb.ip), nil
}

func (c *cloud) UpdateLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
	if err := c.call(ctx, "UpdateLoadBalancer"); err != nil {
		return err
	}
	name := c.GetLoadBalancerName(ctx, clusterName, service)
	count, sum := backends(nodes)
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.lbs[name]
	if !ok {
		return fmt.Errorf("load balancer %s does not exist", name)
	}
	c.setBackendsLocked(lb, count, sum)
	return nil
}

func (c *cloud) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *v1.Service) error {
	if err := c.call(ctx, "EnsureLoadBalancerDeleted"); err != nil {
		return err
	}
	name := c.GetLoadBalancerName(ctx, clusterName, service)
	c.mu.Lock()
	defer c.mu.Unlock()
	if lb, ok := c.lbs[name]; ok {
		c.freeIPs = append(c.freeIPs, lb.ip)
		delete(c.usedIPs, lb.ip)
		c.setBackendsLocked(lb, 0, 0)
		delete(c.lbs, name)
		lbCount.Set(float64(len(c.lbs)))
	}
	return nil
}

// -- Routes ----------------------------------------------------------------------------

func (c *cloud) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	if err := c.call(ctx, "ListRoutes"); err != nil {
		return nil, err
	}
	prefix := clusterName + "-"
	c.mu.Lock()
	defer c.mu.Unlock()
	routes := make([]*cloudprovider.Route, 0, len(c.routes))
	for name, r := range c.routes {
		if strings.HasPrefix(name, prefix) {
			r := r
			r.TargetNodeAddresses = append([]v1.NodeAddress(nil), r.TargetNodeAddresses...)
			routes = append(routes, &r)
		}
	}
	return routes, nil
}

func (c *cloud) CreateRoute(ctx context.Context, clusterName string, nameHint string, route *cloudprovider.Route) error {
	if err := c.call(ctx, "CreateRoute"); err != nil {
		return err
	}
	cidr := strings.NewReplacer("/", "-", ":", "-", ".", "-").Replace(route.DestinationCIDR)
	stored := *route
	stored.Name = fmt.Sprintf("%s-%s-%s", clusterName, nameHint, cidr)
	stored.TargetNodeAddresses = append([]v1.NodeAddress(nil), route.TargetNodeAddresses...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.routes[stored.Name] = stored
	return nil
}

func (c *cloud) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	if err := c.call(ctx, "DeleteRoute"); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.routes, route.Name)
	return nil
}
