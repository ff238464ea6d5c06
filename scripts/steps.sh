# Sourced by scripts/test.sh and the scripts it runs. `step NAME` ends the previous step and
# starts the next one, printing each step's elapsed seconds and the CPU seconds (user + system)
# of the processes it ran, plus the seconds since the test run began, so every CI log shows
# where the time goes. On a shared machine the CPU seconds are the steadier figure.
export COREMLRT_TEST_START=${COREMLRT_TEST_START:-$(date +%s)}
_step_name=""
_step_start=0
_step_cpu=0
# CPU seconds of the finished child processes of this shell: the second line of `times`, which
# must run in this shell itself (in a command substitution it would count the subshell's
# children, none), so it writes to a file that awk then reads.
_step_times_file=$(mktemp)
_step_children_cpu() { awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] } printf "%d", t }' "$_step_times_file"; }
step() {
  local now cpu
  now=$(date +%s)
  times > "$_step_times_file"
  cpu=$(_step_children_cpu)
  if [ -n "$_step_name" ]; then
    echo "== step done: $_step_name: $((now - _step_start)) s elapsed, $((cpu - _step_cpu)) CPU s (at $((now - COREMLRT_TEST_START)) s)"
  fi
  _step_name=${1:-}
  _step_start=$now
  _step_cpu=$cpu
  if [ -n "$_step_name" ]; then echo "== step: $_step_name"; fi
}
# The last step ends with the script, whether it passes or fails.
trap 'step; rm -f "$_step_times_file"' EXIT
