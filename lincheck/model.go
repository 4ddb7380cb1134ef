// Package main checks recorded elb-gate histories for linearizability against a
// sequential model of the gates written from docs/design.md.
//
// The model is one namespace: its Jobs (as the census sees them), its submit Lease,
// and the searches whose batch work was admitted. Operations are what the API
// server did, with its own times: a Job create's admission (call = the request
// received, return = the answer), a Job finishing (from the watch), a Job deleted,
// a Lease write. A history is linearizable when some order of its operations,
// each placed between its call and its return, is a run of the model in which
// every admitted create was one the gates allow.
//
// Refusals are always legal (the gates fail closed: a refusal for an unreadable
// state is correct); what the model rules out is an admission the design forbids,
// a takeover of an unexpired hold, and the controller deleting a running search's
// finalizer. Time bounds lean towards allowing: a hold expires no earlier than
// its write's answer plus its duration plus the skew, a finalizer is young only if
// it is still young at the answer.
package main

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Settings are the gates' settings the history ran with.
type Settings struct {
	Ceiling         int      `json:"ceiling"`
	GraceNanos      int64    `json:"grace_ns"`
	SkewNanos       int64    `json:"skew_ns"`
	ControllerUsers []string `json:"controller_users"`
}

// Job is a Job as the census reads it.
type Job struct {
	Name    string   `json:"name"`
	App     string   `json:"app"`
	ID      string   `json:"id"`
	Stages  []string `json:"stages"`
	Created int64    `json:"created_ns"`
	// Finished is set by a finish operation.
	Finished bool `json:"-"`
}

// Input is one operation's request.
type Input struct {
	Kind     string `json:"kind"` // create | finish | delete | lease
	Job      Job    `json:"job"`
	User     string `json:"user"`
	Call     int64  `json:"call"`
	Return   int64  `json:"return"`
	Holder   string `json:"holder"`
	Duration int64  `json:"duration_ns"`
}

// Output is one operation's answer: for a create, whether it was admitted.
type Output struct {
	Admitted bool   `json:"admitted"`
	Answer   string `json:"answer"`
}

var searchApps = map[string]bool{"setup": true, "submit": true, "blast": true, "finalizer": true}

type state struct {
	jobs map[string]Job
	// The submit Lease: holder, the user whose write made it the holder, and the
	// latest the hold can expire (answer of the last write by it + duration).
	holder    string
	user      string
	renewCall int64
	duration  int64
	expires   int64
	// Searches whose setup/submit/blast Job was admitted (the batch-work evidence).
	work map[string]bool
	key  string
}

func (s *state) clone() *state {
	n := &state{jobs: make(map[string]Job, len(s.jobs)), work: make(map[string]bool, len(s.work)),
		holder: s.holder, user: s.user, renewCall: s.renewCall, duration: s.duration, expires: s.expires}
	for k, v := range s.jobs {
		n.jobs[k] = v
	}
	for k := range s.work {
		n.work[k] = true
	}
	return n
}

func (s *state) seal() *state {
	names := make([]string, 0, len(s.jobs))
	for k := range s.jobs {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		j := s.jobs[k]
		fmt.Fprintf(&b, "%s:%v;", k, j.Finished)
	}
	ids := make([]string, 0, len(s.work))
	for k := range s.work {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	fmt.Fprintf(&b, "|%s|%s|%d|%d|%d|%s", s.holder, s.user, s.renewCall, s.duration, s.expires, strings.Join(ids, ","))
	s.key = b.String()
	return s
}

// searchKey is the search a Job belongs to ("" for none): its elb-job-id, else a
// search of its own, except a setup Job without one (part of the holder's submit).
func searchKey(j Job) string {
	if !searchApps[j.App] {
		return ""
	}
	if j.ID != "" {
		return j.ID
	}
	if j.App == "setup" {
		return ""
	}
	return j.App + "/" + j.Name
}

// active is the set of active searches at time `at` (design: Census): an unfinished
// setup/submit/blast Job, or an unfinished finalizer that is live (an unfinished
// companion exists, or it is younger than the grace, or its age is unknown).
func active(s *state, cfg Settings, at int64) map[string]bool {
	out := map[string]bool{}
	for _, j := range s.jobs {
		if k := searchKey(j); k != "" && !j.Finished && j.App != "finalizer" {
			out[k] = true
		}
	}
	for _, j := range s.jobs {
		k := searchKey(j)
		if k == "" || j.Finished || j.App != "finalizer" || out[k] {
			continue
		}
		if j.Created == 0 || at-j.Created < cfg.GraceNanos {
			out[k] = true
		}
	}
	return out
}

// staging reports a search other than `id` with an unfinished setup Job staging db.
func staging(s *state, db, id string) string {
	for _, j := range s.jobs {
		if j.App != "setup" || j.Finished || j.ID == id {
			continue
		}
		for _, d := range j.Stages {
			if d == db {
				return j.Name
			}
		}
	}
	return ""
}

func holds(s *state, cfg Settings, in Input) bool {
	return s.holder != "" && s.user == in.User && s.expires+cfg.SkewNanos > in.Call
}

func isController(cfg Settings, user string) bool {
	for _, u := range cfg.ControllerUsers {
		if u == user {
			return true
		}
	}
	return false
}

// admissible says why an admitted create was not allowed ("" when it was).
func admissible(s *state, cfg Settings, in Input) string {
	j := in.Job
	if !searchApps[j.App] {
		return ""
	}
	if j.App == "finalizer" && j.ID == "" {
		return "a finalizer without elb-job-id admitted"
	}
	// Finalizer age is judged at the answer: younger then, younger throughout.
	act := active(s, cfg, in.Return)
	key := searchKey(j)
	opens := key != "" && !act[key]
	needsA := opens || j.App == "finalizer" || key == ""
	if needsA && !holds(s, cfg, in) {
		return fmt.Sprintf("Gate A: %s is not the holder (holder %q of user %q)", in.User, s.holder, s.user)
	}
	if opens && len(act) >= cfg.Ceiling {
		ids := make([]string, 0, len(act))
		for k := range act {
			ids = append(ids, k)
		}
		sort.Strings(ids)
		return fmt.Sprintf("Gate B: opened %s at %d/%d active (%s)", key, len(act), cfg.Ceiling, strings.Join(ids, ", "))
	}
	if j.App == "setup" {
		for _, db := range j.Stages {
			if other := staging(s, db, j.ID); other != "" {
				return fmt.Sprintf("staging: %s stages %s while %s stages it", j.Name, db, other)
			}
		}
	}
	return ""
}

// step says why an operation cannot be taken in state s ("" when it can).
func step(s *state, cfg Settings, in Input, out Output) (string, *state) {
	switch in.Kind {
	case "create":
		if !out.Admitted {
			return "", s
		}
		if why := admissible(s, cfg, in); why != "" {
			return why, s
		}
		n := s.clone()
		n.jobs[in.Job.Name] = in.Job
		if in.Job.ID != "" && in.Job.App != "finalizer" && searchApps[in.Job.App] {
			n.work[in.Job.ID] = true
		}
		return "", n.seal()
	case "finish":
		j, ok := s.jobs[in.Job.Name]
		if !ok || j.Finished {
			return "", s
		}
		n := s.clone()
		j.Finished = true
		n.jobs[j.Name] = j
		return "", n.seal()
	case "delete":
		j, ok := s.jobs[in.Job.Name]
		if !ok {
			return "", s
		}
		if isController(cfg, in.User) && j.App == "finalizer" && !j.Finished && s.work[j.ID] {
			return fmt.Sprintf("the controller deleted the running finalizer %s of a search with batch work", j.Name), s
		}
		n := s.clone()
		delete(n.jobs, j.Name)
		return "", n.seal()
	case "lease":
		n := s.clone()
		switch {
		case in.Holder == "":
			n.holder, n.user, n.renewCall, n.expires = "", "", 0, 0
		case in.Holder == s.holder:
			n.renewCall, n.expires = in.Call, in.Return+in.Duration
		default:
			// A takeover only of a free or expired hold (Gate A): the hold expired no
			// earlier than its last write's request plus its duration.
			if s.holder != "" && s.renewCall+s.duration > in.Return {
				return fmt.Sprintf("takeover of %q by %q before it expired", s.holder, in.Holder), s
			}
			n.holder, n.user, n.renewCall, n.expires = in.Holder, in.User, in.Call, in.Return+in.Duration
		}
		n.duration = in.Duration
		return "", n.seal()
	}
	return "unknown operation " + in.Kind, s
}

// Model is the gates as a porcupine model.
func Model(cfg Settings) porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} {
			return (&state{jobs: map[string]Job{}, work: map[string]bool{}}).seal()
		},
		Step: func(st, input, output interface{}) (bool, interface{}) {
			why, next := step(st.(*state), cfg, input.(Input), output.(Output))
			return why == "", next
		},
		Equal: func(a, b interface{}) bool { return a.(*state).key == b.(*state).key },
		Hash: func(st interface{}) uint64 {
			h := fnv.New64a()
			h.Write([]byte(st.(*state).key))
			return h.Sum64()
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(Input), output.(Output)
			switch in.Kind {
			case "create":
				return fmt.Sprintf("create %s (%s %s) by %s -> %v %s", in.Job.Name, in.Job.App, in.Job.ID, in.User, out.Admitted, out.Answer)
			case "lease":
				return fmt.Sprintf("lease -> %q by %s", in.Holder, in.User)
			default:
				return fmt.Sprintf("%s %s by %s", in.Kind, in.Job.Name, in.User)
			}
		},
		DescribeState: func(st interface{}) string { return st.(*state).key },
	}
}
