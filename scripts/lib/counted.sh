# Sourced by the test scripts. `counted N COMMAND...` runs a `cargo test` command, shows its
# output, and fails unless it executed exactly N tests (passed + failed over every test binary
# it ran): a renamed test or a changed filter would otherwise run none and pass.
counted() {
    local want=$1
    shift
    local log ran
    log=$(mktemp)
    # A failing run stops the calling script here (set -e with pipefail).
    "$@" 2>&1 | tee "$log"
    ran=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log" | awk '{n += $1 + $2} END {print n + 0}')
    rm -f "$log"
    if [ "$ran" != "$want" ]; then
        echo "$(basename "$0"): '$*' ran $ran tests, expected $want (a test renamed or a filter changed?)" >&2
        return 1
    fi
}
