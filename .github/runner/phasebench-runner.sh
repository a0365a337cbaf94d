#!/usr/bin/env bash
# phasebench-runner.sh: keep one self-hosted runner serving, one job per registration, on a
# machine that is cleaned between jobs. docs/ci.md, "Runners that survive their first job".
#
# `./svc.sh install` with `config.sh --ephemeral` serves one job: the runner exits after it and
# the service stops. This supervisor runs as root (a systemd unit or a launchd daemon), never as
# the runner user, and loops. Each turn:
#   1. refuses to go on (exit 2) when the runner user can write the runner itself (its folder,
#      run.sh, bin/, externals/, .env, .path) or read the token file: one job could then replace
#      the runner of the next job, or register runners of its own;
#   2. resets what a job leaves behind: kills the runner user's processes, empties the work
#      folder, and removes the user's caches, Python user site, git config and temporary files
#      (or runs `--reset COMMAND` instead of the last part, e.g. to restore a VM snapshot);
#   3. asks GitHub for a just-in-time runner configuration (POST .../actions/runners/
#      generate-jitconfig) with the token in `--token-file`, passed to curl on stdin (never on a
#      command line, where `ps` shows it);
#   4. starts run.sh as the runner user with an emptied environment and the configuration in
#      ACTIONS_RUNNER_INPUT_JITCONFIG (the runner takes it out of its environment before any
#      job runs), and waits: the runner takes one job, exits, and GitHub removes it.
# A failed registration waits `--retry-wait` seconds (doubling, at most 600) and tries again.
#
# Usage (as root):
#   phasebench-runner.sh --url https://github.com/OWNER/REPO --dir /opt/actions-runner \
#     --user bench --name gpu-h100-0 --labels gpu,phasebench-ab --token-file /etc/phasebench/token
#   Optional: --group-id ID (the runner group; 1, "Default", for repository runners),
#   --reset COMMAND, --jobs N (stop after N jobs; 0, the default, never), --api-url URL
#   (GitHub Enterprise Server), --retry-wait SECONDS (default 30), --home DIR (the runner
#   user's home; default ~USER), --temp-dirs "DIR ..." (default "/tmp /var/tmp": the user's
#   files there are removed).
# The token: a fine-grained token with "Administration: write" on the repository (repository
# runners) or "Self-hosted runners: write" on the organisation, or a GitHub App installation's.
#
# PHASEBENCH_RUNNER_SUDO (default `sudo -n -u USER -H`) and PHASEBENCH_RUNNER_KILL (default
# `pkill -KILL -u USER`) say how to run a command as the runner user and how to end its
# processes; tests/ci/test_runner_loop.py replaces them, and a host without sudo can too.
# Bash 3.2 (macOS) compatible.
set -euo pipefail

url="" dir="" user="" name="" labels="" token_file="" group_id=1 reset="" jobs=0
api="https://api.github.com" retry_wait=30 home="" temp_dirs="/tmp /var/tmp"

die() { echo "phasebench-runner: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --url) url=$2 ;;
    --dir) dir=$2 ;;
    --user) user=$2 ;;
    --name) name=$2 ;;
    --labels) labels=$2 ;;
    --token-file) token_file=$2 ;;
    --group-id) group_id=$2 ;;
    --reset) reset=$2 ;;
    --jobs) jobs=$2 ;;
    --api-url) api=${2%/} ;;
    --retry-wait) retry_wait=$2 ;;
    --home) home=$2 ;;
    --temp-dirs) temp_dirs=$2 ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
  [ $# -ge 2 ] || die "$1 needs a value"
  shift 2
done

for option in url dir user name labels token_file; do
  [ -n "${!option}" ] || die "--${option//_/-} is required"
done
[[ "$user" =~ ^[a-z_][a-z0-9_.-]*$ ]] || die "--user $user is not a user name"
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "--name may hold letters, digits, . _ - only"
[[ "$labels" =~ ^[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*$ ]] || die "--labels: a,b,c"
[[ "$group_id$jobs$retry_wait" =~ ^[0-9]+$ ]] || die "--group-id, --jobs, --retry-wait: numbers"
if [[ "$url" =~ ^https://[^/]+/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)$ ]]; then
  scope="repos/${BASH_REMATCH[1]}/${BASH_REMATCH[2]}"
elif [[ "$url" =~ ^https://[^/]+/([A-Za-z0-9_.-]+)$ ]]; then
  scope="orgs/${BASH_REMATCH[1]}"
else
  die "--url must be https://HOST/OWNER/REPO or https://HOST/ORG"
fi
[ -x "$dir/run.sh" ] || die "$dir/run.sh is not there: unpack the runner into --dir first"
[ -f "$token_file" ] || die "--token-file $token_file does not exist"

uid=$(id -u "$user") || die "no user $user"
if [ "$uid" = "$(id -u)" ] && [ -z "${PHASEBENCH_RUNNER_KILL+set}" ]; then
  die "run this as root (or a supervisor account), not as the runner user $user"
fi
sudo_as=${PHASEBENCH_RUNNER_SUDO-sudo -n -u $user -H}
kill_all=${PHASEBENCH_RUNNER_KILL-pkill -KILL -u $user}
if [ -z "$home" ]; then home=$(eval "echo ~$user"); fi # $user is checked above: a plain name
as_user() { $sudo_as "$@"; }

# 1. What a job must not be able to change or read.
check_fences() {
  local path
  for path in "$dir" "$dir/run.sh" "$dir/run-helper.sh.template" "$dir/bin" "$dir/externals" \
    "$dir/bin/Runner.Listener" "$dir/bin/Runner.Worker" "$dir/.env" "$dir/.path"; do
    if [ -e "$path" ] && as_user test -w "$path"; then
      die "$user can write $path: make the runner's folder root's (docs/ci.md)"
    fi
  done
  if as_user test -r "$token_file"; then
    die "$user can read $token_file: it registers runners; make it readable by root only"
  fi
}

# 2. Nothing of the last job survives into the next.
reset_machine() {
  local file
  $kill_all || true # no process left: fine
  rm -rf "$dir/_work"
  mkdir -p "$dir/_work" "$dir/_diag"
  # The files the runner writes into its own (root's) folder; recreated empty, owned by USER.
  for file in .runner .credentials .credentials_rsaparams .jitconfig run-helper.sh; do
    rm -f "$dir/$file"
    : > "$dir/$file"
  done
  if [ -f "$dir/run-helper.sh.template" ]; then cp "$dir/run-helper.sh.template" "$dir/run-helper.sh"; fi
  chmod 755 "$dir/run-helper.sh"
  if [ "$(id -u)" = 0 ]; then # the runner user owns these only
    chown -R "$user" "$dir/_work" "$dir/_diag" "$dir/.runner" "$dir/.credentials" \
      "$dir/.credentials_rsaparams" "$dir/.jitconfig" "$dir/run-helper.sh"
  fi
  chmod 600 "$dir/.jitconfig"
  if [ -n "$reset" ]; then
    sh -c "$reset"
    return
  fi
  # Read by every later job: wheels, compiled kernels, the Python user site, git's hooks and
  # fsmonitor settings, macOS's per-user caches.
  for file in .cache .local .config/git .gitconfig .triton .nv Library/Caches Library/Python; do
    rm -rf "${home:?}/$file"
  done
  for file in $temp_dirs; do
    find "$file" -mindepth 1 -maxdepth 1 -user "$user" -exec rm -rf {} + 2> /dev/null || true
  done
}

# 3. A just-in-time configuration: one runner, one job.
jit_config() {
  local turn=$1 label labels_json="" body
  # shellcheck disable=SC2086 # the labels are checked above: letters, digits, . _ -
  for label in ${labels//,/ }; do labels_json="$labels_json${labels_json:+,}\"$label\""; done
  body=$(printf '{"name":"%s-%s-%s","runner_group_id":%s,"labels":[%s],"work_folder":"_work"}' \
    "$name" "$(date +%Y%m%d%H%M%S)" "$turn" "$group_id" "$labels_json")
  printf 'header = "Authorization: Bearer %s"\n' "$(tr -d '\r\n' < "$token_file")" |
    curl --silent --show-error --fail-with-body --max-time 60 --config - -X POST \
      -H "Accept: application/vnd.github+json" -H "X-GitHub-Api-Version: 2022-11-28" \
      --data "$body" "$api/$scope/actions/runners/generate-jitconfig" |
    python3 -I -S -c 'import json, sys; print(json.load(sys.stdin)["encoded_jit_config"])'
}

child=""
trap 'if [ -n "$child" ]; then kill "$child" 2> /dev/null || true; fi; exit 143' TERM INT

turn=0 wait_s=$retry_wait
while [ "$jobs" -eq 0 ] || [ "$turn" -lt "$jobs" ]; do
  check_fences
  reset_machine
  if ! jit_config "$((turn + 1))" > "$dir/.jitconfig"; then
    echo "phasebench-runner: no runner configuration from $api; again in $wait_s s" >&2
    sleep "$wait_s"
    wait_s=$((wait_s * 2 > 600 ? 600 : wait_s * 2))
    continue
  fi
  wait_s=$retry_wait
  turn=$((turn + 1))
  runner_path=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
  if [ -f "$dir/.path" ]; then runner_path=$(cat "$dir/.path"); fi
  echo "phasebench-runner: turn $turn: $name takes one job"
  # The configuration reaches the runner through a file only it can read (emptied once read)
  # and its environment, never a command line; sudo resets the rest of the environment.
  # shellcheck disable=SC2016 # expanded by the runner user's shell, from its arguments
  as_user /bin/sh -c 'ACTIONS_RUNNER_INPUT_JITCONFIG=$(cat "$1") && : > "$1" && PATH=$2 &&
    HOME=$4 && export ACTIONS_RUNNER_INPUT_JITCONFIG PATH HOME && exec "$3/run.sh"' \
    sh "$dir/.jitconfig" "$runner_path" "$dir" "$home" &
  child=$!
  status=0
  wait "$child" || status=$?
  child=""
  echo "phasebench-runner: turn $turn: run.sh exited $status"
done
