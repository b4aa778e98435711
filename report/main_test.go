package report

import (
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestMain fails the run when the tests left files or processes behind.
func TestMain(m *testing.M) { testutil.Main(m) }
