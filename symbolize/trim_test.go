package symbolize

import (
	"os"
	"reflect"
	"testing"

	"github.com/stallwatch/stallwatch/model"
)

// Trim empties the caches once they pass their bound, and not before;
// what was named before is named the same after, and the locations
// handed out stay as they were.
func TestTrim(t *testing.T) {
	p := newTestProcess(t, os.Getpid(), testOptions{})
	pc := reflect.ValueOf(TestTrim).Pointer()
	var first []*model.Location
	for i := range 3000 {
		first = append(first, p.Locate(Addr{PC: uint64(pc) + uint64(i)}))
	}
	if p.Trim(4000) {
		t.Error("Trim(4000) emptied caches holding 3,000 locations")
	}
	if !p.Trim(1000) {
		t.Fatal("Trim(1000) kept caches holding 3,000 locations")
	}
	if p.Trim(1) {
		t.Error("a second Trim found the caches full")
	}
	for i, was := range first {
		again := p.Locate(Addr{PC: uint64(pc) + uint64(i)})
		if again == was || again.Name() != was.Name() || was.Name() == "" {
			t.Fatalf("%#x: %q after Trim (a new location: %v), %q before", pc+uintptr(i), again.Name(), again != was, was.Name())
		}
	}
	if got := first[0].Name(); got != "github.com/stallwatch/stallwatch/symbolize.TestTrim" {
		t.Errorf("the first address is named %q", got)
	}
}
