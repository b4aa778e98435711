package model

import "testing"

func TestResultTopFinding(t *testing.T) {
	var r *Result
	if _, ok := r.TopFinding(); ok {
		t.Error("nil result has a finding")
	}
	r = &Result{Info: Info{Findings: []Finding{{Kind: FindingDeadlock, Summary: "first"}, {Kind: FindingHotThread}}}}
	if f, ok := r.TopFinding(); !ok || f.Summary != "first" {
		t.Errorf("TopFinding = %+v, %v", f, ok)
	}
}
