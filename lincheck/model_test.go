package main

import (
	"testing"
	"time"
)

const s = int64(time.Second)

var cfg = Settings{Ceiling: 2, GraceNanos: 300 * s, SkewNanos: 1 * s, ControllerUsers: []string{"ctl"}}

func lease(call, ret int64, holder, user string) Recorded {
	return Recorded{Input: Input{Kind: "lease", Call: call, Return: ret, Holder: holder, User: user, Duration: 5 * s}}
}

func create(client int, call, ret int64, name, app, id, user string, admitted bool, stages ...string) Recorded {
	return Recorded{Client: client, Input: Input{Kind: "create", Call: call, Return: ret, User: user,
		Job: Job{Name: name, App: app, ID: id, Stages: stages, Created: ret}}, Output: Output{Admitted: admitted}}
}

func run(t *testing.T, ops ...Recorded) string {
	t.Helper()
	return check(History{Name: t.Name(), Settings: cfg, Operations: ops}, 10*time.Second, "").Result
}

func TestTwoFirstJobsAtOnceAtOneBelowTheCeilingAdmitOne(t *testing.T) {
	base := []Recorded{lease(0, 1, "h", "alice"), create(0, 2, 3, "a", "blast", "A", "alice", true)}
	one := append(append([]Recorded{}, base...),
		create(1, 10, 20, "b", "submit", "B", "alice", true), create(2, 10, 20, "c", "submit", "C", "alice", false))
	if got := run(t, one...); got != "Ok" {
		t.Fatalf("one admitted: %s", got)
	}
	both := append(append([]Recorded{}, base...),
		create(1, 10, 20, "b", "submit", "B", "alice", true), create(2, 10, 20, "c", "submit", "C", "alice", true))
	if got := run(t, both...); got != "Illegal" {
		t.Fatalf("both admitted: %s", got)
	}
}

func TestAFinishBetweenTwoOpeningsMakesBothLegalOnlyIfItCanComeFirst(t *testing.T) {
	ops := []Recorded{lease(0, 1, "h", "alice"), create(0, 2, 3, "a", "blast", "A", "alice", true),
		create(0, 4, 5, "b", "blast", "B", "alice", true),
		{Client: 3, Input: Input{Kind: "finish", Call: 30, Return: 40, Job: Job{Name: "a"}}},
		create(1, 35, 50, "c", "submit", "C", "alice", true)}
	if got := run(t, ops...); got != "Ok" {
		t.Fatalf("finish overlapping the admission: %s", got)
	}
	ops[4] = create(1, 10, 20, "c", "submit", "C", "alice", true)
	if got := run(t, ops...); got != "Illegal" {
		t.Fatalf("admitted before the finish began: %s", got)
	}
}

func TestGateAUsesTheWritesTimesNotAStamp(t *testing.T) {
	ops := []Recorded{lease(0, 1*s, "h", "alice"), create(0, 8*s, 9*s, "a", "submit", "A", "alice", true)}
	if got := run(t, ops...); got != "Illegal" {
		t.Fatalf("admitted after expiry + skew: %s", got)
	}
	ops[1] = create(0, 5*s, 9*s, "a", "submit", "A", "alice", true)
	if got := run(t, ops...); got != "Ok" {
		t.Fatalf("admitted within the hold: %s", got)
	}
	ops[1] = create(0, 2*s, 3*s, "a", "submit", "A", "bob", true)
	if got := run(t, ops...); got != "Illegal" {
		t.Fatalf("admitted for another user: %s", got)
	}
}

func TestTwoSearchesStagingOneDatabase(t *testing.T) {
	ops := []Recorded{lease(0, 1, "h", "alice"),
		create(1, 10, 20, "s1", "setup", "A", "alice", true, "nt"), create(2, 10, 20, "s2", "setup", "B", "alice", true, "nt")}
	if got := run(t, ops...); got != "Illegal" {
		t.Fatalf("two stagings of nt: %s", got)
	}
	ops[2] = create(2, 10, 20, "s2", "setup", "A", "alice", true, "nt")
	if got := run(t, ops...); got != "Ok" {
		t.Fatalf("one search staging nt on two nodes: %s", got)
	}
}

func TestAFinalizerPastItsGraceHoldsNoSlotButIsNotTheControllersToDelete(t *testing.T) {
	ops := []Recorded{lease(0, 1, "h", "alice"),
		create(0, 2, 3, "w", "submit", "A", "alice", true),
		create(0, 4, 5, "f", "finalizer", "A", "alice", true),
		create(0, 6, 7, "b", "submit", "B", "alice", true),
		{Input: Input{Kind: "finish", Call: 8, Return: 9, Job: Job{Name: "w"}}},
		{Input: Input{Kind: "delete", Call: 10, Return: 11, User: "ttl", Job: Job{Name: "w"}}},
		lease(20, 21, "h", "alice"),
		create(1, 400*s, 400*s+1, "c", "submit", "C", "alice", true)}
	ops[6] = lease(400*s-2, 400*s-1, "h", "alice")
	if got := run(t, ops...); got != "Ok" {
		t.Fatalf("a finishing finalizer past the grace counted: %s", got)
	}
	ops = append(ops, Recorded{Input: Input{Kind: "delete", Call: 500 * s, Return: 501 * s, User: "ctl", Job: Job{Name: "f"}}})
	if got := run(t, ops...); got != "Illegal" {
		t.Fatalf("the controller deleted a running finalizer with batch work: %s", got)
	}
}
