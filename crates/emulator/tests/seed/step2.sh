#!/usr/bin/env bash
# Step 2 of the SUNK integration guide (docs/facts/sunk-guide.md#step-2), run against the emulator.
# The three commands of the guide are verbatim except for the host (https://api.coreweave.com →
# $CWSANDBOX_BASE_URL) and [RUNNER-ID] → $RUNNER_ID. The checks after them are ours.
# Needs: curl, jq; TOKEN (sandbox_admin), USER_TOKEN (sandbox_user only), RUNNER_ID,
# CWSANDBOX_BASE_URL. Runs in a scratch directory.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

# --- the guide, verbatim ---------------------------------------------------------------------
curl --fail-with-body --silent --show-error -X POST \
  "$CWSANDBOX_BASE_URL/coreweave.sandbox.v1.RunnerManagementService/GetManagedRunner" \
  -H "Authorization: Bearer $TOKEN" \
  -H "Content-Type: application/json" \
  -H "Connect-Protocol-Version: 1" \
  --data '{"runnerId": "'"$RUNNER_ID"'"}' \
  -o runner.json

jq -e '
  if .policy == null or .etag == null then
    error("Read a configured runner policy and its etag before updating")
  else . end |
  .policy.base.spec.schedulerName = "slurm-scheduler" |
  {
    runnerId: .identity.runnerId,
    managedRunner: {identity: .identity, policy: .policy, etag: .etag},
    updateMask: "policy"
  }' runner.json > runner-policy-update.json

curl --fail-with-body -X POST \
  "$CWSANDBOX_BASE_URL/coreweave.sandbox.v1.RunnerManagementService/UpdateManagedRunner" \
  -H "Authorization: Bearer $TOKEN" \
  -H "Content-Type: application/json" \
  -H "Connect-Protocol-Version: 1" \
  --data-binary @runner-policy-update.json > updated.json
# ----------------------------------------------------------------------------------------------

jq -e '.policy.base.spec.schedulerName == "slurm-scheduler"' updated.json >/dev/null \
  || fail "the update did not set the scheduler name: $(cat updated.json)"
jq -e --slurpfile old runner.json '.etag != $old[0].etag' updated.json >/dev/null \
  || fail "a policy change must give a new etag"

# A Connect call that fails; prints the HTTP status, leaves the body in $1.
call() {
  local out=$1 method=$2 body=$3; shift 3
  curl --silent --show-error -o "$out" -w '%{http_code}' -X POST \
    "$CWSANDBOX_BASE_URL/coreweave.sandbox.v1.RunnerManagementService/$method" \
    -H "Content-Type: application/json" -H "Connect-Protocol-Version: 1" "$@" --data-binary "$body"
}

# The same update again carries the etag read before the first update: stale.
status=$(call stale.json UpdateManagedRunner @runner-policy-update.json -H "Authorization: Bearer $TOKEN")
[ "$status" = 400 ] || fail "stale etag: HTTP $status, want 400: $(cat stale.json)"
jq -e '.code == "failed_precondition" and (.message | test("etag is stale"))' stale.json >/dev/null \
  || fail "stale etag: $(cat stale.json)"
jq -e '.details | map(.type) | index("google.rpc.ErrorInfo") != null' stale.json >/dev/null \
  || fail "stale etag: no ErrorInfo detail: $(cat stale.json)"

# A sandbox_user token may not read the runner.
status=$(call denied.json GetManagedRunner '{"runnerId": "'"$RUNNER_ID"'"}' -H "Authorization: Bearer $USER_TOKEN")
[ "$status" = 403 ] || fail "user token: HTTP $status, want 403: $(cat denied.json)"
jq -e '.code == "permission_denied"' denied.json >/dev/null || fail "user token: $(cat denied.json)"

# No token at all.
status=$(call anonymous.json GetManagedRunner '{"runnerId": "'"$RUNNER_ID"'"}')
[ "$status" = 401 ] || fail "no token: HTTP $status, want 401: $(cat anonymous.json)"
jq -e '.code == "unauthenticated"' anonymous.json >/dev/null || fail "no token: $(cat anonymous.json)"

# An unknown JSON field is named in the error.
status=$(call unknown.json GetManagedRunner '{"runnerId": "'"$RUNNER_ID"'", "runnerIdd": "x"}' \
  -H "Authorization: Bearer $TOKEN")
[ "$status" = 400 ] || fail "unknown field: HTTP $status, want 400: $(cat unknown.json)"
jq -e '.details | map(.type) | index("google.rpc.BadRequest") != null' unknown.json >/dev/null \
  || fail "unknown field: no BadRequest: $(cat unknown.json)"
jq -e '.code == "invalid_argument" and (.message | contains("runnerIdd"))' unknown.json >/dev/null \
  || fail "unknown field: $(cat unknown.json)"

# A missing required field is named in a BadRequest.
status=$(call missing.json GetManagedRunner '{}' -H "Authorization: Bearer $TOKEN")
[ "$status" = 400 ] || fail "missing field: HTTP $status, want 400: $(cat missing.json)"
jq -e '.code == "invalid_argument" and (.message | contains("runner_id"))
       and (.details | map(.type) | index("google.rpc.BadRequest") != null)' missing.json >/dev/null \
  || fail "missing field: $(cat missing.json)"

echo "seed step 2: ok"
