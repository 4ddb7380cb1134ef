// Command localkube runs a real Kubernetes control plane on 127.0.0.1 for
// elb-gate's tests, demo, soak runs and benchmarks: etcd (embedded),
// kube-apiserver, kube-controller-manager and kube-scheduler built from the
// official Kubernetes modules, plus a kubelet stand-in that drives fake Nodes
// and moves Pods through their real phases. kubectl of the same release is
// built beside it (cmd/kubectl), so the lines tests assert are the ones that
// release prints.
//
//	localkube up --dir DIR [--users FILE] [--nodes FILE]   the whole control plane
//
// The components run as child processes of "up" (the same binary, started
// with an internal sub-command), so each keeps the process-wide state it
// expects: flags, metrics registries and feature gates.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "time/tzdata"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	sub, args := os.Args[1], os.Args[2:]
	// A component's cobra command runs the way its own main runs it.
	var command *cobra.Command
	switch sub {
	case "up":
		os.Exit(runUp(args))
	case "kube-apiserver":
		command = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		command = controllermanager.NewControllerManagerCommand()
	case "kube-scheduler":
		command = scheduler.NewSchedulerCommand()
	case "-h", "--help", "help":
		fmt.Println(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "localkube: unknown command %q\n%s\n", sub, usage)
		os.Exit(2)
	}
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}

const usage = `usage:
  localkube up --dir DIR [--users FILE] [--nodes FILE]`
