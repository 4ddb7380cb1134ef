package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

// History is one recorded history: the settings it ran with and its operations.
type History struct {
	Name       string     `json:"name"`
	Kind       string     `json:"kind"`
	Settings   Settings   `json:"settings"`
	Operations []Recorded `json:"operations"`
}

// Recorded is one operation as the recorder wrote it.
type Recorded struct {
	Input  Input  `json:"input"`
	Output Output `json:"output"`
	Client int    `json:"client"`
}

// Verdict is what the checker found for one history.
type Verdict struct {
	Name       string   `json:"name"`
	Kind       string   `json:"kind"`
	Result     string   `json:"result"` // Ok | Illegal | Unknown
	Operations int      `json:"operations"`
	Why        []string `json:"why,omitempty"`
	Picture    string   `json:"picture,omitempty"`
}

func check(h History, timeout time.Duration, pictures string) Verdict {
	ops := make([]porcupine.Operation, len(h.Operations))
	for i, r := range h.Operations {
		ops[i] = porcupine.Operation{ClientId: r.Client, Input: r.Input, Call: r.Input.Call, Output: r.Output, Return: r.Input.Return}
	}
	model := Model(h.Settings)
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	v := Verdict{Name: h.Name, Kind: h.Kind, Result: string(res), Operations: len(ops)}
	if res == porcupine.Illegal {
		v.Why = explain(h, info)
		if pictures != "" {
			path := filepath.Join(pictures, h.Name+".html")
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				v.Picture = path
			}
		}
	}
	return v
}

// explain replays the longest legal prefix the checker found and names each
// operation that could not follow it, with the rule it breaks.
func explain(h History, info porcupine.LinearizationInfo) []string {
	var best []int
	for _, partition := range info.PartialLinearizations() {
		for _, lin := range partition {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	s := Model(h.Settings).Init().(*state)
	done := map[int]bool{}
	for _, i := range best {
		_, s = step(s, h.Settings, h.Operations[i].Input, h.Operations[i].Output)
		done[i] = true
	}
	var out []string
	for i, r := range h.Operations {
		if done[i] {
			continue
		}
		if why, _ := step(s, h.Settings, r.Input, r.Output); why != "" {
			out = append(out, why)
		}
	}
	return out
}

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "give up on one history after this long (result Unknown)")
	pictures := flag.String("pictures", "", "write porcupine's visualization of each illegal history into this directory")
	flag.Parse()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<28)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var h History
		if err := json.Unmarshal(in.Bytes(), &h); err != nil {
			fmt.Fprintln(os.Stderr, "lincheck: unreadable history:", err)
			os.Exit(2)
		}
		if err := out.Encode(check(h, *timeout, *pictures)); err != nil {
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "lincheck:", err)
		os.Exit(2)
	}
}
