package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/model"
)

// Helper processes: some tests need a snapshot taken by another process
// (one that is killed while it holds a thread stopped; one that runs as
// an unprivileged user). They re-run this test binary with
// SNAPSHOT_TEST_HELPER set; helperMain does the helper's work and reports
// whether it did.
const (
	helperEnv = "SNAPSHOT_TEST_HELPER"
	// helperHold: stop the thread SNAPSHOT_TEST_TID and never let go;
	// print "seized TID" once it is stopped.
	helperHold = "hold"
	// helperTake: take a snapshot and print it as JSON.
	helperTake = "take"
)

func helperMain() bool {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return false
	}
	pid, _ := strconv.Atoi(os.Getenv("SNAPSHOT_TEST_PID"))
	switch mode {
	case helperHold:
		hold, _ := strconv.Atoi(os.Getenv("SNAPSHOT_TEST_TID"))
		testHookStopped = func(tid int) {
			if tid == hold {
				fmt.Printf("seized %d\n", tid)
				time.Sleep(time.Hour)
			}
		}
		Take(context.Background(), pid, Options{})
	case helperTake:
		snap, err := Take(context.Background(), pid, Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		json.NewEncoder(os.Stdout).Encode(encodeHelper(snap))
	}
	os.Exit(0)
	return true
}

// helperSnapshot is what a helper reports of a snapshot: errors as text,
// and whether PtraceErr was a *perms.Error (a fix the user can apply).
type helperSnapshot struct {
	MaxStop        time.Duration
	PtraceUsed     bool
	PtraceErr      string
	PtraceErrPerms bool
	Threads        []helperThread
	Notes          []string
}

type helperThread struct {
	TID      int
	Name     string
	State    byte
	Stopped  bool
	Unwinder string
	User     []string // the user frames' names
	Lines    []model.Line
	Stop     time.Duration // at most
	StopHeld time.Duration // at least
}

func encodeHelper(snap *model.Snapshot) helperSnapshot {
	h := helperSnapshot{MaxStop: snap.MaxStop, PtraceUsed: snap.PtraceUsed, Notes: snap.Notes}
	if snap.PtraceErr != nil {
		h.PtraceErr = snap.PtraceErr.Error()
		var pe *perms.Error
		h.PtraceErrPerms = errors.As(snap.PtraceErr, &pe)
	}
	for _, t := range snap.Threads {
		h.Threads = append(h.Threads, helperThread{TID: t.TID, Name: t.Name, State: t.State,
			Stopped: t.Stopped, Unwinder: t.Unwinder, User: userNames(&t), Lines: userLines(&t), Stop: t.Stop, StopHeld: t.StopHeld})
	}
	return h
}
