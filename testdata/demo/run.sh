#!/usr/bin/env bash
# make demo: build stallwatch and the demo bank service, watch it with
# `stallwatch watch` until it deadlocks, and show the capture. STALLWATCH
# names another stallwatch binary (the tests' own build), DEMO_OUT another
# output directory. cmd/stallwatch's TestMakeDemo runs this script and
# checks what it prints; `make readme-demo` puts that in README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
sw=${STALLWATCH:-./bin/stallwatch}
out=${DEMO_OUT:-./stallwatch-captures/demo}
work=$(mktemp -d /tmp/stallwatch-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT

go build -o "$work/demo" ./testdata/demo
mkdir -p "$out"

echo "demo: the bank service beats $work/demo.beat every 200ms; after 3s its"
echo "      two transfer threads deadlock, the heartbeat stops, a reconciler spins."
echo "demo: stallwatch watch --heartbeat-file $work/demo.beat --stall-after 2s --capture-for 3s --out $out -- demo"
echo

before=$(ls -1 "$out" 2>/dev/null | wc -l)
set +e
"$sw" watch --heartbeat-file "$work/demo.beat" --stall-after 2s --capture-for 3s \
  --baseline-freq 49 --history 5s --out "$out" \
  -- "$work/demo" --heartbeat "$work/demo.beat" --healthy-for 3s &
watch=$!
set -e

# A capture directory appears complete (it is renamed into place when
# written): wait for the first new one, then stop the watchdog.
dir=""
for _ in $(seq 1 300); do
  if ! kill -0 "$watch" 2>/dev/null; then
    wait "$watch"; status=$?
    if [ "$status" = 3 ]; then
      echo
      echo "demo: stallwatch needs permission to sample another process. Run one of:"
      echo "  sudo make demo"
      echo "  sudo setcap cap_perfmon,cap_sys_admin,cap_sys_ptrace,cap_syslog+ep $sw && make demo"
      echo "  sudo sysctl kernel.perf_event_paranoid=1   # then: make demo (user frames of your own processes)"
    fi
    exit "$status"
  fi
  dir=$(ls -1dt "$out"/*-stall 2>/dev/null | head -1 || true)
  if [ -n "$dir" ] && [ "$(ls -1 "$out" | wc -l)" -gt "$before" ]; then
    break
  fi
  dir=""
  sleep 0.1
done
kill -TERM "$watch" 2>/dev/null || true
wait "$watch" || true

if [ -z "$dir" ]; then
  echo "demo: no capture appeared within 30s" >&2
  exit 1
fi
echo
echo "demo: the capture is in $dir"
ls -l "$dir"
echo
sed -n '1,45p' "$dir/report.txt"
echo "  … (the whole report: $dir/report.txt, or open $dir/report.html)"
echo
echo "demo: explore it:"
echo "  go tool pprof -top $dir/profile.pb.gz"
echo "  go tool pprof -http=: $dir/profile.pb.gz"
echo "  ./bin/stallwatch report $dir"
