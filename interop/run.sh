#!/bin/bash
# Runs the rxe-in-qemu interop suite (what `make interop` runs). Needs root.
#   interop/run.sh                  # the whole suite
#   interop/run.sh -run TestTwoVMs  # extra go test flags are passed on
# Environment: GOROCE_INTEROP_CACHE (VM image cache, default /var/cache/goroce-interop),
# GOROCE_INTEROP_IMAGE (use this directory's vmlinuz + initrd.gz, skip build-vm.sh),
# GOROCE_INTEROP_RECORD=DIR (also write the perftest captures to DIR), GOROCE_INTEROP_DEBUG=1
# (log every job's duration), CI=true (a test that cannot run fails instead of skipping).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/.."
bash "$here/setup.sh"
# Build (or find in the cache) the VM image up front so its time shows separately.
t0=$(date +%s)
bash "$here/build-vm.sh" > /dev/null
echo "interop/run.sh: VM image ready in $(( $(date +%s) - t0 )) s"
exec go test ./interop/ -count=1 -v -timeout 20m "$@"
