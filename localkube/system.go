package main

// The system tier: real kubelet nodes (the upstream kubelet of the pinned
// release, built beside localkube as "kubelet") with containerd, runc and a
// CNI bridge, so that what a user installs runs as installed: images,
// probes, preStop hooks, restarts, OOM kills and Services.
//
// Everything the tier changes on the host is written to a ledger
// (/run/localkube-system/<id>.json) before it is changed, and undone from
// that ledger at teardown; a start first undoes the ledger of any earlier
// run whose localkube is gone (a crash, a SIGKILL).
//
// What it changes: one Linux bridge and its /24 (the pod network, host end
// .1); blackhole routes for the stand-in's pod, node and service ranges
// (nothing here serves them, so nothing may be routed off the machine); an
// iptables filter chain that counts and drops anything forwarded out of the
// bridge, and a nat chain that sends the "kubernetes" Service
// (10.96.0.1:443) to the API server's address on the bridge; the kernel
// parameters the kubelet and the CNI bridge plugin set (restored to their
// values before the start); the kubelet's canary chains; one cgroup per
// node; containerd's shim sockets in /run/containerd/s (hard-coded there by
// containerd 1.6). Everything else (containerd's root, state and socket,
// network namespaces, IPAM, logs, pod volumes) lives under DIR/system.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing/fstest"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

const (
	ledgerDir  = "/run/localkube-system"
	pauseImage = "localkube.local/pause:1"
)

// Ranges the stand-in uses for Pods and Nodes, and the Service range: no one
// serves them on this machine, so they are blackholed rather than routed out.
var blackholed = []string{"10.244.0.0/16", "10.240.0.0/16", serviceCIDR}

// The kernel parameters the kubelet sets at start (its setupKernelTunables)
// and the CNI bridge plugin sets for a gateway (ip_forward).
var tunables = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding",
}

// The chains the kubelet creates (IPv4 and IPv6): canaries to notice a flush,
// a hint for kube-proxy, and KUBE-FIREWALL (IPv4: refuses outside packets to
// 127.0.0.0/8), jumped to from INPUT and OUTPUT.
var kubeletChains = [][3]string{
	{"iptables", "mangle", "KUBE-KUBELET-CANARY"}, {"iptables", "nat", "KUBE-KUBELET-CANARY"},
	{"iptables", "filter", "KUBE-KUBELET-CANARY"}, {"iptables", "mangle", "KUBE-IPTABLES-HINT"},
	{"ip6tables", "mangle", "KUBE-KUBELET-CANARY"}, {"ip6tables", "nat", "KUBE-KUBELET-CANARY"},
	{"ip6tables", "filter", "KUBE-KUBELET-CANARY"}, {"ip6tables", "mangle", "KUBE-IPTABLES-HINT"},
	{"iptables", "filter", "KUBE-FIREWALL"},
}

// ledger is what one run changed on the host, written before each change.
type ledger struct {
	PID      int               `json:"pid"`
	Dir      string            `json:"dir"`
	Bridge   string            `json:"bridge,omitempty"`
	Routes   [][]string        `json:"routes,omitempty"`
	Rules    [][]string        `json:"rules,omitempty"`  // iptables|ip6tables, table, then args after -D
	Chains   [][3]string       `json:"chains,omitempty"` // iptables|ip6tables, table, chain: flushed and deleted
	Sysctls  map[string]string `json:"sysctls,omitempty"`
	Cgroups  []string          `json:"cgroups,omitempty"`
	MadeDirs []string          `json:"madeDirs,omitempty"`
	path     string
}

func (l *ledger) save() error { return writeJSONAtomic(l.path, l) }

// systemNodeState is what state.json says about a real node.
type systemNodeState struct {
	Name             string `json:"name"`
	ContainerdSocket string `json:"containerdSocket"`
}

// systemState is what state.json says about the tier.
type systemState struct {
	Bridge      string            `json:"bridge"`
	Subnet      string            `json:"subnet"`
	EgressChain string            `json:"egressChain"`
	Ledger      string            `json:"ledger"`
	Nodes       []systemNodeState `json:"nodes"`
	Blackholed  []string          `json:"blackholed"`
}

type systemTier struct {
	u       *upper
	dir     string
	id      string
	led     *ledger
	hostIP  string
	index   int
	state   systemState
	kubelet string
	pause   string
	fwd     net.Listener
	// kubelets stop first at teardown: they would restart what is killed.
	kubelets []*child
}

func newSystemTier(u *upper) (*systemTier, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	here := filepath.Dir(self)
	t := &systemTier{u: u, dir: filepath.Join(u.dir, "system"),
		kubelet: filepath.Join(here, "kubelet"), pause: filepath.Join(here, "pause")}
	for _, p := range []string{t.kubelet, t.pause} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("the system tier needs %s: build it with localkube/build.sh VERSION DIR --system", p)
		}
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the system tier needs %s (Debian: apt-get install containerd runc containernetworking-plugins iptables iproute2)", tool)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return nil, errors.New("the system tier needs the CNI plugins in /usr/lib/cni (Debian: apt-get install containernetworking-plugins)")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the system tier runs a kubelet and containerd: it needs root")
	}
	sum := sha256.Sum256([]byte(u.dir))
	t.id = hex.EncodeToString(sum[:])[:8]
	return t, nil
}

// cleanLeftovers undoes the ledger of every earlier run whose localkube is gone.
func cleanLeftovers() {
	paths, _ := filepath.Glob(filepath.Join(ledgerDir, "*.json"))
	for _, path := range paths {
		l := ledger{path: path}
		data, err := os.ReadFile(path)
		if err != nil || json.Unmarshal(data, &l) != nil {
			continue
		}
		if l.PID > 0 && syscall.Kill(l.PID, 0) == nil && processMentions(l.PID, "localkube") {
			continue // still running
		}
		fmt.Fprintf(os.Stderr, "localkube: undoing what an earlier run (pid %d, %s) left on the host\n", l.PID, l.Dir)
		undo(&l)
	}
}

func processMentions(pid int, word string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(data, []byte(word))
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func readSysctl(name string) (string, bool) {
	data, err := os.ReadFile(filepath.Join("/proc/sys", name))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(data)), true
}

// setUp makes the network, the ledger and each node's containerd; the
// kubelets start in startNodes, once the API server answers.
func (t *systemTier) setUp() error {
	cleanLeftovers()
	if err := os.MkdirAll(ledgerDir, 0o700); err != nil {
		return err
	}
	if err := os.RemoveAll(t.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return err
	}
	t.led = &ledger{PID: os.Getpid(), Dir: t.dir, Sysctls: map[string]string{},
		path: filepath.Join(ledgerDir, t.id+".json")}
	for _, name := range tunables {
		if v, ok := readSysctl(name); ok {
			t.led.Sysctls[name] = v
		}
	}
	// containerd 1.6's shims put their sockets in /run/containerd/s: removed
	// when empty (another containerd's would keep them).
	t.led.MadeDirs = []string{"/run/containerd", "/run/containerd/s"}
	if _, err := os.Stat("/var/lib/cni"); errors.Is(err, os.ErrNotExist) {
		t.led.MadeDirs = append(t.led.MadeDirs, "/var/lib/cni")
	}
	for _, tc := range kubeletChains {
		if run(tc[0], "-t", tc[1], "-S", tc[2]) != nil {
			t.led.Chains = append(t.led.Chains, tc)
			if tc[2] == "KUBE-FIREWALL" {
				t.led.Rules = append(t.led.Rules,
					[]string{tc[0], tc[1], "INPUT", "-j", tc[2]}, []string{tc[0], tc[1], "OUTPUT", "-j", tc[2]})
			}
		}
	}
	if err := t.led.save(); err != nil {
		return err
	}
	if err := t.network(); err != nil {
		return fmt.Errorf("system tier network: %w", err)
	}
	t.state.Ledger = t.led.path
	return nil
}

// routeInUse: does any route of the host already cover or fall inside cidr?
func routeInUse(cidr netip.Prefix) bool {
	out, err := exec.Command("ip", "-4", "-j", "route", "show", "table", "all").Output()
	var routes []struct{ Dst string }
	if err != nil || json.Unmarshal(out, &routes) != nil {
		return true
	}
	return slices.ContainsFunc(routes, func(r struct{ Dst string }) bool {
		if !strings.Contains(r.Dst, "/") {
			r.Dst += "/32" // a host route
		}
		p, err := netip.ParsePrefix(r.Dst) // not "default": it covers everything
		return err == nil && p.Overlaps(cidr)
	})
}

func (t *systemTier) network() error {
	// A /24 of 10.250.0.0/16 that no route of the host touches.
	for n := 0; n < 256 && t.state.Subnet == ""; n++ {
		if cidr := netip.MustParsePrefix(fmt.Sprintf("10.250.%d.0/24", n)); !routeInUse(cidr) {
			t.index, t.state.Subnet, t.hostIP = n, cidr.String(), fmt.Sprintf("10.250.%d.1", n)
		}
	}
	if t.state.Subnet == "" {
		return errors.New("no free /24 in 10.250.0.0/16")
	}
	br, egress, dnat := "lk"+t.id, "LK-EGRESS-"+t.id, "LK-APISERVER-"+t.id
	// All of it goes to the ledger before any of it is made: undoing what was
	// never made fails harmlessly.
	t.led.Bridge = br
	metric := strconv.Itoa(4000 + t.index)
	for _, cidr := range blackholed {
		t.led.Routes = append(t.led.Routes, []string{"blackhole", cidr, "metric", metric})
	}
	t.led.Chains = append(t.led.Chains, [3]string{"iptables", "filter", egress}, [3]string{"iptables", "nat", dnat})
	t.led.Rules = append(t.led.Rules,
		[]string{"iptables", "filter", "FORWARD", "-i", br, "-j", egress},
		[]string{"iptables", "nat", "PREROUTING", "-i", br, "-j", dnat})
	if err := t.led.save(); err != nil {
		return err
	}
	_ = run("ip", "link", "del", br) // a leftover of this same directory
	cmds := [][]string{
		{"ip", "link", "add", br, "type", "bridge"},
		{"ip", "addr", "add", t.hostIP + "/24", "dev", br},
		{"ip", "link", "set", br, "up"},
	}
	for _, route := range t.led.Routes {
		cmds = append(cmds, append([]string{"ip", "route", "add"}, route...))
	}
	// Anything forwarded out of the bridge is counted and dropped (the
	// counter a test reads); the bridge's own traffic is bridged, not forwarded.
	cmds = append(cmds,
		[]string{"iptables", "-t", "filter", "-N", egress},
		[]string{"iptables", "-t", "filter", "-A", egress, "-o", br, "-j", "RETURN"},
		[]string{"iptables", "-t", "filter", "-A", egress, "-j", "DROP"},
		[]string{"iptables", "-t", "filter", "-I", "FORWARD", "1", "-i", br, "-j", egress},
		[]string{"iptables", "-t", "nat", "-N", dnat},
		[]string{"iptables", "-t", "nat", "-A", dnat, "-d", serviceIP + "/32", "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", t.hostIP, t.u.port)},
		[]string{"iptables", "-t", "nat", "-I", "PREROUTING", "1", "-i", br, "-j", dnat})
	for _, c := range cmds {
		if err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	// No IPv6 on the bridge: the pods have none, and nothing is advertised.
	_ = os.WriteFile(fmt.Sprintf("/proc/sys/net/ipv6/conf/%s/disable_ipv6", br), []byte("1"), 0o644)
	t.state.Bridge, t.state.EgressChain, t.state.Blackholed = br, egress, blackholed
	return nil
}

// forward makes the API server answer on the bridge's host address too (it
// binds one address, 127.0.0.1): a TCP relay, TLS end to end.
func (t *systemTier) forward() error {
	l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", t.hostIP, t.u.port))
	if err != nil {
		return err
	}
	t.fwd = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", t.u.port))
				if err != nil {
					return
				}
				defer up.Close()
				// Either side closing ends both copies.
				go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return nil
}

// startNodes starts containerd and a kubelet per node.
func (t *systemTier) startNodes(ctx context.Context, kubeconfigs map[string]string) error {
	if err := t.forward(); err != nil {
		return err
	}
	pauseTar := filepath.Join(t.dir, "pause.oci.tar")
	if err := writePauseImage(t.pause, pauseTar); err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	resolv := filepath.Join(t.dir, "resolv.conf")
	// No name server: a Pod resolves nothing rather than ask one off the machine.
	if err := os.WriteFile(resolv, []byte("options ndots:1\n"), 0o644); err != nil {
		return err
	}
	for i, n := range t.u.systemNodes {
		if err := t.startNode(ctx, i, n, kubeconfigs, pauseTar, resolv); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

func (t *systemTier) startNode(ctx context.Context, i int, n nodeSpec, kubeconfigs map[string]string, pauseTar, resolv string) error {
	d := filepath.Join(t.dir, "nodes", n.Name)
	for _, sub := range []string{"containerd", "cni", "ipam", "kubelet", "pod-logs", "runc"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o700); err != nil {
			return err
		}
	}
	sock := filepath.Join(d, "containerd.sock")
	low, high := 10+i*60, 10+i*60+59
	cni := map[string]any{
		"cniVersion": "0.4.0", "name": "localkube",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": t.led.Bridge, "isGateway": true, "ipMasq": false,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": filepath.Join(d, "ipam"),
					"ranges": []any{[]any{map[string]any{
						"subnet":     t.state.Subnet,
						"rangeStart": fmt.Sprintf("10.250.%d.%d", t.index, low),
						"rangeEnd":   fmt.Sprintf("10.250.%d.%d", t.index, high),
						"gateway":    t.hostIP,
					}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "snat": false},
		},
	}
	data, _ := json.MarshalIndent(cni, "", "  ")
	if err := os.WriteFile(filepath.Join(d, "cni", "10-localkube.conflist"), data, 0o644); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
`, filepath.Join(d, "containerd", "root"), filepath.Join(d, "containerd", "state"), sock,
		filepath.Join(d, "containerd", "opt"), pauseImage, filepath.Join(d, "runc"), filepath.Join(d, "cni"))
	cfgPath := filepath.Join(d, "containerd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	// A registry pull would leave the machine: every one goes to a closed
	// loopback port instead and fails there. Images are imported.
	env := childEnv("HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9")
	ctrName := "containerd-" + n.Name
	if _, err := t.u.startExec(ctrName, "containerd", []string{"--config", cfgPath}, env); err != nil {
		return err
	}
	if err := t.u.poll(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		return exec.CommandContext(ctx, "ctr", "--address", sock, "version").Run() == nil, nil
	}); err != nil {
		return fmt.Errorf("containerd did not answer on %s (log: %s)", sock, t.u.logPath(ctrName))
	}
	if err := run("ctr", "--address", sock, "-n", "k8s.io", "images", "import", pauseTar); err != nil {
		return err
	}
	// The node's own cgroup, in every hierarchy (the kubelet's cgroupRoot must exist).
	cg := fmt.Sprintf("/localkube-%s-%s", t.id, n.Name)
	t.led.Cgroups = append(t.led.Cgroups, cg)
	if err := t.led.save(); err != nil {
		return err
	}
	if err := makeCgroup(cg); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	healthz, err := freePort()
	if err != nil {
		return err
	}
	// Beside the kubelet's defaults (cgroupfs, as containerd's runc here; no
	// read-only port; healthz on 127.0.0.1; 110 pods; no certificate rotation).
	kcfgPath := filepath.Join(d, "kubelet.json")
	if err := writeJSONAtomic(kcfgPath, kubeletv1beta1.KubeletConfiguration{
		TypeMeta:     metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		FailCgroupV1: ptr.To(false), CgroupRoot: cg, ContainerRuntimeEndpoint: "unix://" + sock,
		Address: t.hostIP, Port: int32(port), HealthzPort: ptr.To(int32(healthz)),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
			X509:    kubeletv1beta1.KubeletX509Authentication{ClientCAFile: t.u.pki.CAFile},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
		ClusterDomain: "cluster.local", ResolverConfig: ptr.To(resolv), PodLogsDir: filepath.Join(d, "pod-logs"),
		FailSwapOn: ptr.To(false), SerializeImagePulls: ptr.To(false),
		ImageGCHighThresholdPercent: ptr.To[int32](100), ImageGCLowThresholdPercent: ptr.To[int32](99),
		EvictionHard: map[string]string{
			"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%",
		},
	}); err != nil {
		return err
	}
	args := []string{
		"--config=" + kcfgPath,
		"--kubeconfig=" + kubeconfigs["system:node:"+n.Name],
		"--root-dir=" + filepath.Join(d, "kubelet"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + t.hostIP,
		"--node-labels=" + labels.Set(n.Labels).String(),
		verbosity,
	}
	klName := "kubelet-" + n.Name
	kl, err := t.u.startExec(klName, t.kubelet, args, childEnv("NO_PROXY=*"))
	if err != nil {
		return err
	}
	t.kubelets = append(t.kubelets, kl)
	t.state.Nodes = append(t.state.Nodes, systemNodeState{Name: n.Name, ContainerdSocket: sock})
	return nil
}

// cgroupMounts: every mounted cgroup hierarchy (v1 controllers and the unified one).
func cgroupMounts() []string {
	mounts, _ := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	var out []string
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	return out
}

func makeCgroup(cg string) error {
	for _, m := range cgroupMounts() {
		p := filepath.Join(m, cg)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if strings.HasSuffix(m, "/cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(m, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(p, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// killCgroup kills every process in the cgroup tree, in every hierarchy, and
// removes the tree (runc's helpers: sub-cgroups first, retried while busy).
func killCgroup(cg string) {
	for _, m := range cgroupMounts() {
		p := filepath.Join(m, cg)
		for attempt := 0; attempt < 50; attempt++ {
			pids, _ := cgroups.GetAllPids(p)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = cgroups.RemovePath(p)
	}
}

// killMentioning SIGKILLs every process whose command line names dir (the
// kubelets, containerd, its shims) and waits for them to go.
func killMentioning(dir string) {
	for attempt := 0; attempt < 50; attempt++ {
		found := 0
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			if processMentions(pid, dir) {
				found++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if found == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) {
	for attempt := 0; attempt < 5; attempt++ {
		mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		if err != nil || len(mounts) == 0 {
			return
		}
		sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
		for _, m := range mounts {
			if err := syscall.Unmount(m.Mountpoint, 0); err != nil {
				_ = syscall.Unmount(m.Mountpoint, syscall.MNT_DETACH)
			}
		}
	}
}

// removeShimSockets removes the sockets the killed shims of this run left in
// /run/containerd/s: containerd 1.6 names each sha256(address/namespace/id).
func removeShimSockets(dir string) {
	nodes, _ := filepath.Glob(filepath.Join(dir, "nodes", "*"))
	for _, n := range nodes {
		sock := filepath.Join(n, "containerd.sock")
		for _, ns := range []string{"k8s.io", "default"} {
			tasks, _ := os.ReadDir(filepath.Join(n, "containerd", "state", "io.containerd.runtime.v2.task", ns))
			for _, task := range tasks {
				sum := sha256.Sum256([]byte(filepath.Join(sock, ns, task.Name())))
				_ = os.Remove(filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])))
			}
		}
	}
}

// undo reverses a ledger: processes, mounts, iptables, routes, the bridge,
// kernel parameters, cgroups, directories; then removes the ledger.
func undo(l *ledger) {
	killMentioning(l.Dir)
	for _, cg := range l.Cgroups {
		killCgroup(cg)
	}
	killMentioning(l.Dir) // shims that outlived their containers
	removeShimSockets(l.Dir)
	unmountUnder(l.Dir)
	for _, r := range l.Rules {
		for run(r[0], append([]string{"-t", r[1], "-D"}, r[2:]...)...) == nil {
		}
	}
	for _, c := range l.Chains {
		if run(c[0], "-t", c[1], "-F", c[2]) == nil {
			_ = run(c[0], "-t", c[1], "-X", c[2])
		}
	}
	for _, r := range l.Routes {
		_ = run("ip", append([]string{"route", "del"}, r...)...)
	}
	if l.Bridge != "" {
		_ = run("ip", "link", "del", l.Bridge)
	}
	for name, v := range l.Sysctls {
		if now, ok := readSysctl(name); ok && now != v {
			_ = os.WriteFile(filepath.Join("/proc/sys", name), []byte(v), 0o644)
		}
	}
	for _, cg := range l.Cgroups {
		killCgroup(cg)
	}
	for i := len(l.MadeDirs) - 1; i >= 0; i-- {
		d := l.MadeDirs[i]
		if d == "/var/lib/cni" {
			_ = os.RemoveAll(d) // the CNI result cache of this run's pods only
			continue
		}
		_ = os.Remove(d) // only when empty
	}
	_ = os.Remove(l.path)
	_ = os.Remove(ledgerDir) // when no other run's ledger is left
}

// tearDown stops the tier and undoes its ledger.
func (t *systemTier) tearDown() {
	if t.fwd != nil {
		_ = t.fwd.Close()
	}
	if t.led == nil {
		return
	}
	for _, c := range t.kubelets {
		c.stop()
	}
	undo(t.led)
}

// writePauseImage packs the pause binary as a one-layer OCI image archive
// (what `ctr images import` reads): no registry, no pull.
func writePauseImage(binary, out string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	epoch := time.Unix(0, 0)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.AddFS(fstest.MapFS{"pause": {Data: bin, Mode: 0o755, ModTime: epoch}}); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	files := fstest.MapFS{"oci-layout": {Data: []byte(`{"imageLayoutVersion":"1.0.0"}`), Mode: 0o644, ModTime: epoch}}
	// blob stores b under blobs/sha256/ and describes it.
	blob := func(mediaType string, b []byte) ocispec.Descriptor {
		d := digest.FromBytes(b)
		files["blobs/sha256/"+d.Encoded()] = &fstest.MapFile{Data: b, Mode: 0o644, ModTime: epoch}
		return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
	}
	layerDesc := blob(ocispec.MediaTypeImageLayer, layer.Bytes())
	config, _ := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{Architecture: "amd64", OS: "linux"},
		Config:   ocispec.ImageConfig{Entrypoint: []string{"/pause"}, User: "65535:65535"},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDesc.Digest}},
	})
	manifest, _ := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: blob(ocispec.MediaTypeImageConfig, config), Layers: []ocispec.Descriptor{layerDesc},
	})
	manifestDesc := blob(ocispec.MediaTypeImageManifest, manifest)
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name": pauseImage, ocispec.AnnotationRefName: "1",
	}
	index, _ := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manifestDesc},
	})
	files["index.json"] = &fstest.MapFile{Data: index, Mode: 0o644, ModTime: epoch}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	ow := tar.NewWriter(f)
	if err := ow.AddFS(files); err != nil {
		return err
	}
	return ow.Close()
}
