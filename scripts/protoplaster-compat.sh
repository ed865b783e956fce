#!/usr/bin/env bash
# Runs protoplaster's own API scripts (tests/test-api.sh, tests/test-api-multinode.sh), unchanged,
# against labgate through the scripts/protoplaster stand-in.
# Usage: scripts/protoplaster-compat.sh PROTOPLASTER_CHECKOUT
# Needs bash, curl and jq, and the ports the scripts use (5000, 2138, 2139) free; the multinode
# script works in /tmp/protoplaster, which is cleared first. test/testrun/protoplaster-standin.test.ts
# makes the same checks on ports of its own.
set -euo pipefail
src=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/tests" "$work/tests"
rm -rf /tmp/protoplaster
cd "$work"
export PATH="$here:$PATH"
for script in test-api.sh test-api-multinode.sh; do
  if bash "tests/$script" > "$work/$script.log" 2>&1; then
    echo "$script: passed"
  else
    echo "$script: FAILED"
    tail -30 "$work/$script.log"
    exit 1
  fi
done
