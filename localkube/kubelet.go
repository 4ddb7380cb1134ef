package main

// The kubelet stand-in. Nodes here have no kubelet and run no containers; this
// driver plays the kubelet's part on the API: it keeps the managed Nodes'
// status and heartbeat Leases, and moves every Pod bound to one of them
// through the phases a kubelet would write — Running when bound, then
// Succeeded/Failed when its (imaginary) container exits, restarts per
// restartPolicy, and on deletion a Terminating period bounded by the grace
// period before the final delete. What a Pod's container does is read from
// annotations (normally set in a Job's pod template):
//
//	localkube.elb-gate.io/run-seconds   seconds until the container exits (absent: runs until deleted)
//	localkube.elb-gate.io/exit-code     its exit code (default 0)
//	localkube.elb-gate.io/exit-codes    per attempt, for a Job's successive pods: "1,1,0"
//	localkube.elb-gate.io/stop-seconds  seconds it takes to exit after SIGTERM (default 1)
//	localkube.elb-gate.io/restart       change the value to crash the container once now
//	localkube.elb-gate.io/restart-containers  with restart: crash only these containers
//	                                    (comma-separated names; absent: every container)
//
// and a Node's kubelet is steered by the Node annotation
//
//	localkube.elb-gate.io/kubelet: "not-ready"   the kubelet reports Ready=False
//	localkube.elb-gate.io/kubelet: "stopped"     the kubelet is gone: no heartbeat, no status,
//	                                             its Pods are left as they are
import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/version"
	"k8s.io/component-helpers/apimachinery/lease"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

const (
	annotationPrefix  = "localkube.elb-gate.io/"
	managedLabel      = annotationPrefix + "managed"
	kubeletAnnotation = annotationPrefix + "kubelet"
	runSecondsKey     = annotationPrefix + "run-seconds"
	exitCodeKey       = annotationPrefix + "exit-code"
	exitCodesKey      = annotationPrefix + "exit-codes"
	stopSecondsKey    = annotationPrefix + "stop-seconds"
	restartKey        = annotationPrefix + "restart"
	restartOnlyKey    = annotationPrefix + "restart-containers"
	indexKey          = annotationPrefix + "index"
	jobUIDLabel       = "batch.kubernetes.io/controller-uid"
	heartbeatPeriod   = 10 * time.Second
	nodeStatusPeriod  = 60 * time.Second
	defaultStop       = time.Second
)

// nodeSpec is a Node the control plane starts with, as `up --nodes FILE` lists
// it: a stand-in's (all of Capacity allocatable), or a real kubelet's (Name and
// Labels only).
type nodeSpec struct {
	Name     string              `json:"name"`
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	Labels   map[string]string   `json:"labels,omitempty"`
	Real     bool                `json:"real,omitempty"`
}

// podState is what the stand-in remembers of a Pod's imaginary container.
type podState struct {
	started       time.Time // when the current container instance started
	attempt       int       // index of this Pod among its Job's Pods (exit-codes)
	restartToken  string
	stopRequested time.Time
}

type kubelet struct {
	client  kubernetes.Interface
	pods    corelisters.PodLister
	nodes   corelisters.NodeLister
	podQ    workqueue.TypedDelayingInterface[string]
	nodeQ   workqueue.TypedDelayingInterface[string]
	mu      sync.Mutex
	state   map[types.UID]*podState
	jobPods map[string]map[types.UID]int // Job uid -> its Pods in start order
	nextIP  map[string]int
	// heartbeats stops the lease controller of each Node whose kubelet runs.
	heartbeats map[string]context.CancelFunc
}

func newKubelet(client kubernetes.Interface) *kubelet {
	return &kubelet{
		client:     client,
		podQ:       workqueue.NewTypedDelayingQueue[string](),
		nodeQ:      workqueue.NewTypedDelayingQueue[string](),
		state:      map[types.UID]*podState{},
		jobPods:    map[string]map[types.UID]int{},
		nextIP:     map[string]int{},
		heartbeats: map[string]context.CancelFunc{},
	}
}

// createNodes registers the starting Nodes (idempotent).
func (k *kubelet) createNodes(ctx context.Context, specs []nodeSpec) error {
	for i, spec := range specs {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: spec.Name,
				Labels: map[string]string{
					managedLabel:             "true",
					"kubernetes.io/hostname": spec.Name,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     "amd64",
				},
				Annotations: map[string]string{indexKey: strconv.Itoa(i)},
			},
		}
		maps.Copy(node.Labels, spec.Labels)
		node.Status.Capacity, node.Status.Allocatable = spec.Capacity, spec.Capacity
		_, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node %s: %w", spec.Name, err)
		}
	}
	return nil
}

// run starts the informers and workers; it returns when ctx is done.
func (k *kubelet) run(ctx context.Context) {
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(k.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = managedLabel + "=true" }))
	podFactory := informers.NewSharedInformerFactoryWithOptions(k.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	nodeInformer := nodeFactory.Core().V1().Nodes()
	podInformer := podFactory.Core().V1().Pods()
	k.nodes = nodeInformer.Lister()
	k.pods = podInformer.Lister()
	enqueue := func(q workqueue.TypedDelayingInterface[string]) cache.ResourceEventHandlerFuncs {
		add := func(obj interface{}) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		}
		return cache.ResourceEventHandlerFuncs{
			AddFunc: add, UpdateFunc: func(_, obj interface{}) { add(obj) }, DeleteFunc: add,
		}
	}
	_, _ = nodeInformer.Informer().AddEventHandler(enqueue(k.nodeQ))
	_, _ = podInformer.Informer().AddEventHandler(enqueue(k.podQ))
	nodeFactory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	nodeFactory.WaitForCacheSync(ctx.Done())
	podFactory.WaitForCacheSync(ctx.Done())

	go k.worker(ctx, k.nodeQ, k.syncNode)
	for range 4 {
		go k.worker(ctx, k.podQ, k.syncPod)
	}
	<-ctx.Done()
	k.podQ.ShutDown()
	k.nodeQ.ShutDown()
}

func (k *kubelet) worker(ctx context.Context, q workqueue.TypedDelayingInterface[string],
	sync func(context.Context, string) (time.Duration, error)) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		after, err := sync(ctx, key)
		if err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
				klog.InfoS("kubelet stand-in: will retry", "key", key, "err", err)
			}
			after = 200 * time.Millisecond
		}
		if after > 0 {
			q.AddAfter(key, after)
		}
		q.Done(key)
	}
}

// -- Nodes -------------------------------------------------------------------------

// syncNode runs on a single worker, so it alone touches k.heartbeats.
func (k *kubelet) syncNode(ctx context.Context, name string) (time.Duration, error) {
	node, err := k.nodes.Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	// The heartbeat Lease is renewed by upstream's node lease controller (the
	// kubelet's) for as long as the Node exists and its kubelet is not stopped.
	stopped := node == nil || node.Annotations[kubeletAnnotation] == "stopped"
	if cancel, beating := k.heartbeats[name]; beating && stopped {
		cancel()
		delete(k.heartbeats, name)
	} else if !beating && !stopped {
		beat, cancel := context.WithCancel(ctx)
		k.heartbeats[name] = cancel
		owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}
		go lease.NewController(clock.RealClock{}, k.client, name, 40, nil, heartbeatPeriod, name,
			corev1.NamespaceNodeLease, func(l *coordinationv1.Lease) error {
				l.OwnerReferences = []metav1.OwnerReference{owner}
				return nil
			}).Run(beat)
	}
	if node == nil {
		return 0, nil
	} else if stopped {
		return heartbeatPeriod, nil // Every Node is synced again after heartbeatPeriod.
	}
	mode := node.Annotations[kubeletAnnotation]
	now := metav1.Now()
	_, ready := nodeutil.GetNodeCondition(&node.Status, corev1.NodeReady)
	wantReady := corev1.ConditionTrue
	reason, message := "KubeletReady", "kubelet is posting ready status"
	if mode == "not-ready" {
		wantReady = corev1.ConditionFalse
		reason, message = "KubeletNotReady", "container runtime is down"
	}
	if ready != nil && ready.Status == wantReady && ready.Reason == reason && len(node.Status.Addresses) > 0 &&
		now.Sub(ready.LastHeartbeatTime.Time) < nodeStatusPeriod {
		return heartbeatPeriod, nil // up to date, and not yet due
	}
	updated := node.DeepCopy()
	updated.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		{Type: corev1.NodeReady, Status: wantReady, Reason: reason, Message: message},
	}
	for i, c := range updated.Status.Conditions {
		updated.Status.Conditions[i].LastHeartbeatTime = now
		updated.Status.Conditions[i].LastTransitionTime = now
		if _, old := nodeutil.GetNodeCondition(&node.Status, c.Type); old != nil && old.Status == c.Status {
			updated.Status.Conditions[i].LastTransitionTime = old.LastTransitionTime
		}
	}
	updated.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: nodeIP(node)},
		{Type: corev1.NodeHostName, Address: node.Name},
	}
	updated.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion: version.Get().GitVersion, OperatingSystem: "linux", Architecture: "amd64",
		OSImage: "localkube (no containers run here)", ContainerRuntimeVersion: "localkube://0",
		KernelVersion: "0.0.0", MachineID: node.Name, SystemUUID: string(node.UID), BootID: string(node.UID),
	}
	updated.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	_, err = k.client.CoreV1().Nodes().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err == nil && mode != "not-ready" {
		// A node that turns Ready again lets its Pods be driven again.
		pods, _ := k.pods.List(labels.Everything())
		for _, pod := range pods {
			if pod.Spec.NodeName == node.Name {
				k.podQ.Add(pod.Namespace + "/" + pod.Name)
			}
		}
	}
	return heartbeatPeriod, err
}

// -- Pods --------------------------------------------------------------------------

func (k *kubelet) syncPod(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := k.pods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	node, err := k.nodes.Get(pod.Spec.NodeName)
	if err != nil {
		return 0, nil // not one of ours (or gone): nobody runs it
	}
	mode := node.Annotations[kubeletAnnotation]
	if mode == "stopped" {
		return 0, nil
	}
	now := time.Now()
	st := k.podState(pod, now)

	if pod.DeletionTimestamp != nil {
		return k.terminate(ctx, pod, st, now)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0, nil
	}
	if pod.Status.StartTime == nil {
		if mode == "not-ready" {
			return 0, nil
		}
		return 0, k.start(ctx, pod, node, st, now)
	}
	if token := pod.Annotations[restartKey]; token != st.restartToken {
		st.restartToken = token
		var only sets.Set[string] // nil: every container
		if raw, ok := pod.Annotations[restartOnlyKey]; ok {
			only = sets.New(strings.Split(strings.ReplaceAll(raw, " ", ""), ",")...)
		}
		return 0, k.exit(ctx, pod, st, now, 137, only, false)
	}
	run, ok := durationAnnotation(pod, runSecondsKey)
	if !ok {
		return 0, nil
	}
	due := st.started.Add(run)
	if now.Before(due) {
		return due.Sub(now), nil
	}
	return 0, k.exit(ctx, pod, st, now, exitCodeFor(pod, st.attempt), nil, false)
}

func (k *kubelet) podState(pod *corev1.Pod, now time.Time) *podState {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.state[pod.UID]
	if !ok {
		st = &podState{started: now, restartToken: pod.Annotations[restartKey]}
		if job := pod.Labels[jobUIDLabel]; job != "" {
			if k.jobPods[job] == nil {
				k.jobPods[job] = map[types.UID]int{}
			}
			seen := k.jobPods[job]
			if _, ok := seen[pod.UID]; !ok {
				seen[pod.UID] = len(seen)
			}
			st.attempt = seen[pod.UID]
		}
		k.state[pod.UID] = st
	}
	return st
}

// start: the containers are pulled and running, the Pod Ready. The status update
// comes back through the informer, and that sync schedules the container's exit.
func (k *kubelet) start(ctx context.Context, pod *corev1.Pod, node *corev1.Node, st *podState, now time.Time) error {
	updated := pod.DeepCopy()
	t := metav1.NewTime(now)
	updated.Status.Phase = corev1.PodRunning
	updated.Status.StartTime = &t
	updated.Status.HostIP = nodeIP(node)
	updated.Status.HostIPs = []corev1.HostIP{{IP: updated.Status.HostIP}}
	updated.Status.PodIP = k.podIP(node)
	updated.Status.PodIPs = []corev1.PodIP{{IP: updated.Status.PodIP}}
	updated.Status.Conditions = podConditions(t, corev1.ConditionTrue)
	updated.Status.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		updated.Status.InitContainerStatuses = append(updated.Status.InitContainerStatuses,
			corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "localkube://" + c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					Reason: "Completed", StartedAt: t, FinishedAt: t,
				}}})
	}
	updated.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		updated.Status.ContainerStatuses = append(updated.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "localkube://" + c.Image,
			ContainerID: containerID(pod, c.Name, 0), Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
	if _, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return err
	}
	st.started = now
	return nil
}

// exit: the containers (those in only, when not nil) ended with code. restartPolicy
// decides between a restart (restartCount+1, lastState) and a terminated state (always
// for a Pod being deleted); the Pod reaches a terminal phase once none of its
// containers runs. As for start, the sync that the update brings schedules a restarted
// container's next exit.
func (k *kubelet) exit(ctx context.Context, pod *corev1.Pod, st *podState, now time.Time, code int32,
	only sets.Set[string], deleting bool) error {
	updated := pod.DeepCopy()
	t := metav1.NewTime(now)
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	restart := !deleting && (pod.Spec.RestartPolicy == corev1.RestartPolicyAlways ||
		(pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && code != 0))
	for i, c := range updated.Status.ContainerStatuses {
		if only != nil && !only.Has(c.Name) {
			continue
		}
		started := metav1.NewTime(st.started)
		if c.State.Running != nil {
			started = c.State.Running.StartedAt
		}
		term := &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, StartedAt: started, FinishedAt: t, ContainerID: c.ContainerID,
		}
		if restart {
			c.LastTerminationState = corev1.ContainerState{Terminated: term}
			c.RestartCount++
			c.ContainerID = containerID(pod, c.Name, c.RestartCount)
			c.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}
			c.Ready = true
		} else {
			c.State = corev1.ContainerState{Terminated: term}
			c.Ready = false
			c.Started = ptr.To(false)
		}
		updated.Status.ContainerStatuses[i] = c
	}
	if !restart && !slices.ContainsFunc(updated.Status.ContainerStatuses,
		func(c corev1.ContainerStatus) bool { return c.State.Running != nil }) {
		updated.Status.Phase = corev1.PodSucceeded
		updated.Status.Conditions = podConditions(t, corev1.ConditionFalse)
		if code != 0 {
			updated.Status.Phase, updated.Status.Reason = corev1.PodFailed, ""
		}
	}
	if _, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return err
	}
	st.started = now
	return nil
}

// terminate plays a graceful deletion: SIGTERM, the container exits after
// stop-seconds (at most the grace period), the Pod reaches a terminal phase,
// then the kubelet removes it from the API.
func (k *kubelet) terminate(ctx context.Context, pod *corev1.Pod, st *podState,
	now time.Time) (time.Duration, error) {
	if st.stopRequested.IsZero() {
		st.stopRequested = now
	}
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if !terminal && pod.Status.StartTime != nil {
		stop, ok := durationAnnotation(pod, stopSecondsKey)
		if !ok {
			stop = defaultStop
		}
		if grace := pod.DeletionGracePeriodSeconds; grace != nil {
			stop = min(stop, time.Duration(*grace)*time.Second)
		}
		due := st.stopRequested.Add(stop)
		if now.Before(due) {
			return due.Sub(now), nil
		}
		// SIGTERM's exit code: the Pod fails.
		if err := k.exit(ctx, pod, st, now, 143, nil, true); err != nil {
			return 0, err
		}
	}
	err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: ptr.To(pod.UID)},
	})
	if err == nil || apierrors.IsNotFound(err) {
		k.mu.Lock()
		delete(k.state, pod.UID)
		k.mu.Unlock()
		return 0, nil
	}
	if apierrors.IsConflict(err) {
		return 0, nil // a finalizer (the Job controller's) still holds it; the update re-queues us
	}
	return 0, err
}

func (k *kubelet) podIP(node *corev1.Node) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	index, _ := strconv.Atoi(node.Annotations[indexKey])
	k.nextIP[node.Name]++
	return fmt.Sprintf("10.244.%d.%d", index, 2+k.nextIP[node.Name]%250)
}

func nodeIP(node *corev1.Node) string {
	index, _ := strconv.Atoi(node.Annotations[indexKey])
	return fmt.Sprintf("10.240.0.%d", 4+index)
}

func podConditions(t metav1.Time, ready corev1.ConditionStatus) []corev1.PodCondition {
	return []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: ready, LastTransitionTime: t},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t},
		{Type: corev1.PodReady, Status: ready, LastTransitionTime: t},
		{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: t},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t},
	}
}

func containerID(pod *corev1.Pod, name string, restart int32) string {
	return fmt.Sprintf("localkube://%s-%s-%d", pod.UID, name, restart)
}

// durationAnnotation reads an annotation in seconds (false: absent or invalid).
func durationAnnotation(pod *corev1.Pod, key string) (time.Duration, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(pod.Annotations[key]), 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return time.Duration(v * float64(time.Second)), true
}

func exitCodeFor(pod *corev1.Pod, attempt int) int32 {
	if raw, ok := pod.Annotations[exitCodesKey]; ok {
		codes := strings.Split(raw, ",") // the last one for every later attempt
		if v, err := strconv.Atoi(strings.TrimSpace(codes[min(attempt, len(codes)-1)])); err == nil {
			return int32(v)
		}
	}
	v, _ := strconv.Atoi(strings.TrimSpace(pod.Annotations[exitCodeKey])) // absent or invalid: 0
	return int32(v)
}
