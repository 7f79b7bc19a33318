//! The catalogue of `google.rpc.ErrorInfo.reason` strings (domain `cwsandbox.com`) the emulator
//! sends, with when each happens and what the caller should do about it.
//!
//! It lives here, beside the generated messages, because it is part of the wire contract that
//! both sides see: the simulation and the emulator build errors with it, and the Rust client
//! parses the wire string back into it without depending on either. The status code each reason
//! travels with is the emulator's business (`crates/surface/src/errors.rs`), and
//! `docs/errors.md` is generated from both.

use std::fmt;
use std::str::FromStr;

/// Declares [`Reason`] from one table, so the variant, its wire string, its doc line, its
/// description and its remedy cannot drift apart.
macro_rules! reasons {
    ($($variant:ident => $wire:literal, when: $when:literal, remedy: $remedy:literal;)+) => {
        /// A stable, documented error code sent as `ErrorInfo.reason`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $(
                #[doc = $when]
                #[doc = ""]
                #[doc = concat!("Remedy: ", $remedy)]
                $variant,
            )+
        }

        impl Reason {
            /// Every reason, in catalogue order.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant),+];

            /// The wire string (`CWSANDBOX_SANDBOX_NOT_FOUND`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $wire,)+
                }
            }

            /// When the emulator sends this reason.
            pub fn description(self) -> &'static str {
                match self {
                    $(Reason::$variant => $when,)+
                }
            }

            /// What the caller should do about it.
            pub fn remedy(self) -> &'static str {
                match self {
                    $(Reason::$variant => $remedy,)+
                }
            }

            /// The reason with this wire string, if it is one of the catalogue.
            pub fn from_wire(wire: &str) -> Option<Reason> {
                match wire {
                    $($wire => Some(Reason::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

reasons! {
    InvalidRequest => "CWSANDBOX_INVALID_REQUEST",
        when: "The request is malformed: a field is missing, out of range or undecodable (a BadRequest names each field), or its body could not be read.",
        remedy: "Fix the fields the BadRequest violations name and send the request again; retrying it unchanged fails the same way.";
    RequestIdConflict => "CWSANDBOX_REQUEST_ID_CONFLICT",
        when: "A `request_id` already used came again with a different request body.",
        remedy: "Send the original body to get the original result, or use a new `request_id` for a different request.";
    SandboxNotFound => "CWSANDBOX_SANDBOX_NOT_FOUND",
        when: "No sandbox with that id is visible to the caller (it never existed, was deleted, or belongs to another organization).",
        remedy: "Check the `sandbox_id` and the organization of the token; list sandboxes to find the right one.";
    TemplateNotFound => "CWSANDBOX_TEMPLATE_NOT_FOUND",
        when: "No sandbox template with that id is visible to the caller (it never existed, belongs to another organization, or is deleted and `show_deleted` was not asked for); CreateSandboxFromTemplate also answers it for a deleted template.",
        remedy: "Check the template id and the organization of the token; ListSandboxTemplates shows the templates you can use.";
    RunnerNotFound => "CWSANDBOX_RUNNER_NOT_FOUND",
        when: "No runner with that id is visible to the caller.",
        remedy: "Check the runner id and the organization of the token; ListAvailableRunners shows the runners you can use.";
    RunnerUnavailable => "CWSANDBOX_RUNNER_UNAVAILABLE",
        when: "The runner exists but cannot take sandboxes now (it is not ready, or is being removed).",
        remedy: "Retry after the RetryInfo delay, or choose another runner.";
    NoSuitableRunner => "CWSANDBOX_NO_SUITABLE_RUNNER",
        when: "No runner matches the sandbox's mode and `runner_ids`.",
        remedy: "Name a runner that supports the requested mode in `runner_ids`, or create one.";
    RunnerCapacityExhausted => "CWSANDBOX_RUNNER_CAPACITY_EXHAUSTED",
        when: "The serverless pool has no room for the sandbox now: its organization holds `serverless.maxSandboxesPerOrganization` serverless sandboxes, or no serverless Node has the requested CPU and memory free.",
        remedy: "Retry after the RetryInfo delay (the client's `create_retry_budget_seconds`), spill over to CKS (`placement_spillover=\"serverless_then_cks\"`), or delete serverless sandboxes you no longer need.";
    ServerlessDisabled => "CWSANDBOX_SERVERLESS_DISABLED",
        when: "The sandbox asks for serverless placement and the values turn the serverless pool off (`serverless.enabled: false`).",
        remedy: "Use placement mode CKS with a runner, or turn the serverless pool on in the values.";
    PlacementRejected => "CWSANDBOX_PLACEMENT_REJECTED",
        when: "The runner's policy rejects the sandbox (a BadRequest names the fields the policy refuses).",
        remedy: "Change the named fields to what the runner's policy allows, or use a runner whose policy admits them.";
    ResourceCeilingExceeded => "CWSANDBOX_RESOURCE_CEILING_EXCEEDED",
        when: "The sandbox asks for more than a policy ceiling (`cpu_ceiling`, `memory_ceiling`), or for more than one serverless Node holds (`serverless.cpu`, `serverless.memory`; any GPU).",
        remedy: "Ask for no more than the ceiling, or have an administrator raise it in the runner's policy (for serverless: place it on CKS, where the client's spill-over takes it).";
    PreconditionFailed => "CWSANDBOX_PRECONDITION_FAILED",
        when: "A precondition does not hold: a stale etag, a state that does not allow the operation, or an invalid stored policy.",
        remedy: "Read the resource again (for its current etag and state) and decide whether to repeat the operation.";
    NotImplemented => "CWSANDBOX_NOT_IMPLEMENTED",
        when: "The RPC or option is not emulated (the metadata `method` names it).",
        remedy: "Do not rely on it against the emulator; use the real service, or an emulated alternative the README lists.";
    AlreadyExists => "CWSANDBOX_ALREADY_EXISTS",
        when: "The resource to create exists already.",
        remedy: "Use the existing resource, or create this one under another name.";
    FssNotFound => "CWSANDBOX_FSS_NOT_FOUND",
        when: "No file-system snapshot of that id is visible to the caller's organization (to read, delete or restore from).",
        remedy: "Check the id (ListFileSystemSnapshots lists the organization's snapshots); a deleted snapshot is gone.";
    FssNotReady => "CWSANDBOX_FSS_NOT_READY",
        when: "The snapshot is not READY: still being created (it cannot be deleted yet), or FAILED (it cannot be restored from).",
        remedy: "Wait until GetFileSystemSnapshot says READY, or take a new snapshot if it FAILED.";
    FssNotSupported => "CWSANDBOX_FSS_NOT_SUPPORTED",
        when: "File-system snapshots are turned off (values `fileSystemSnapshots.enabled: false`).",
        remedy: "Turn them on in the values, or do without snapshots.";
    FssQuotaExceeded => "CWSANDBOX_FSS_QUOTA_EXCEEDED",
        when: "The organization keeps as many snapshots as values `fileSystemSnapshots.maxPerOrganization` allows.",
        remedy: "Delete snapshots the organization no longer needs, or raise the setting.";
    VolumeInUse => "CWSANDBOX_VOLUME_IN_USE",
        when: "A volume still references the runner, so it cannot be removed; or sandboxes that have not ended mount the volume to delete.",
        remedy: "Delete or detach the volumes that reference the runner, or stop the sandboxes that mount the volume (or delete it with `force`), then retry.";
    VolumeNotFound => "CWSANDBOX_VOLUME_NOT_FOUND",
        when: "No registered volume of that id in the caller's organization (to read, change, delete or mount).",
        remedy: "Check the id (ListVolumes lists the organization's volumes), or register it with CreateVolume.";
    VolumeNotReady => "CWSANDBOX_VOLUME_NOT_READY",
        when: "The volume to mount is not READY: its check found no such runner, or no such claim in the runner's cluster for the organization (another organization's or another cluster's claim is not found) (ERROR, `state_reason` says which).",
        remedy: "Fix what `state_reason` names (the values' `persistentVolumeClaims`, their `clusterId` and `org`, the runner), then ValidateVolume.";
    VolumePlacementConflict => "CWSANDBOX_VOLUME_PLACEMENT_CONFLICT",
        when: "The sandbox's registered volumes are on different runners, or `runner_ids` leaves out the one its volumes are on.",
        remedy: "Mount volumes of one runner, and name that runner in `runner_ids` (or leave `runner_ids` empty).";
    VolumeRunnerIneligible => "CWSANDBOX_VOLUME_RUNNER_INELIGIBLE",
        when: "A serverless sandbox asks for a registered volume: a claim lives in a runner's cluster, which serverless placement does not use.",
        remedy: "Place the sandbox on the volume's runner (CKS), or use a scratch volume.";
    JobNotFound => "CWSANDBOX_JOB_NOT_FOUND",
        when: "No Slurm job with that id (Slurm's `Invalid job id specified`).",
        remedy: "Check the job id; squeue and sacct list the jobs that exist.";
    NodeNotFound => "CWSANDBOX_NODE_NOT_FOUND",
        when: "No Slurm node with that name (Slurm's `Invalid node name specified`).",
        remedy: "Check the node name; sinfo lists the nodes that exist.";
    PodNotFound => "CWSANDBOX_POD_NOT_FOUND",
        when: "No Pod with that namespace and name.",
        remedy: "Check the namespace and name; list the Pods to find the right one.";
    TenantNotFound => "CWSANDBOX_TENANT_NOT_FOUND",
        when: "No tenant of that organization was created at run time (EmulatorService DeleteTenant), or the organization is a configured one.",
        remedy: "ListTenants names the tenants; configured organizations end only with the emulator.";
    SecretNotFound => "CWSANDBOX_SECRET_NOT_FOUND",
        when: "A container's `secret_stores` or `image_pull_credentials` names a store the organization does not have (SettingsService, seeded from the values' `secretStores`), or a secret path or field the store does not hold (a store's secrets are the values' `secretStores.<name>.secrets`); the message names the field.",
        remedy: "Create the store (CreateSecretStore) and give it secrets in the values' `secretStores`, or fix the reference.";
    SecretStoreNotFound => "CWSANDBOX_SECRET_STORE_NOT_FOUND",
        when: "No secret store of that name in the caller's organization (SettingsService Get/Update/DeleteSecretStore).",
        remedy: "ListSecretStores names the organization's stores; DeleteSecretStore takes `allow_missing`.";
    ImageNotFound => "CWSANDBOX_IMAGE_NOT_FOUND",
        when: "No image of that name is in the emulator's image cache (EmulatorService RemoveImage).",
        remedy: "ListImages (`cwsbx image ls`) names the cached images; a prune or the cache's bound may have removed it.";
    FaultNotFound => "CWSANDBOX_FAULT_NOT_FOUND",
        when: "No fault with that id is in force in the caller's scope (EmulatorService RemoveFault).",
        remedy: "ListFaults names the faults in force; a Reset or ClearFaults may have removed it.";
    Unauthenticated => "CWSANDBOX_UNAUTHENTICATED",
        when: "The request carries no bearer token, or one the emulator does not know; on the direct data plane, its client certificate was not issued by ConnectSandbox, was revoked by a reset, or has expired.",
        remedy: "Send `Authorization: Bearer <token>` with a token the emulator issued (`CWSANDBOX_API_KEY`); on the direct data plane, call ConnectSandbox for a new certificate.";
    PermissionDenied => "CWSANDBOX_PERMISSION_DENIED",
        when: "The caller's token lacks the role the operation needs (the metadata `required_role` names it); on the direct data plane, the client certificate does not grant the operation (`permission`) or was issued for another sandbox (`certificate_sandbox_id`).",
        remedy: "Use a token with the named role, or ask an administrator to grant it; on the direct data plane, ask ConnectSandbox for a certificate for that sandbox and operation.";
    BackendUnavailable => "CWSANDBOX_BACKEND_UNAVAILABLE",
        when: "The operation needs a process executor, and none is attached, or the executor failed to run the command.",
        remedy: "Start the emulator with an executor (see its README) for exec, files and logs; retry if the executor failed transiently.";
    SandboxNotRunning => "CWSANDBOX_SANDBOX_NOT_RUNNING",
        when: "The sandbox exists but is not RUNNING (the metadata `state` says what it is).",
        remedy: "Wait until the sandbox is RUNNING (GetSandbox, or the client's wait), or create a new one if it ended.";
    ContainerNotFound => "CWSANDBOX_CONTAINER_NOT_FOUND",
        when: "The sandbox has no container of that name (the metadata `container` names it).",
        remedy: "Use one of the container names of the sandbox's spec, or leave the name empty for the primary one.";
    FileNotFound => "CWSANDBOX_FILE_NOT_FOUND",
        when: "The file to read does not exist in the sandbox (the metadata `filepath` names it).",
        remedy: "Check the path; it is resolved inside the sandbox's file system.";
    FileIsDirectory => "CWSANDBOX_FILE_IS_DIRECTORY",
        when: "The path to read or write is a directory.",
        remedy: "Name a file, not a directory.";
    FilePermissionDenied => "CWSANDBOX_FILE_PERMISSION_DENIED",
        when: "The sandbox's user may not read or write the file.",
        remedy: "Use a path the sandbox's user can access, or change its permissions from inside the sandbox.";
    FileTooLarge => "CWSANDBOX_FILE_TOO_LARGE",
        when: "The file is larger than the transfer limit (the metadata gives `size_bytes` and `max_size_bytes`).",
        remedy: "Transfer it in smaller pieces, or through a command (e.g. compress or split it first).";
    FileIoFailed => "CWSANDBOX_FILE_IO_FAILED",
        when: "Reading or writing the file failed: an I/O error, a path that is not a regular file, or a transfer that ran out of time.",
        remedy: "Check the path names a regular file; retry if the failure was an I/O error or a timeout.";
    CommandTimeout => "CWSANDBOX_COMMAND_TIMEOUT",
        when: "An exec ran longer than its timeout and was killed.",
        remedy: "Raise the exec's timeout, or make the command finish sooner.";
    DeadlineExceeded => "CWSANDBOX_DEADLINE_EXCEEDED",
        when: "The call's own deadline (`grpc-timeout`) passed before it finished.",
        remedy: "Give the call a longer deadline, or retry it.";
    RequestTooLarge => "CWSANDBOX_REQUEST_TOO_LARGE",
        when: "The request is above a size limit, on the wire or once decoded (the metadata gives the limit).",
        remedy: "Send a smaller request: fewer repeated elements, or large data through a file transfer.";
    ResponseTooLarge => "CWSANDBOX_RESPONSE_TOO_LARGE",
        when: "The response would be above the message limit (unary Exec's output).",
        remedy: "Use StreamExec for large output, or a smaller `max_output_bytes`.";
    Overloaded => "CWSANDBOX_OVERLOADED",
        when: "The requests in flight hold the emulator's whole request memory budget.",
        remedy: "Retry after the RetryInfo delay.";
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A wire string that is not in the catalogue (a newer server's reason, or another service's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownReason(pub String);

impl fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown error reason {:?}", self.0)
    }
}

impl std::error::Error for UnknownReason {}

impl FromStr for Reason {
    type Err = UnknownReason;

    fn from_str(wire: &str) -> Result<Reason, UnknownReason> {
        Reason::from_wire(wire).ok_or_else(|| UnknownReason(wire.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;
    use std::collections::HashSet;

    #[test]
    fn every_reason_round_trips_through_its_wire_string() {
        for &reason in Reason::ALL {
            assert_eq!(Reason::from_wire(reason.as_str()), Some(reason));
            assert_eq!(reason.as_str().parse::<Reason>(), Ok(reason));
        }
        assert_eq!(Reason::from_wire("CWSANDBOX_SOMETHING_NEW"), None);
    }

    #[test]
    fn wire_strings_are_distinct_namespaced_and_documented() {
        let wires: HashSet<&str> = Reason::ALL.iter().map(|reason| reason.as_str()).collect();
        assert_eq!(wires.len(), Reason::ALL.len());
        for &reason in Reason::ALL {
            assert!(reason.as_str().starts_with("CWSANDBOX_"), "{reason}");
            assert!(!reason.description().is_empty() && !reason.remedy().is_empty(), "{reason}");
        }
    }
}
