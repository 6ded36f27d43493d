// Command goccm is the upstream Go cloud-controller-manager (k8s.io/cloud-provider)
// with an in-memory cloud, "gosim", for benchmarking kube-ccm beside it.
//
// The main follows the library's sample main (k8s.io/cloud-provider/sample/basic_main.go):
// app.NewCloudControllerManagerCommand with the default controller initialisers and
// aliases, so --controllers accepts both the full names (cloud-node-controller, ...)
// and the aliases kube-ccm uses (cloud-node, cloud-node-lifecycle, service, route).
// Unlike the sample, the controllers keep their default client names.
//
// Run with --cloud-provider=gosim. The cloud is configured by flags (or, as their
// defaults, the environment variables named in their help), see gosim.go.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/logs/json/register"          // register optional JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/klog/v2"
)

func main() {
	ccmOptions, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("unable to initialize command options: %v", err)
	}

	fss := cliflag.NamedFlagSets{}
	addGosimFlags(fss.FlagSet("gosim"))
	exitOnSignal()

	command := app.NewCloudControllerManagerCommand(ccmOptions, cloudInitializer, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), fss, wait.NeverStop)
	code := cli.Run(command)
	os.Exit(code)
}

// exitOnSignal logs the cloud call counts once on SIGTERM/SIGINT, then exits 0.
// (The library's Run installs no signal handler: without this one the process
// would die on the signal without a word.)
func exitOnSignal() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-signals
		logCallCounts("exiting on " + sig.String())
		klog.Flush()
		os.Exit(0)
	}()
}

func cloudInitializer(config *config.CompletedConfig) cloudprovider.Interface {
	cloudConfig := config.ComponentConfig.KubeCloudShared.CloudProvider

	// initialize cloud provider with the cloud provider name and config file provided
	cloud, err := cloudprovider.InitCloudProvider(cloudConfig.Name, cloudConfig.CloudConfigFile)
	if err != nil {
		klog.Fatalf("Cloud provider could not be initialized: %v", err)
	}
	if cloud == nil {
		klog.Fatalf("Cloud provider is nil")
	}

	if !cloud.HasClusterID() {
		if config.ComponentConfig.KubeCloudShared.AllowUntaggedCloud {
			klog.Warning("detected a cluster without a ClusterID.  A ClusterID will be required in the future.  Please tag your cluster to avoid any future issues")
		} else {
			klog.Fatalf("no ClusterID found.  A ClusterID is required for the cloud provider to function properly.  This check can be bypassed by setting the allow-untagged-cloud option")
		}
	}
	return cloud
}
