#!/usr/bin/env bash
# cordon vs Cedar on the same 40-tenant egress decisions, in one run.
# Not part of CI (Cedar takes minutes to build); figures go to docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/policy-vs-cedar"
ROUNDS="${ROUNDS:-500}" cargo bench --bench vs_cedar
