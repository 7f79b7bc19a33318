//! EmulatorService (`coreweave.sandbox.emulator.v1`): values, Kubernetes objects, Slurm, the clock
//! and reset. Each handler checks the caller and the request, runs one simulation command or
//! query in the caller's scope, and converts the answer (`convert::emulator`).
//!
//! Two kinds of call (see `crate::auth`): `scoped` ones, open to `sandbox_admin` and
//! `cluster_admin`, run in the caller's `Scope` (an organization's admin sees, cancels, deletes
//! and resets only its own part; the rules are the simulation's, `cwsandbox_sim::query::Scope`);
//! `operator` ones change or read the whole cluster's configuration and need `cluster_admin`.

use std::collections::HashMap;

use axum::extract::State;
use connectrpc_axum::{ConnectError, ConnectRequest, ConnectResponse};
use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_sim::config::{Values, merge_values};
use cwsandbox_sim::query::{self, JobQuery, JobRow, JobSource, ObjectQuery, Scope, SubmitHosts};
use cwsandbox_sim::slurm::JobId;
use cwsandbox_sim::time::SimTime;
use cwsandbox_sim::world::World;

use super::respond;
use crate::app::App;
use crate::auth::{Caller, Role};
use crate::config;
use crate::convert::emulator as convert;
use crate::convert::{required, timestamp};
use crate::errors::ApiError;

// Who may call each method is the catalogue's `Access`, checked by the request guard before the
// body is read; these run the body in the caller's scope and answer for `method`.

/// Runs `body` in the caller's scope (`sandbox_admin`: its organization; `cluster_admin`: all).
pub(crate) fn scoped<T>(
    caller: &Caller,
    body: impl FnOnce(Scope) -> Result<T, ApiError>,
) -> Result<ConnectResponse<T>, ConnectError> {
    respond(caller.method(), body(caller.scope()))
}

/// Runs `body` in the caller's scope for every role: the Slurm views any Slurm user reads.
pub(crate) fn reader<T>(
    caller: &Caller,
    body: impl FnOnce(Scope) -> Result<T, ApiError>,
) -> Result<ConnectResponse<T>, ConnectError> {
    respond(caller.method(), body(caller.scope()))
}

/// Runs `body` for the cluster operator (the guard admitted only `cluster_admin`).
pub(crate) fn operator<T>(
    caller: &Caller,
    body: impl FnOnce() -> Result<T, ApiError>,
) -> Result<ConnectResponse<T>, ConnectError> {
    respond(caller.method(), body())
}

// ------------------------------------------------------------------------------------------------
// Values
// ------------------------------------------------------------------------------------------------

/// GetValues: the values in force as YAML and as a Struct.
pub async fn get_values(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::GetValuesRequest>,
) -> Result<ConnectResponse<pb::GetValuesResponse>, ConnectError> {
    // The values name every organization's runners and policies.
    operator(&caller, || {
        let values = app.driver().with_world(|world| world.values().clone());
        let (yaml, tree) = convert::values(&values)?;
        let json_schema =
            if request.include_schema { crate::config::values_schema().to_string() } else { String::new() };
        Ok(pb::GetValuesResponse { yaml, values: Some(tree), json_schema })
    })
}

/// ApplyValues: an overlay merged like `helm -f`, or a replacement, applied like `helm upgrade`.
pub async fn apply_values(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ApplyValuesRequest>,
) -> Result<ConnectResponse<pb::ApplyValuesResponse>, ConnectError> {
    operator(&caller, || {
        use pb::apply_values_request::Document;
        let (field, document) = match &request.document {
            Some(Document::Yaml(text)) => (
                "yaml",
                config::parse_values_text(text).map_err(|error| ApiError::invalid_field("yaml", error.to_string()))?,
            ),
            Some(Document::Values(tree)) => ("values", convert::tree_of(tree)),
            None => return Err(ApiError::missing_field("yaml")),
        };
        if document.get("auth").is_some() {
            return Err(ApiError::invalid_field(
                &format!("{field}.auth"),
                "tokens are read at start only: restart the emulator with the new `-f` file",
            ));
        }
        if document.get("containerRuntime").is_some() {
            return Err(ApiError::invalid_field(
                &format!("{field}.containerRuntime"),
                "the container runtime is chosen at start only: restart the emulator with the new `-f` file or `--runtime`",
            ));
        }
        if document.get("strictness").is_some() {
            return Err(ApiError::invalid_field(
                &format!("{field}.strictness"),
                "strictness is read at start only: restart the emulator with the new `-f` file or `--strictness`",
            ));
        }
        let replace = match pb::ApplyMode::try_from(request.mode) {
            Ok(pb::ApplyMode::Unspecified | pb::ApplyMode::Merge) => false,
            Ok(pb::ApplyMode::Replace) => true,
            Err(_) => return Err(ApiError::invalid_field("mode", format!("{} is not an apply mode", request.mode))),
        };
        let (before, applied) = app.driver().with_world(|world| -> Result<(serde_json::Value, Values), ApiError> {
            let before = serde_json::to_value(world.values())
                .map_err(|error| ApiError::invalid_field(field, error.to_string()))?;
            let tree = if replace {
                document
            } else {
                let mut tree = serde_json::to_value(world.values())
                    .map_err(|error| ApiError::invalid_field(field, error.to_string()))?;
                merge_values(&mut tree, &document);
                tree
            };
            let values = config::values_from_tree(tree).map_err(|error| {
                // A key that is not a plain name is quoted as `["…"]` and joins without a dot.
                let path = match error.path.as_str() {
                    "" => field.to_owned(),
                    quoted if quoted.starts_with('[') => format!("{field}{quoted}"),
                    path => format!("{field}.{path}"),
                };
                ApiError::invalid_field(&path, error.message)
            })?;
            if request.validate_only {
                world.check_values(&values)?;
                return Ok((before, values));
            }
            world.apply_values(values)?;
            Ok((before, world.values().clone()))
        })?;
        let after =
            serde_json::to_value(&applied).map_err(|error| ApiError::invalid_field(field, error.to_string()))?;
        let changes = config::values_changes(&before, &after);
        if !request.validate_only {
            tracing::info!(changes = changes.len(), "values applied: {}", changes.join("; "));
        }
        let (yaml, tree) = convert::values(&applied)?;
        Ok(pb::ApplyValuesResponse { yaml, values: Some(tree), changes })
    })
}

// ------------------------------------------------------------------------------------------------
// Kubernetes objects
// ------------------------------------------------------------------------------------------------

/// ListPods: namespace, label and field selectors.
pub async fn list_pods(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListPodsRequest>,
) -> Result<ConnectResponse<pb::ListPodsResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let query = ObjectQuery::parse(
            scope,
            &request.namespace,
            &request.label_selector,
            &request.field_selector,
            query::POD_FIELDS,
        )?;
        Ok(app.driver().with_world(|world| {
            let jobs = world.placeholder_jobs_by_pod();
            let pods = world
                .query_pods(&query)
                .into_iter()
                .map(|pod| convert::pod(pod, jobs.get(pod.uid.as_str()).copied()))
                .collect();
            pb::ListPodsResponse { pods, resource_version: world.cluster.resource_version.to_string() }
        }))
    })
}

/// DeletePod: `kubectl delete pod`.
pub async fn delete_pod(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::DeletePodRequest>,
) -> Result<ConnectResponse<pb::DeletePodResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let namespace = required("namespace", &request.namespace)?;
        let name = required("name", &request.name)?;
        app.driver().with_world(|world| -> Result<_, ApiError> {
            world.delete_pod(&scope, namespace, name, request.grace_period_seconds)?;
            let jobs = world.placeholder_jobs_by_pod();
            let pod = world
                .scoped_pod_by_name(&scope, namespace, name)
                .map(|pod| convert::pod(pod, jobs.get(pod.uid.as_str()).copied()));
            Ok(pb::DeletePodResponse { pod })
        })
    })
}

/// ListNodes.
pub async fn list_nodes(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListNodesRequest>,
) -> Result<ConnectResponse<pb::ListNodesResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let query =
            ObjectQuery::parse(scope, "", &request.label_selector, &request.field_selector, query::NODE_FIELDS)?;
        Ok(app.driver().with_world(|world| {
            let slurm_nodes: HashMap<&str, &str> =
                world.slurm.nodes.iter().map(|node| (node.k8s_node.as_str(), node.name.as_str())).collect();
            let nodes = world
                .query_nodes(&query)
                .into_iter()
                .map(|node| convert::node(node, slurm_nodes.get(node.name.as_str()).copied()))
                .collect();
            pb::ListNodesResponse { nodes }
        }))
    })
}

/// ListEvents: namespace, involved object, field selector.
pub async fn list_events(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListEventsRequest>,
) -> Result<ConnectResponse<pb::ListEventsResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let mut query =
            ObjectQuery::parse(scope, &request.namespace, "", &request.field_selector, query::EVENT_FIELDS)?;
        for (field, value) in [
            ("involvedObject.kind", &request.involved_object_kind),
            ("involvedObject.name", &request.involved_object_name),
            ("involvedObject.uid", &request.involved_object_uid),
        ] {
            if !value.is_empty() {
                query.fields = query.fields.and_equal(field, value);
            }
        }
        Ok(app.driver().with_world(|world| pb::ListEventsResponse {
            events: world.query_events(&query).into_iter().map(convert::event).collect(),
        }))
    })
}

/// ListConfigMaps.
pub async fn list_config_maps(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListConfigMapsRequest>,
) -> Result<ConnectResponse<pb::ListConfigMapsResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let query = ObjectQuery::parse(
            scope,
            &request.namespace,
            &request.label_selector,
            &request.field_selector,
            query::CONFIG_MAP_FIELDS,
        )?;
        Ok(app.driver().with_world(|world| pb::ListConfigMapsResponse {
            config_maps: world.query_config_maps(&query).into_iter().map(convert::config_map).collect(),
        }))
    })
}

/// ListNamespaces.
pub async fn list_namespaces(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListNamespacesRequest>,
) -> Result<ConnectResponse<pb::ListNamespacesResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let query =
            ObjectQuery::parse(scope, "", &request.label_selector, &request.field_selector, query::NAMESPACE_FIELDS)?;
        Ok(app.driver().with_world(|world| pb::ListNamespacesResponse {
            namespaces: world.query_namespaces(&query).into_iter().map(convert::namespace).collect(),
        }))
    })
}

// ------------------------------------------------------------------------------------------------
// Slurm
// ------------------------------------------------------------------------------------------------

/// A job row with what the controller adds to it: where it was submitted from and, while it
/// waits in the queue, when the scheduler expects it to start.
fn job_of(world: &World, row: &JobRow<'_>, now: SimTime, contain: bool, hosts: &SubmitHosts) -> pb::Job {
    let estimated_start = match row.source {
        JobSource::Queue => world.estimated_start(row.job),
        JobSource::Accounting => None,
    };
    let view = convert::ControllerView { alloc_node: hosts.of(row.job).to_owned(), estimated_start };
    convert::job(row, now, contain, view)
}

/// One job's row inside `scope`: the queue's while it is queued, else accounting's.
fn job_row(world: &World, scope: &Scope, id: JobId) -> Option<pb::Job> {
    let rows = world.query_jobs(&JobQuery { scope: scope.clone(), job_ids: vec![id], ..JobQuery::default() });
    let contain = world.values().slurm_config.has_prolog_flag("Contain");
    rows.first().map(|row| job_of(world, row, world.now(), contain, &world.submit_hosts()))
}

/// ListJobs: queue and accounting rows with filters.
pub async fn list_jobs(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListJobsRequest>,
) -> Result<ConnectResponse<pb::ListJobsResponse>, ConnectError> {
    reader(&caller, |scope| {
        let query = convert::job_query(scope, &request)?;
        let administrator = caller.has(Role::SandboxAdmin) || caller.has(Role::ClusterAdmin);
        Ok(app.driver().with_world(|world| {
            let now = world.now();
            let contain = world.values().slurm_config.has_prolog_flag("Contain");
            // slurm.conf `PrivateData=jobs`: a user who administers nothing sees its own jobs.
            let own_only = !administrator && world.values().slurm_config.has_private_data("jobs");
            let hosts = world.submit_hosts();
            let jobs = world
                .query_jobs(&query)
                .iter()
                .filter(|row| !own_only || row.job.uid == caller.uid)
                .map(|row| job_of(world, row, now, contain, &hosts))
                .collect();
            pb::ListJobsResponse { jobs, now: Some(timestamp(now)) }
        }))
    })
}

/// ListSlurmNodes.
pub async fn list_slurm_nodes(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ListSlurmNodesRequest>,
) -> Result<ConnectResponse<pb::ListSlurmNodesResponse>, ConnectError> {
    // Slurm nodes and partitions are cluster information every Slurm user reads.
    reader(&caller, |_scope| {
        Ok(app.driver().with_world(|world| pb::ListSlurmNodesResponse {
            nodes: world
                .query_slurm_nodes(&request.names, &request.partitions)
                .into_iter()
                .map(|node| convert::slurm_node(node, &world.values().slurm.users))
                .collect(),
        }))
    })
}

/// ListPartitions.
pub async fn list_partitions(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::ListPartitionsRequest>,
) -> Result<ConnectResponse<pb::ListPartitionsResponse>, ConnectError> {
    reader(&caller, |_scope| {
        Ok(app.driver().with_world(|world| pb::ListPartitionsResponse {
            partitions: world
                .slurm
                .partitions
                .values()
                .map(|partition| {
                    let cpus =
                        partition.nodes.iter().filter_map(|name| world.slurm.node(name)).map(|node| node.cpus).sum();
                    convert::partition(partition, cpus)
                })
                .collect(),
        }))
    })
}

/// CancelJob: `scancel`, by the given uid or the caller's.
pub async fn cancel_job(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::CancelJobRequest>,
) -> Result<ConnectResponse<pb::CancelJobResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let by_uid = request.uid.unwrap_or(caller.uid);
        let job = app.driver().with_world(|world| -> Result<_, ApiError> {
            world
                .scancel(&scope, request.job_id, by_uid)
                .map_err(|error| ApiError::from(error).with_metadata("job_id", request.job_id.to_string()))?;
            Ok(job_row(world, &scope, request.job_id))
        })?;
        tracing::info!(job_id = request.job_id, by_uid, "scancel");
        Ok(pb::CancelJobResponse { job })
    })
}

/// SubmitBatchJob: `sbatch` of an ordinary job.
pub async fn submit_batch_job(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::SubmitBatchJobRequest>,
) -> Result<ConnectResponse<pb::SubmitBatchJobResponse>, ConnectError> {
    // An organization's batch job is its own; the operator's is the cluster's.
    scoped(&caller, |scope| {
        app.driver().with_world(|world| -> Result<_, ApiError> {
            let job = world.submit_batch(&scope, caller.uid, &request)?;
            tracing::info!(job_id = job, "batch job submitted");
            Ok(pb::SubmitBatchJobResponse { job: job_row(world, &scope, job) })
        })
    })
}

/// ResumeNode: `scontrol update nodename=… state=resume`.
pub async fn resume_node(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ResumeNodeRequest>,
) -> Result<ConnectResponse<pb::ResumeNodeResponse>, ConnectError> {
    operator(&caller, || {
        let name = required("node_name", &request.node_name)?;
        app.driver().with_world(|world| -> Result<_, ApiError> {
            world.resume_node(name).map_err(|error| ApiError::from(error).with_metadata("node_name", name))?;
            let users = &world.values().slurm.users;
            Ok(pb::ResumeNodeResponse { node: world.slurm.node(name).map(|node| convert::slurm_node(node, users)) })
        })
    })
}

/// ListSlurmUsers: the Slurm users, and the caller's uid.
pub async fn list_slurm_users(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::ListSlurmUsersRequest>,
) -> Result<ConnectResponse<pb::ListSlurmUsersResponse>, ConnectError> {
    reader(&caller, |_scope| {
        Ok(app.driver().with_world(|world| pb::ListSlurmUsersResponse {
            users: world
                .values()
                .slurm
                .users
                .iter()
                .map(|user| pb::SlurmUser {
                    name: user.name.clone(),
                    uid: user.uid,
                    default_account: user.default_account.clone(),
                })
                .collect(),
            caller_uid: caller.uid,
        }))
    })
}

/// DrainNode: `scontrol update nodename=… state=drain reason=…`.
pub async fn drain_node(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::DrainNodeRequest>,
) -> Result<ConnectResponse<pb::DrainNodeResponse>, ConnectError> {
    operator(&caller, || {
        let name = required("node_name", &request.node_name)?;
        app.driver().with_world(|world| -> Result<_, ApiError> {
            let uid = request.uid.unwrap_or(caller.uid);
            world
                .drain_node_by_operator(name, &request.reason, uid)
                .map_err(|error| ApiError::from(error).with_metadata("node_name", name))?;
            tracing::info!(node = name, reason = %request.reason, uid, "Slurm node drained by the operator");
            let users = &world.values().slurm.users;
            Ok(pb::DrainNodeResponse { node: world.slurm.node(name).map(|node| convert::slurm_node(node, users)) })
        })
    })
}

/// GetSlurmConfig: `scontrol show config`.
pub async fn get_slurm_config(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::GetSlurmConfigRequest>,
) -> Result<ConnectResponse<pb::GetSlurmConfigResponse>, ConnectError> {
    // slurm.conf is readable by every Slurm user.
    reader(&caller, |_scope| {
        Ok(app.driver().with_world(|world| pb::GetSlurmConfigResponse {
            config: Some(convert::slurm_config(world.values(), &world.slurm_controller(), world.slurm.nodes.len())),
        }))
    })
}

// ------------------------------------------------------------------------------------------------
// Clock and reset
// ------------------------------------------------------------------------------------------------

/// The clock after the world caught up with it.
fn clock_now(app: &App) -> pb::Clock {
    app.driver().with_world(|_| ());
    convert::clock(app.driver().clock())
}

/// GetClock.
pub async fn get_clock(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::GetClockRequest>,
) -> Result<ConnectResponse<pb::GetClockResponse>, ConnectError> {
    reader(&caller, |_scope| Ok(pb::GetClockResponse { clock: Some(clock_now(&app)) }))
}

/// FreezeClock.
pub async fn freeze_clock(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::FreezeClockRequest>,
) -> Result<ConnectResponse<pb::FreezeClockResponse>, ConnectError> {
    operator(&caller, || {
        app.driver().clock().freeze();
        app.driver().clock_changed();
        Ok(pb::FreezeClockResponse { clock: Some(clock_now(&app)) })
    })
}

/// AdvanceClock: every timer due by the new time fires, in order, before the answer.
pub async fn advance_clock(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::AdvanceClockRequest>,
) -> Result<ConnectResponse<pb::AdvanceClockResponse>, ConnectError> {
    operator(&caller, || {
        let by = convert::advance_by(request.duration.as_ref())?;
        app.driver().clock().advance(by);
        app.driver().clock_changed();
        Ok(pb::AdvanceClockResponse { clock: Some(clock_now(&app)) })
    })
}

/// ResumeClock.
pub async fn resume_clock(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::ResumeClockRequest>,
) -> Result<ConnectResponse<pb::ResumeClockResponse>, ConnectError> {
    operator(&caller, || {
        app.driver().clock().resume();
        app.driver().clock_changed();
        Ok(pb::ResumeClockResponse { clock: Some(clock_now(&app)) })
    })
}

/// PruneImages: the image cache's unused images removed (cluster_admin: the cache is the
/// machine's). Awaits the runtime, so the role is checked before and the answer built after.
pub async fn prune_images(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(_request): ConnectRequest<pb::PruneImagesRequest>,
) -> Result<ConnectResponse<pb::PruneImagesResponse>, ConnectError> {
    let method = caller.method();
    let outcome = match app.runtime(method) {
        // No runtime at all: nothing pulls images, nothing to remove.
        Err(_) => Ok(None),
        Ok(runtime) => runtime.prune_images().await.map_err(ApiError::from),
    };
    respond(method, outcome.map(convert::prune_images))
}

/// Reset: for the operator a fresh world from the configured values, for an organization's admin
/// its own part of the world only (`World::reset_organization`); running sandbox processes are
/// stopped.
pub async fn reset(
    State(app): State<App>,
    caller: Caller,
    ConnectRequest(request): ConnectRequest<pb::ResetRequest>,
) -> Result<ConnectResponse<pb::ResetResponse>, ConnectError> {
    scoped(&caller, |scope| {
        let named = request.organization.trim();
        let org = match (&scope, named) {
            (Scope::Cluster, "") => None,
            (Scope::Cluster, named) => Some(named),
            (Scope::Organization(own), "") => Some(own.as_str()),
            (Scope::Organization(own), named) if named == own => Some(own.as_str()),
            (Scope::Organization(_), _) => {
                let message = format!("organization {named:?} is not the caller's: only cluster_admin resets another");
                return Err(ApiError::permission_denied("cluster_admin", message).with_metadata("organization", named));
            }
        };
        let stopped = match org {
            None => {
                // Tenants and their tokens stay: the fresh world admits them again.
                let tenants: Vec<_> = app.tenants().iter().map(|tenant| tenant.spec.clone()).collect();
                let stopped = app
                    .driver()
                    .reset_with(|world| tenants.iter().try_for_each(|tenant| world.admit_tenant(tenant).map(drop)))?;
                app.reinstall_configured_faults();
                // The sandboxes are gone, and with them what their certificates were for.
                app.direct().revoke(None);
                stopped
            }
            Some(org) => {
                app.faults().forget_organization(org);
                app.direct().revoke(Some(org));
                let stopped = app.driver().with_world(|world| world.reset_organization(org));
                tracing::info!(stopped, org, "organization reset");
                stopped
            }
        };
        Ok(pb::ResetResponse { clock: Some(clock_now(&app)), stopped_pods: i32::try_from(stopped).unwrap_or(i32::MAX) })
    })
}
