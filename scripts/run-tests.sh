#!/usr/bin/env bash
# Runs the built test suite (`swift test --skip-build ARGS`) under a watchdog.
#
# A test that hangs would otherwise stop the run silently until CI's own time runs out, with
# nothing said about which test it was. After APPBOX_TEST_TIMEOUT seconds (default 2400: the
# suite takes about 5 minutes here) the watchdog prints the tests that started and never
# finished, the process tree, and every thread's stack of the test process (when gdb is
# there), then ends the run, which then fails.
set -uo pipefail
cd "$(dirname "$0")/.."

limit=${APPBOX_TEST_TIMEOUT:-2400}
tests="^$PWD/.build/.*PackageTests.xctest"  # this checkout's test process only
# Swift Testing's event stream (one JSON object per line, written as each event happens)
# tells which tests started and never ended; the console output cannot: into a pipe it is
# buffered 4 KiB at a time, so a hung run's log ends mid-line, well before where it stopped.
events=$(mktemp /tmp/appbox-test-events.XXXXXX)

# The IDs of tests started and not ended (suites left out).
unfinished() {
  sed -n 's/.*"kind":"testStarted".*"testID":"\([^"]*\)".*/+ \1/p; s/.*"kind":"testEnded".*"testID":"\([^"]*\)".*/- \1/p' "$events" |
    awk '{ open[$2] += ($1 == "+") ? 1 : -1 } END { for (id in open) if (open[id] > 0 && id ~ /\//) print "  " id }' |
    sed 's|\\/|/|g' | sort
}

"${SWIFT:-swift}" test --skip-build --event-stream-output-path "$events" --event-stream-version 0 "$@" &
runner=$!

# The report goes to a file and is printed after the run's own output, so that the end of
# the log (all a CI page may show) says what hung: stacks first, the hung tests last.
report=$(mktemp /tmp/appbox-test-hang.XXXXXX)
trap 'rm -f "$events" "$report"' EXIT
(
  sleep "$limit"
  kill -0 "$runner" 2>/dev/null || exit 0
  {
    for pid in $(pgrep -f "$tests"); do
      if command -v gdb >/dev/null; then
        echo "Threads of the test process $pid:"
        timeout 120 gdb -p "$pid" -batch -ex 'thread apply all bt 30' 2>/dev/null | grep -E '^(Thread|#)' | cut -c1-200
      fi
    done
    echo "Processes:"
    ps -eo pid,ppid,stat,etimes,wchan:24,args --forest | grep -v ' ps -eo ' | sed 's/^/  /' | cut -c1-220
    echo "Tests started and not finished:"
    unfinished
    echo "run-tests.sh: the test run went on for ${limit} s and was stopped as hung (APPBOX_TEST_TIMEOUT)."
  } > "$report"
  pkill -TERM -f "$tests"
  sleep 5
  pkill -KILL -f "$tests"
) >/dev/null 2>&1 &  # not on the run's output: a stray sleep must not hold CI's pipe open
watchdog=$!
disown "$watchdog"  # no "Terminated" notice when it is stopped

wait "$runner"
status=$?
sleeper=$(pgrep -P "$watchdog")
kill "$watchdog" 2>/dev/null  # before its sleep, or it reports the sleep "Terminated"
[ -z "$sleeper" ] || kill $sleeper 2>/dev/null
wait "$watchdog" 2>/dev/null
if [ -s "$report" ]; then
  cat "$report" >&2
  [ "$status" -ne 0 ] || status=1
fi
exit "$status"
