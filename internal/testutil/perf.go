package testutil

import (
	"os/exec"
	"strconv"
	"strings"
)

// PerfSamples returns how many samples a perf.data file holds (`perf
// report --stats`, "SAMPLE events"), so that a benchmark beside perf can
// say how much work perf was given.
func PerfSamples(perf, data string) (int, error) {
	out, err := exec.Command(perf, "report", "-i", data, "--stats").Output()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "SAMPLE" && f[1] == "events:" {
			return strconv.Atoi(f[2])
		}
	}
	return 0, nil
}
