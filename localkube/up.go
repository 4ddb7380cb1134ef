package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	capi "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	quotav1 "k8s.io/apiserver/pkg/admission/plugin/resourcequota/apis/resourcequota/v1"
	webhookv1 "k8s.io/apiserver/pkg/admission/plugin/webhook/config/apis/webhookadmission/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/version"
	nodeutil "k8s.io/component-helpers/node/util"
)

const (
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1"
	issuer      = "https://kubernetes.default.svc.cluster.local"
	stateFile   = "state.json"
	// The log verbosity of the Kubernetes components and the kubelets.
	verbosity = "--v=1"
)

// user is a plain user of the static token file.
type user struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
	Token  string   `json:"token,omitempty"`
}

// state is what "up" writes to DIR/state.json once the control plane is ready.
// Its presence is the ready signal; it is removed on shutdown.
type state struct {
	Server          string            `json:"server"`
	CAFile          string            `json:"caFile"`
	Kubeconfigs     map[string]string `json:"kubeconfigs"`
	Tokens          map[string]string `json:"tokens"`
	AuditLog        string            `json:"auditLog"`
	KubernetesVer   string            `json:"kubernetesVersion"` // the release built in (build.sh sets it)
	StartupSeconds  float64           `json:"startupSeconds"`
	PID             int               `json:"pid"`
	WebhookClientCA string            `json:"webhookClientCAFile"`
	System          *systemState      `json:"system,omitempty"`
}

func runUp(args []string) int {
	u := &upper{}
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.StringVar(&u.dir, "dir", "", "state directory (created; kubeconfigs, certificates, logs, state.json)")
	usersFile := fs.String("users", "", "JSON list of plain users [{\"name\":…,\"groups\":[…]}] for the token file")
	fs.StringVar(&u.etcdDir, "etcd-dir", "", "etcd data directory (default DIR/etcd)")
	fs.Int64Var(&u.etcdQuota, "etcd-quota-bytes", 0, "etcd backend quota in bytes (0: etcd's default, 2 GiB)")
	nodesFile := fs.String("nodes", "", `JSON list of Nodes [{"name":…,"capacity":{"cpu":…,"memory":…,"pods":…},"labels":{…}}]; "real":true: a real kubelet (containerd, runc, a CNI bridge; root), name and labels only`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if u.dir == "" {
		fmt.Fprintln(os.Stderr, "localkube up: --dir is required")
		return 2
	}
	var err error
	if u.dir, err = filepath.Abs(u.dir); err != nil {
		fmt.Fprintln(os.Stderr, "localkube up:", err)
		return 2
	}
	if u.etcdDir == "" {
		u.etcdDir = filepath.Join(u.dir, "etcd")
	}
	var nodes []nodeSpec
	for _, f := range []struct {
		flag, path string
		into       any
	}{{"users", *usersFile, &u.users}, {"nodes", *nodesFile, &nodes}} {
		if err := readJSON(f.path, f.into); err != nil {
			fmt.Fprintf(os.Stderr, "localkube up: --%s %s: %v\n", f.flag, f.path, err)
			return 2
		}
	}
	if err := u.addNodes(nodes); err != nil {
		fmt.Fprintln(os.Stderr, "localkube up: --nodes:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := u.run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "localkube up:", err)
		return 1
	}
	return 0
}

type upper struct {
	dir, etcdDir string
	etcdQuota    int64
	port         int
	nodes        []nodeSpec
	systemNodes  []nodeSpec
	system       *systemTier
	users        []user
	pki          *pki
	// Started, watched and stopped from run's goroutine alone (the system tier's too): no lock.
	children []*child
}

type child struct {
	name string
	stop func() // returns once the process has exited
	done chan struct{}
	err  error
}

func (u *upper) run(ctx context.Context) error {
	began := time.Now()
	_ = os.Remove(filepath.Join(u.dir, stateFile))
	for _, sub := range []string{"pki", "logs", "kubeconfigs"} {
		if err := os.MkdirAll(filepath.Join(u.dir, sub), 0o700); err != nil {
			return err
		}
	}
	var err error
	if u.pki, err = makePKI(filepath.Join(u.dir, "pki")); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	users := u.allUsers()
	if err := u.writeTokenFile(users); err != nil {
		return err
	}
	if err := u.writeAdmissionConfig(); err != nil {
		return err
	}
	if err := u.writeAuditPolicy(); err != nil {
		return err
	}

	etcdURL, etcd, err := u.startEtcd()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	// etcd's data is this run's alone (startEtcd empties the directory first): it goes
	// once etcd has stopped, so a data directory in memory (/dev/shm) does not outlive
	// the run and hold the machine's RAM.
	defer func() { _ = os.RemoveAll(u.etcdDir) }()
	defer etcd.Close()

	if u.port, err = freePort(); err != nil {
		return err
	}
	// Deferred first, so it runs last: the system tier's teardown (deferred
	// below) stops its kubelets and containerd itself, then the rest stop.
	defer u.stopChildren()
	if len(u.systemNodes) > 0 {
		if u.system, err = newSystemTier(u); err != nil {
			return err
		}
		defer u.system.tearDown()
		if err := u.system.setUp(); err != nil {
			return err
		}
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", u.port)
	kubeconfigs := map[string]string{}
	tokens := map[string]string{}
	for _, usr := range users {
		path := filepath.Join(u.dir, "kubeconfigs", usr.Name+".kubeconfig")
		if err := writeKubeconfig(path, server, u.pki.CAFile, usr.Name, usr.Token); err != nil {
			return err
		}
		kubeconfigs[usr.Name] = path
		tokens[usr.Name] = usr.Token
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigs["localkube-kubelet"])
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	auditLog := filepath.Join(u.dir, "logs", "audit.log")
	apiArgs, err := u.apiserverArgs(etcdURL, auditLog)
	if err != nil {
		return err
	}
	if err := u.start("kube-apiserver", apiArgs); err != nil {
		return err
	}
	if err := u.waitReady(ctx, client); err != nil {
		return fmt.Errorf("kube-apiserver: %w (log: %s)", err, u.logPath("kube-apiserver"))
	}
	if err := u.start("kube-controller-manager", u.controllerManagerArgs(kubeconfigs)); err != nil {
		return err
	}
	if err := u.start("kube-scheduler", []string{
		"--kubeconfig=" + kubeconfigs["system:kube-scheduler"], "--leader-elect=false",
		"--secure-port=0", verbosity,
	}); err != nil {
		return err
	}

	kl := newKubelet(client)
	if err := kl.createNodes(ctx, u.nodes); err != nil {
		return err
	}
	kctx, cancelKubelet := context.WithCancel(ctx)
	defer cancelKubelet()
	go kl.run(kctx)
	if u.system != nil {
		if err := u.system.startNodes(ctx, kubeconfigs); err != nil {
			return err
		}
	}

	if err := u.waitSettled(ctx, client); err != nil {
		return err
	}
	st := state{
		Server: server, CAFile: u.pki.CAFile, Kubeconfigs: kubeconfigs, Tokens: tokens,
		AuditLog: auditLog, KubernetesVer: version.Get().GitVersion,
		StartupSeconds: time.Since(began).Seconds(), PID: os.Getpid(),
		WebhookClientCA: u.pki.CAFile,
	}
	if u.system != nil {
		st.System = &u.system.state
	}
	if err := writeJSONAtomic(filepath.Join(u.dir, stateFile), st); err != nil {
		return err
	}
	fmt.Printf("localkube: Kubernetes %s ready at %s in %.1fs\n", st.KubernetesVer, server, st.StartupSeconds)
	fmt.Printf("localkube: admin kubeconfig %s\n", kubeconfigs["admin"])
	fmt.Printf("localkube: kubeconfigs for every user in %s\n", filepath.Join(u.dir, "kubeconfigs"))
	fmt.Printf("localkube: state %s\n", filepath.Join(u.dir, stateFile))

	// Run until asked to stop, or until a component dies (then fail loudly).
	defer os.Remove(filepath.Join(u.dir, stateFile))
	err = wait.PollUntilContextCancel(ctx, time.Second, false, func(context.Context) (bool, error) {
		return false, u.exited()
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// allUsers: the components' own identities, an administrator, and the users
// asked for, each with a random token.
func (u *upper) allUsers() []user {
	users := []user{
		{Name: "admin", Groups: []string{"system:masters"}},
		{Name: "system:kube-controller-manager"},
		{Name: "system:kube-scheduler"},
		// The kubelet stand-in writes Node and Pod status for every node; the
		// Node authorizer's per-node scoping is not modelled.
		{Name: "localkube-kubelet", Groups: []string{"system:masters"}},
	}
	// Real kubelets: the Node authorizer is not enabled, so as the stand-in.
	for _, n := range u.systemNodes {
		users = append(users, user{Name: "system:node:" + n.Name, Groups: []string{"system:nodes", "system:masters"}})
	}
	for _, usr := range u.users {
		if !slices.ContainsFunc(users, func(known user) bool { return known.Name == usr.Name }) {
			users = append(users, usr)
		}
	}
	for i := range users {
		if users[i].Token == "" {
			users[i].Token = rand.Text()
		}
	}
	return users
}

func (u *upper) writeTokenFile(users []user) error {
	var b strings.Builder
	for _, usr := range users {
		groups := ""
		if len(usr.Groups) > 0 {
			groups = fmt.Sprintf(",\"%s\"", strings.Join(usr.Groups, ","))
		}
		fmt.Fprintf(&b, "%s,%s,%s%s\n", usr.Token, usr.Name, "uid-"+usr.Name, groups)
	}
	return os.WriteFile(filepath.Join(u.dir, "pki", "tokens.csv"), []byte(b.String()), 0o600)
}

// writeAdmissionConfig makes the API server present a client certificate to
// every admission webhook (WebhookAdmission kubeConfigFile, user "*"), as a
// self-managed control plane can: webhooks may then tell the API server from
// other callers; and makes pods of a critical priority class need a quota.
// The CA (u.pki.CAFile) verifies the webhook client certificate.
func (u *upper) writeAdmissionConfig() error {
	pkiDir := filepath.Join(u.dir, "pki")
	certFile, keyFile, err := u.pki.issue("kube-apiserver-webhook-client", nil, nil, capi.UsageClientAuth)
	if err != nil {
		return err
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.AuthInfos["*"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	kubeconfigPath := filepath.Join(pkiDir, "webhook-client.kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, kubeconfigPath); err != nil {
		return err
	}
	webhook, err := json.Marshal(webhookv1.WebhookAdmission{
		TypeMeta:       metav1.TypeMeta{APIVersion: "apiserver.config.k8s.io/v1", Kind: "WebhookAdmissionConfiguration"},
		KubeConfigFile: kubeconfigPath,
	})
	if err != nil {
		return err
	}
	// Critical priority classes only where a ResourceQuota admits them, as managed
	// clusters keep them for the platform's own pods.
	quota, err := json.Marshal(quotav1.Configuration{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiserver.config.k8s.io/v1", Kind: "ResourceQuotaConfiguration"},
		LimitedResources: []quotav1.LimitedResource{{Resource: "pods", MatchScopes: []corev1.ScopedResourceSelectorRequirement{{
			ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn,
			Values: []string{"system-node-critical", "system-cluster-critical"},
		}}}},
	})
	if err != nil {
		return err
	}
	return writeJSONAtomic(filepath.Join(pkiDir, "admission.json"), apiserverv1.AdmissionConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiserver.config.k8s.io/v1", Kind: "AdmissionConfiguration"},
		Plugins: []apiserverv1.AdmissionPluginConfiguration{
			{Name: "ValidatingAdmissionWebhook", Configuration: &runtime.Unknown{Raw: webhook}},
			{Name: "MutatingAdmissionWebhook", Configuration: &runtime.Unknown{Raw: webhook}},
			{Name: "ResourceQuota", Configuration: &runtime.Unknown{Raw: quota}},
		},
	})
}

// writeAuditPolicy records every write to Jobs and Leases with the request
// and response bodies: who the API server authenticated, and at which
// resourceVersion each write committed (tests judge the gates from it).
func (u *upper) writeAuditPolicy() error {
	return writeJSONAtomic(filepath.Join(u.dir, "pki", "audit-policy.json"), auditv1.Policy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "audit.k8s.io/v1", Kind: "Policy"},
		OmitStages: []auditv1.Stage{auditv1.StageRequestReceived},
		Rules: []auditv1.PolicyRule{{
			Level: auditv1.LevelRequestResponse, Verbs: []string{"create", "update", "patch", "delete"},
			Resources: []auditv1.GroupResources{
				{Group: "batch", Resources: []string{"jobs"}},
				{Group: "coordination.k8s.io", Resources: []string{"leases"}},
			},
		}, {Level: auditv1.LevelNone}},
	})
}

func (u *upper) apiserverArgs(etcdURL, auditLog string) ([]string, error) {
	pkiDir := filepath.Join(u.dir, "pki")
	var system []string
	if u.system != nil {
		cert, key, err := u.pki.issue("kube-apiserver-kubelet-client", nil, nil, capi.UsageClientAuth)
		if err != nil {
			return nil, err
		}
		system = []string{
			// Webhooks by clientConfig.service: the API server dials an
			// endpoint of the Service (EndpointSlice -> Pod IP), not its ClusterIP.
			"--enable-aggregator-routing=true",
			"--kubelet-client-certificate=" + cert, "--kubelet-client-key=" + key,
			"--kubelet-preferred-address-types=InternalIP",
		}
	}
	return append(system, []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", u.port),
		"--tls-cert-file=" + u.pki.ServingCertFile,
		"--tls-private-key-file=" + u.pki.ServingKeyFile,
		"--client-ca-file=" + u.pki.CAFile,
		"--token-auth-file=" + filepath.Join(pkiDir, "tokens.csv"),
		"--service-account-issuer=" + issuer,
		"--api-audiences=" + issuer,
		"--service-account-key-file=" + u.pki.SAKeyFile,
		"--service-account-signing-key-file=" + u.pki.SAKeyFile,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		"--admission-control-config-file=" + filepath.Join(pkiDir, "admission.json"),
		"--audit-policy-file=" + filepath.Join(pkiDir, "audit-policy.json"),
		"--audit-log-path=" + auditLog,
		"--audit-log-format=json",
		"--audit-log-maxsize=0",
		"--profiling=false",
		// The "kubernetes" Service cannot point at a loopback address; nothing here needs it.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(u.dir, "pki", "apiserver-generated"),
		verbosity,
	}...), nil
}

func (u *upper) controllerManagerArgs(kubeconfigs map[string]string) []string {
	controllers := []string{
		"serviceaccount-token-controller", "serviceaccount-controller", "namespace-controller",
		"garbage-collector-controller", "job-controller", "ttl-after-finished-controller",
		"node-lifecycle-controller", "taint-eviction-controller", "pod-garbage-collector-controller",
		"root-ca-certificate-publisher-controller", "resourcequota-controller",
		"deployment-controller", "replicaset-controller", "disruption-controller",
		"endpointslice-controller",
	}
	return []string{
		"--kubeconfig=" + kubeconfigs["system:kube-controller-manager"],
		"--secure-port=0",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + u.pki.SAKeyFile,
		"--root-ca-file=" + u.pki.CAFile,
		"--cluster-name=localkube",
		"--controllers=" + strings.Join(controllers, ","),
		verbosity,
	}
}

func (u *upper) startEtcd() (string, *embed.Etcd, error) {
	if err := os.RemoveAll(u.etcdDir); err != nil {
		return "", nil, err
	}
	clientPort, err := freePort()
	if err != nil {
		return "", nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return "", nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "localkube"
	cfg.Dir = u.etcdDir
	clientURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", clientPort))
	peerURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", peerPort))
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = fmt.Sprintf("localkube=%s", peerURL.String())
	// A test cluster lives for one run: durability across power loss buys
	// nothing, and fsync on every write would dominate its latency.
	cfg.UnsafeNoFsync = true
	// A namespace of tens of thousands of Jobs (make bench) outgrows the default quota
	// before the API server's compaction catches up; 0 keeps etcd's default.
	if u.etcdQuota > 0 {
		cfg.QuotaBackendBytes = u.etcdQuota
	}
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{u.logPath("etcd")}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return "", nil, errors.New("not ready after 60s")
	}
	return clientURL.String(), e, nil
}

func (u *upper) logPath(name string) string {
	return filepath.Join(u.dir, "logs", name+".log")
}

// start runs this binary's sub-command name as a child process; it dies with us.
func (u *upper) start(name string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	_, err = u.startExec(name, self, append([]string{name}, args...), childEnv("NO_PROXY=*"))
	return err
}

// startExec runs a program as a child process logging to logs/NAME.log; it dies with us.
func (u *upper) startExec(name, path string, args, env []string) (*child, error) {
	log, err := os.OpenFile(u.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path, args...)
	// Stopping it (cancel) sends SIGTERM, and SIGKILL when it has not exited 10s later.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		cancel()
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, done: make(chan struct{})}
	c.stop = func() { cancel(); <-c.done }
	go func() {
		c.err = cmd.Wait()
		log.Close()
		close(c.done)
	}()
	u.children = append(u.children, c)
	return c, nil
}

// childEnv is our environment without proxy settings or KUBECONFIG, plus
// extra: the components talk to 127.0.0.1 only, and a proxy from the
// environment must never sit between the API server and a webhook.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		key := strings.ToUpper(strings.SplitN(kv, "=", 2)[0])
		if strings.HasSuffix(key, "_PROXY") || strings.HasPrefix(key, "KUBECONFIG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// stopChildren stops the components in reverse order of start.
func (u *upper) stopChildren() {
	for _, c := range slices.Backward(u.children) {
		c.stop()
	}
}

// exited is the error of a component that has exited, if one has.
func (u *upper) exited() error {
	for _, c := range u.children {
		select {
		case <-c.done:
			return fmt.Errorf("%s exited (%v); its log: %s", c.name, c.err, u.logPath(c.name))
		default:
		}
	}
	return nil
}

// poll calls done every 200ms until it reports true or an error, ctx ends or
// limit passes (wait.Interrupted); a component that exits fails it at once.
func (u *upper) poll(ctx context.Context, limit time.Duration, done func(context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		if err := u.exited(); err != nil {
			return false, err
		}
		return done(ctx)
	})
}

// waitReady waits for the API server's /readyz.
func (u *upper) waitReady(ctx context.Context, client kubernetes.Interface) error {
	last := "no answer"
	err := u.poll(ctx, 180*time.Second, func(ctx context.Context) (bool, error) {
		if _, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			last = err.Error()
			return false, nil
		}
		return true, nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("/readyz not ready after 180s: %s", last)
	}
	return err
}

// waitSettled waits for what every test relies on: the default
// ServiceAccount (the ServiceAccount controller runs), and every starting
// Node Ready (the kubelet stand-in's and the real kubelets').
func (u *upper) waitSettled(ctx context.Context, client kubernetes.Interface) error {
	var saErr error
	ready, systemReady := 0, 0
	err := u.poll(ctx, 180*time.Second, func(ctx context.Context) (bool, error) {
		_, saErr = client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		ready, systemReady = 0, 0
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range nodes.Items {
			if _, c := nodeutil.GetNodeCondition(&nodes.Items[i].Status, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
				continue
			}
			if nodes.Items[i].Labels[managedLabel] == "true" {
				ready++
			} else {
				systemReady++
			}
		}
		return saErr == nil && ready >= len(u.nodes) && systemReady == len(u.systemNodes), nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("control plane not settled after 180s (default ServiceAccount: %v; nodes ready: %d/%d; real kubelet nodes ready: %d/%d, their logs in %s)",
			saErr, ready, len(u.nodes), systemReady, len(u.systemNodes), filepath.Join(u.dir, "logs"))
	}
	return err
}

func writeKubeconfig(path, server, caFile, userName, token string) error {
	name := strings.ReplaceAll(userName, ":", "-")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["localkube"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name+"@localkube"] = &clientcmdapi.Context{Cluster: "localkube", AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name + "@localkube"
	return clientcmd.WriteToFile(*cfg, path)
}

// readJSON decodes the file at path into v; no path, nothing to read.
func readJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	return err
}

// addNodes sorts the listed Nodes into the stand-in's and the real kubelets'.
func (u *upper) addNodes(nodes []nodeSpec) error {
	for _, n := range nodes {
		switch {
		case n.Name == "":
			return fmt.Errorf("a node without a name")
		case n.Real:
			u.systemNodes = append(u.systemNodes, n)
		case n.Capacity.Cpu().IsZero() || n.Capacity.Memory().IsZero():
			return fmt.Errorf("node %s: a stand-in node needs capacity cpu and memory", n.Name)
		default:
			if _, ok := n.Capacity[corev1.ResourcePods]; !ok {
				n.Capacity[corev1.ResourcePods] = resource.MustParse("110")
			}
			u.nodes = append(u.nodes, n)
		}
	}
	return nil
}

func writeJSONAtomic(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
