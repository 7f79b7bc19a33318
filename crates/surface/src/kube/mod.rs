//! The kube facade: the slice of the Kubernetes API that `kubectl get`, `describe`, `delete pod` and
//! `get -w` use, on the emulator's port, over the simulated cluster.
//!
//! - Discovery: `/version`, `/api`, `/api/v1`, `/apis` (one group: `node.k8s.io`, whose
//!   RuntimeClasses are the runtimes the Nodes run Pods with: `gvisor` where runsc works here).
//!   kubectl asks for aggregated discovery first and falls back to these documents.
//! - pods, nodes, namespaces, events, configmaps, runtimeclasses: list (one namespace or all), get, label and field
//!   selectors, `limit`/`continue`, watch (`?watch=true` and the legacy `/watch/` paths); delete for
//!   pods only, which is the same teardown as DeleteSandbox for a sandbox's Pod; `pods/log` (a
//!   sandbox's main process output, as StreamLogs serves it); `pods/exec` over WebSocket (a command
//!   in a sandbox's Pod, as StreamExec runs it; see [`exec`]).
//! - kubectl's default printing asks for `as=Table`: the rows are printed here (see [`table`]).
//! - Anything else answers as the API server would: a `Status` with 404, 405, 400, 401 or 403.
//!
//! Every call but `/version` needs a bearer token with `sandbox_admin` or `cluster_admin` (the
//! kubeconfig that `serve --kubeconfig` writes carries the admin token, which holds both). The
//! caller's scope applies as in EmulatorService: `cluster_admin` sees every Pod, an
//! organization's `sandbox_admin` only its sandboxes' Pods, their Events and Namespaces (and every
//! Node); another organization's Pod is 404 for it, to get, delete or read the log of.

mod exec;
mod logs;
mod objects;
mod status;
pub mod table;
mod watch;

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_sim::data_target::PodRefusal;
use cwsandbox_sim::query::{self, FieldSelector, LabelSelector, ObjectQuery, Scope};
use cwsandbox_sim::world::{PodDeletion, World};
use http::{HeaderMap, Method, StatusCode, Uri};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde_json::{Value, json};

use crate::app::App;
use crate::auth::Role;
use crate::convert::emulator as convert;
use status::Status;
use table::{IncludeObject, Row};

/// The version this facade reports (kubectl 1.32 to 1.34 accept it without a skew warning).
const SERVER_VERSION: (&str, &str, &str) = ("1", "33", "v1.33.0");

/// The routes of the facade, merged into the emulator's router.
pub fn routes(app: App) -> Router {
    Router::new()
        .route("/version", any(version))
        .route("/version/", any(version))
        .route("/api", any(core))
        .route("/api/", any(core))
        .route("/api/{*rest}", any(core))
        .route("/api/v1/namespaces/{namespace}/pods/{name}/exec", any(exec::handler))
        .route("/apis", any(groups))
        .route("/apis/", any(groups))
        .route("/apis/{*rest}", any(groups))
        .route("/openapi/{*rest}", any(not_found_anywhere))
        .with_state(app)
}

// ------------------------------------------------------------------------------------------------
// Resources
// ------------------------------------------------------------------------------------------------

/// The resources the facade serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Pods,
    Nodes,
    Namespaces,
    Events,
    ConfigMaps,
    /// `node.k8s.io/v1`: the one resource of an API group here.
    RuntimeClasses,
}

/// The API group of [`Resource::RuntimeClasses`], and its version.
const NODE_GROUP: &str = "node.k8s.io";
const NODE_GROUP_VERSION: &str = "node.k8s.io/v1";

/// The core group's resources (`/api/v1`).
const RESOURCES: [Resource; 5] =
    [Resource::ConfigMaps, Resource::Events, Resource::Namespaces, Resource::Nodes, Resource::Pods];

impl Resource {
    fn from_plural(plural: &str) -> Option<Resource> {
        RESOURCES.into_iter().find(|resource| resource.plural() == plural)
    }

    fn plural(self) -> &'static str {
        match self {
            Resource::Pods => "pods",
            Resource::Nodes => "nodes",
            Resource::Namespaces => "namespaces",
            Resource::Events => "events",
            Resource::ConfigMaps => "configmaps",
            Resource::RuntimeClasses => "runtimeclasses",
        }
    }

    /// The plural as the API server's messages name it: with its group, outside the core one.
    fn qualified_plural(self) -> String {
        match self {
            Resource::RuntimeClasses => format!("{}.{NODE_GROUP}", self.plural()),
            _ => self.plural().to_owned(),
        }
    }

    /// `apiVersion` of its objects and lists.
    fn api_version(self) -> &'static str {
        match self {
            Resource::RuntimeClasses => NODE_GROUP_VERSION,
            _ => "v1",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Resource::Pods => "Pod",
            Resource::Nodes => "Node",
            Resource::Namespaces => "Namespace",
            Resource::Events => "Event",
            Resource::ConfigMaps => "ConfigMap",
            Resource::RuntimeClasses => "RuntimeClass",
        }
    }

    fn singular(self) -> &'static str {
        match self {
            Resource::Pods => "pod",
            Resource::Nodes => "node",
            Resource::Namespaces => "namespace",
            Resource::Events => "event",
            Resource::ConfigMaps => "configmap",
            Resource::RuntimeClasses => "runtimeclass",
        }
    }

    fn namespaced(self) -> bool {
        matches!(self, Resource::Pods | Resource::Events | Resource::ConfigMaps)
    }

    fn short_names(self) -> &'static [&'static str] {
        match self {
            Resource::Pods => &["po"],
            Resource::Nodes => &["no"],
            Resource::Namespaces => &["ns"],
            Resource::Events => &["ev"],
            Resource::ConfigMaps => &["cm"],
            Resource::RuntimeClasses => &[],
        }
    }

    fn verbs(self) -> &'static [&'static str] {
        match self {
            Resource::Pods => &["delete", "get", "list", "watch"],
            _ => &["get", "list", "watch"],
        }
    }

    fn fields(self) -> &'static [&'static str] {
        match self {
            Resource::Pods => query::POD_FIELDS,
            Resource::Nodes => query::NODE_FIELDS,
            Resource::Namespaces => query::NAMESPACE_FIELDS,
            Resource::Events => query::EVENT_FIELDS,
            Resource::ConfigMaps => query::CONFIG_MAP_FIELDS,
            Resource::RuntimeClasses => query::RUNTIME_CLASS_FIELDS,
        }
    }

    fn columns(self) -> &'static [table::Column] {
        match self {
            Resource::Pods => table::POD_COLUMNS,
            Resource::Nodes => table::NODE_COLUMNS,
            Resource::Namespaces => table::NAMESPACE_COLUMNS,
            Resource::Events => table::EVENT_COLUMNS,
            Resource::ConfigMaps => table::CONFIG_MAP_COLUMNS,
            Resource::RuntimeClasses => table::RUNTIME_CLASS_COLUMNS,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Reading the world
// ------------------------------------------------------------------------------------------------

/// One object as the facade serves it.
#[derive(Clone)]
struct Item {
    /// Identity across snapshots: the uid where there is one, else namespace/name.
    key: String,
    object: Value,
    metadata: ObjectMeta,
    cells: Vec<Value>,
    conditions: Option<Value>,
}

impl Item {
    fn new<T: Serialize>(object: &T, metadata: &ObjectMeta, cells: Vec<Value>, conditions: Option<Value>) -> Item {
        let key = metadata.uid.clone().unwrap_or_else(|| {
            format!("{}/{}", metadata.namespace.clone().unwrap_or_default(), metadata.name.clone().unwrap_or_default())
        });
        Item {
            key,
            object: serde_json::to_value(object).unwrap_or(Value::Null),
            metadata: metadata.clone(),
            cells,
            conditions,
        }
    }

    fn row(&self) -> Row {
        Row {
            cells: self.cells.clone(),
            conditions: self.conditions.clone(),
            object: self.object.clone(),
            metadata: self.metadata.clone(),
        }
    }

    fn resource_version(&self) -> Option<u64> {
        self.metadata.resource_version.as_deref().and_then(|version| version.parse().ok())
    }
}

/// A consistent read of one resource.
struct Snapshot {
    items: Vec<Item>,
    resource_version: String,
}

/// Which objects a request selects.
#[derive(Clone)]
struct Selection {
    resource: Resource,
    query: ObjectQuery,
}

/// The emulator API's messages for a selection, read under the world's lock.
enum Read {
    Pods(Vec<pb::Pod>),
    Nodes(Vec<pb::Node>),
    Namespaces(Vec<pb::Namespace>),
    Events(Vec<pb::Event>),
    ConfigMaps(Vec<pb::ConfigMap>),
    RuntimeClasses(Vec<k8s_openapi::api::node::v1::RuntimeClass>),
}

fn read_world(world: &World, selection: &Selection) -> (Read, u64, i64) {
    let query = &selection.query;
    let read = match selection.resource {
        Resource::Pods => {
            let jobs = world.placeholder_jobs_by_pod();
            Read::Pods(
                world
                    .query_pods(query)
                    .into_iter()
                    .map(|pod| convert::pod(pod, jobs.get(pod.uid.as_str()).copied()))
                    .collect(),
            )
        }
        Resource::Nodes => {
            let slurm_nodes: std::collections::HashMap<&str, &str> =
                world.slurm.nodes.iter().map(|node| (node.k8s_node.as_str(), node.name.as_str())).collect();
            Read::Nodes(
                world
                    .query_nodes(query)
                    .into_iter()
                    .map(|node| convert::node(node, slurm_nodes.get(node.name.as_str()).copied()))
                    .collect(),
            )
        }
        Resource::Namespaces => {
            Read::Namespaces(world.query_namespaces(query).into_iter().map(convert::namespace).collect())
        }
        Resource::Events => Read::Events(world.query_events(query).into_iter().map(convert::event).collect()),
        Resource::ConfigMaps => {
            Read::ConfigMaps(world.query_config_maps(query).into_iter().map(convert::config_map).collect())
        }
        Resource::RuntimeClasses => {
            Read::RuntimeClasses(world.query_runtime_classes(query).into_iter().map(objects::runtime_class).collect())
        }
    };
    let version = match selection.resource {
        Resource::Events => world.cluster.event_sequence,
        _ => world.cluster.resource_version,
    };
    (read, version, world.now().secs())
}

fn snapshot(app: &App, selection: &Selection) -> Snapshot {
    let (read, version, now) = app.driver().with_world(|world| read_world(world, selection));
    let items = match read {
        Read::Pods(pods) => pods
            .iter()
            .map(|pod| {
                let pod = objects::pod(pod);
                Item::new(&pod, &pod.metadata, table::pod_row(&pod, now), table::pod_row_conditions(&pod))
            })
            .collect(),
        Read::Nodes(nodes) => nodes
            .iter()
            .map(|node| {
                let node = objects::node(node);
                Item::new(&node, &node.metadata, table::node_row(&node, now), None)
            })
            .collect(),
        Read::Namespaces(namespaces) => namespaces
            .iter()
            .map(|namespace| {
                let namespace = objects::namespace(namespace);
                Item::new(&namespace, &namespace.metadata, table::namespace_row(&namespace, now), None)
            })
            .collect(),
        Read::Events(events) => events
            .iter()
            .map(|event| {
                let event = objects::event(event);
                Item::new(&event, &event.metadata, table::event_row(&event, now), None)
            })
            .collect(),
        Read::ConfigMaps(maps) => maps
            .iter()
            .map(|map| {
                let map = objects::config_map(map);
                Item::new(&map, &map.metadata, table::config_map_row(&map, now), None)
            })
            .collect(),
        Read::RuntimeClasses(classes) => classes
            .iter()
            .map(|class| Item::new(class, &class.metadata, table::runtime_class_row(class, now), None))
            .collect(),
    };
    Snapshot { items, resource_version: version.to_string() }
}

// ------------------------------------------------------------------------------------------------
// Requests
// ------------------------------------------------------------------------------------------------

/// The query parameters the facade understands.
#[derive(Debug, Default)]
struct Params {
    label_selector: String,
    field_selector: String,
    watch: bool,
    resource_version: String,
    timeout_seconds: Option<u64>,
    include: IncludeObject,
    limit: Option<usize>,
    continue_token: String,
    grace_period_seconds: Option<i64>,
    dry_run: bool,
}

/// A numeric query parameter, or the API server's 400 naming it.
fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, Status> {
    value.parse().map_err(|_| Status::bad_request(format!("invalid value for {key}: {value:?}: must be a number")))
}

/// What the API server answers when a Pod subresource (`exec`, `log`) fails its checks on the
/// Pod itself, the same for every subresource; each subresource words its other refusals.
fn pod_refused(refusal: PodRefusal, name: &str) -> Status {
    match refusal {
        PodRefusal::NotFound => Status::not_found("pods", name),
        PodRefusal::ContainerNotValid { container } => {
            Status::bad_request(format!("container {container} is not valid for pod {name}"))
        }
        PodRefusal::NoHostAssigned => Status::bad_request(format!("pod {name} does not have a host assigned")),
    }
}

impl Params {
    /// The query; `legacy_watch` is a `/api/v1/watch/…` path, which means `watch=true`.
    fn parse(uri: &Uri, legacy_watch: bool) -> Result<Params, Status> {
        let mut params = Params { watch: legacy_watch, ..Params::default() };
        for (key, value) in form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "labelSelector" => params.label_selector = value.into_owned(),
                "fieldSelector" => params.field_selector = value.into_owned(),
                "watch" => params.watch |= matches!(value.as_ref(), "true" | "1"),
                "resourceVersion" => params.resource_version = value.into_owned(),
                "timeoutSeconds" => params.timeout_seconds = Some(number(&key, &value)?),
                "includeObject" => {
                    params.include = IncludeObject::parse(&value)
                        .ok_or_else(|| Status::bad_request(format!("invalid includeObject {value:?}")))?;
                }
                "limit" => {
                    let limit: i64 = number(&key, &value)?;
                    params.limit = usize::try_from(limit).ok().filter(|limit| *limit > 0);
                }
                "continue" => params.continue_token = value.into_owned(),
                "gracePeriodSeconds" => params.grace_period_seconds = Some(number(&key, &value)?),
                "dryRun" => params.dry_run = value == "All",
                _ => {}
            }
        }
        Ok(params)
    }
}

/// Whether the client asked for server-side printing (kubectl's default output).
fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .next()
        .is_some_and(|first| first.split(';').any(|parameter| parameter.trim() == "as=Table"))
}

fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(http::header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(error) => Status::internal(format!("encoding the response: {error}")).into_response(),
    }
}

/// The caller must hold `sandbox_admin` or `cluster_admin`; the answer is the scope it sees.
fn authorize(
    app: &App,
    headers: &HeaderMap,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
) -> Result<Scope, Status> {
    let header = headers.get(http::header::AUTHORIZATION).and_then(|value| value.to_str().ok());
    let principal = app.authenticate(header).map_err(|_| Status::unauthorized())?;
    if principal.has(Role::SandboxAdmin) || principal.has(Role::ClusterAdmin) {
        return Ok(principal.scope());
    }
    let scope = match namespace {
        Some(namespace) => format!("in the namespace \"{namespace}\""),
        None => "at the cluster scope".to_owned(),
    };
    let what =
        if resource.is_empty() { "this path".to_owned() } else { format!("resource \"{resource}\" in API group \"\"") };
    Err(Status::forbidden(
        resource,
        format!(
            "{resource} is forbidden: User \"{}\" cannot {verb} {what} {scope}: the kube facade needs the sandbox_admin or cluster_admin role",
            principal.user
        ),
    ))
}

async fn version() -> Response {
    let (major, minor, git_version) = SERVER_VERSION;
    json_response(
        StatusCode::OK,
        &json!({
            "major": major,
            "minor": minor,
            "gitVersion": git_version,
            "gitCommit": "cwsandbox-emulator",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }),
    )
}

async fn not_found_anywhere() -> Response {
    Status::not_found_path().into_response()
}

/// `/apis`: one API group besides the core one, `node.k8s.io` (its RuntimeClasses, served as the
/// core group's resources are).
async fn groups(State(app): State<App>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let path = uri.path().trim_end_matches('/').to_owned();
    if path.starts_with("/apis/node.k8s.io/v1/") {
        return core(State(app), method, uri, headers, body).await;
    }
    if let Err(status) = authorize(&app, &headers, "get", "", None) {
        return status.into_response();
    }
    let version = json!({ "groupVersion": NODE_GROUP_VERSION, "version": "v1" });
    let group = json!({ "name": NODE_GROUP, "versions": [version], "preferredVersion": version });
    let document = match path.as_str() {
        "/apis" => json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": [group] }),
        "/apis/node.k8s.io" => {
            let mut group = group;
            group["kind"] = json!("APIGroup");
            group["apiVersion"] = json!("v1");
            group
        }
        "/apis/node.k8s.io/v1" => {
            let resource = Resource::RuntimeClasses;
            json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": NODE_GROUP_VERSION,
                "resources": [{
                    "name": resource.plural(),
                    "singularName": resource.singular(),
                    "namespaced": false,
                    "kind": resource.kind(),
                    "verbs": resource.verbs(),
                }],
            })
        }
        _ => return Status::not_found_path().into_response(),
    };
    if method != Method::GET {
        return Status::method_not_allowed("", "").into_response();
    }
    json_response(StatusCode::OK, &document)
}

fn resource_list() -> Value {
    let mut resources: Vec<Value> = RESOURCES
        .iter()
        .map(|resource| {
            json!({
                "name": resource.plural(),
                "singularName": resource.singular(),
                "namespaced": resource.namespaced(),
                "kind": resource.kind(),
                "verbs": resource.verbs(),
                "shortNames": resource.short_names(),
                "categories": if matches!(resource, Resource::Pods) { vec!["all"] } else { Vec::new() },
            })
        })
        .collect();
    resources
        .push(json!({ "name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"] }));
    json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": resources })
}

/// What a `/api/...` path names.
enum Target {
    Versions,
    Resources,
    Collection {
        resource: Resource,
        namespace: Option<String>,
    },
    Object {
        resource: Resource,
        namespace: Option<String>,
        name: String,
    },
    /// `pods/<name>/log`: the main process's output.
    PodLog {
        namespace: String,
        name: String,
    },
}

fn target(path: &str) -> Result<(Target, bool), Status> {
    if let Some(rest) = path.strip_prefix("/apis/node.k8s.io/v1") {
        return node_group_target(rest);
    }
    let mut segments: Vec<&str> =
        path.trim_start_matches("/api").split('/').filter(|segment| !segment.is_empty()).collect();
    if segments.is_empty() {
        return Ok((Target::Versions, false));
    }
    if segments[0] != "v1" {
        return Err(Status::not_found_path());
    }
    segments.remove(0);
    let legacy_watch = segments.first() == Some(&"watch");
    if legacy_watch {
        segments.remove(0);
    }
    let resource = |plural: &str| Resource::from_plural(plural).ok_or_else(Status::not_found_path);
    let target = match segments.as_slice() {
        [] if !legacy_watch => Target::Resources,
        [plural] => Target::Collection { resource: resource(plural)?, namespace: None },
        ["namespaces", namespace, plural] => {
            let resource = resource(plural)?;
            if !resource.namespaced() {
                return Err(Status::not_found_path());
            }
            Target::Collection { resource, namespace: Some((*namespace).to_owned()) }
        }
        ["namespaces", namespace, "pods", name, "log"] => {
            Target::PodLog { namespace: (*namespace).to_owned(), name: (*name).to_owned() }
        }
        ["namespaces", namespace, plural, name] => {
            let resource = resource(plural)?;
            if !resource.namespaced() {
                return Err(Status::not_found_path());
            }
            Target::Object { resource, namespace: Some((*namespace).to_owned()), name: (*name).to_owned() }
        }
        [plural, name] => {
            let resource = resource(plural)?;
            if resource.namespaced() {
                return Err(Status::not_found_path());
            }
            Target::Object { resource, namespace: None, name: (*name).to_owned() }
        }
        _ => return Err(Status::not_found_path()),
    };
    Ok((target, legacy_watch))
}

/// A path under `/apis/node.k8s.io/v1`: its RuntimeClasses.
fn node_group_target(rest: &str) -> Result<(Target, bool), Status> {
    let mut segments: Vec<&str> = rest.split('/').filter(|segment| !segment.is_empty()).collect();
    let legacy_watch = segments.first() == Some(&"watch");
    if legacy_watch {
        segments.remove(0);
    }
    let resource = Resource::RuntimeClasses;
    let target = match segments.as_slice() {
        [plural] if *plural == resource.plural() => Target::Collection { resource, namespace: None },
        [plural, name] if *plural == resource.plural() => {
            Target::Object { resource, namespace: None, name: (*name).to_owned() }
        }
        _ => return Err(Status::not_found_path()),
    };
    Ok((target, legacy_watch))
}

/// Everything under `/api` (and the `node.k8s.io` group's resources).
async fn core(State(app): State<App>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    match serve_core(&app, &method, &uri, &headers, &body).await {
        Ok(response) => response,
        Err(status) => status.into_response(),
    }
}

async fn serve_core(
    app: &App,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, Status> {
    let (target, legacy_watch) = match target(uri.path()) {
        Ok(parsed) => parsed,
        Err(status) => {
            authorize(app, headers, "get", "", None)?;
            return Err(status);
        }
    };
    let params = Params::parse(uri, legacy_watch)?;
    match target {
        Target::Versions | Target::Resources => {
            authorize(app, headers, "get", "", None)?;
            if method != Method::GET {
                return Err(Status::method_not_allowed("", ""));
            }
            Ok(match target {
                Target::Versions => json_response(
                    StatusCode::OK,
                    &json!({
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [{
                            "clientCIDR": "0.0.0.0/0",
                            "serverAddress": headers.get(http::header::HOST).and_then(|host| host.to_str().ok()).unwrap_or("127.0.0.1"),
                        }],
                    }),
                ),
                _ => json_response(StatusCode::OK, &resource_list()),
            })
        }
        Target::Collection { resource, namespace } => {
            let verb = if params.watch { "watch" } else { "list" };
            let scope = authorize(app, headers, verb, resource.plural(), namespace.as_deref())?;
            if method != Method::GET {
                return Err(Status::method_not_allowed(resource.plural(), ""));
            }
            let selection = selection(scope, resource, namespace.as_deref(), &params)?;
            if params.watch {
                return Ok(watch::serve(app.clone(), selection, &params, wants_table(headers)));
            }
            Ok(list(app, &selection, &params, wants_table(headers))?)
        }
        Target::PodLog { namespace, name } => {
            let scope = authorize(app, headers, "get", "pods/log", Some(&namespace))?;
            if method != Method::GET {
                return Err(Status::method_not_allowed("pods", &name));
            }
            logs::serve(app, &scope, &namespace, &name, uri).await
        }
        Target::Object { resource, namespace, name } => {
            if params.watch {
                // A watch on one object is a watch on its collection narrowed by name.
                let scope = authorize(app, headers, "watch", resource.plural(), namespace.as_deref())?;
                let mut selection = selection(scope, resource, namespace.as_deref(), &params)?;
                selection.query.fields = selection.query.fields.and_equal("metadata.name", &name);
                return Ok(watch::serve(app.clone(), selection, &params, wants_table(headers)));
            }
            match *method {
                Method::GET => {
                    let scope = authorize(app, headers, "get", resource.plural(), namespace.as_deref())?;
                    get(app, &scope, resource, namespace.as_deref(), &name, wants_table(headers))
                }
                Method::DELETE if resource == Resource::Pods => {
                    let scope = authorize(app, headers, "delete", resource.plural(), namespace.as_deref())?;
                    delete_pod(app, &scope, namespace.as_deref().unwrap_or("default"), &name, &params, body)
                }
                _ => {
                    authorize(app, headers, "get", resource.plural(), namespace.as_deref())?;
                    Err(Status::method_not_allowed(resource.plural(), &name))
                }
            }
        }
    }
}

fn selection(scope: Scope, resource: Resource, namespace: Option<&str>, params: &Params) -> Result<Selection, Status> {
    let labels = LabelSelector::parse(&params.label_selector)
        .map_err(|error| Status::bad_request(format!("unable to parse requirement: {error}")))?;
    let fields = FieldSelector::parse(&params.field_selector, resource.fields())
        .map_err(|error| Status::bad_request(error.to_string()))?;
    Ok(Selection { resource, query: ObjectQuery { scope, namespace: namespace.map(str::to_owned), labels, fields } })
}

/// A continue token: the resource version of the first page and the offset of the next.
fn parse_continue(token: &str) -> Result<usize, Status> {
    if token.is_empty() {
        return Ok(0);
    }
    token
        .split_once(':')
        .and_then(|(_, offset)| offset.parse().ok())
        .ok_or_else(|| Status::bad_request(format!("continue key is not valid: {token:?}")))
}

fn list(app: &App, selection: &Selection, params: &Params, as_table: bool) -> Result<Response, Status> {
    let snapshot = snapshot(app, selection);
    let total = snapshot.items.len();
    let offset = parse_continue(&params.continue_token)?.min(total);
    let end = params.limit.map_or(total, |limit| offset.saturating_add(limit).min(total));
    let mut list_meta = json!({ "resourceVersion": snapshot.resource_version });
    if end < total {
        list_meta["continue"] = json!(format!("{}:{end}", snapshot.resource_version));
        list_meta["remainingItemCount"] = json!(total - end);
    }
    let page = &snapshot.items[offset..end];
    let body = if as_table {
        let mut printed = table::table(
            selection.resource.columns(),
            page.iter().map(Item::row).collect(),
            params.include,
            &snapshot.resource_version,
        );
        printed["metadata"] = list_meta;
        printed
    } else {
        json!({
            "kind": format!("{}List", selection.resource.kind()),
            "apiVersion": selection.resource.api_version(),
            "metadata": list_meta,
            "items": page.iter().map(|item| item.object.clone()).collect::<Vec<_>>(),
        })
    };
    Ok(json_response(StatusCode::OK, &body))
}

fn find(app: &App, scope: &Scope, resource: Resource, namespace: Option<&str>, name: &str) -> Option<Item> {
    let selection = Selection {
        resource,
        query: ObjectQuery {
            scope: scope.clone(),
            namespace: namespace.map(str::to_owned),
            labels: LabelSelector::default(),
            fields: FieldSelector::default().and_equal("metadata.name", name),
        },
    };
    snapshot(app, &selection).items.into_iter().next()
}

fn get(
    app: &App,
    scope: &Scope,
    resource: Resource,
    namespace: Option<&str>,
    name: &str,
    as_table: bool,
) -> Result<Response, Status> {
    let item = find(app, scope, resource, namespace, name)
        .ok_or_else(|| Status::not_found(&resource.qualified_plural(), name))?;
    if as_table {
        let version = item.metadata.resource_version.clone().unwrap_or_default();
        return Ok(json_response(
            StatusCode::OK,
            &table::table(resource.columns(), vec![item.row()], IncludeObject::Metadata, &version),
        ));
    }
    Ok(json_response(StatusCode::OK, &item.object))
}

/// `DeleteOptions`, as far as a Pod delete reads it.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteOptions {
    grace_period_seconds: Option<i64>,
    preconditions: Option<Preconditions>,
    dry_run: Option<Vec<String>>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

fn delete_pod(
    app: &App,
    scope: &Scope,
    namespace: &str,
    name: &str,
    params: &Params,
    body: &Bytes,
) -> Result<Response, Status> {
    let options: DeleteOptions = if body.is_empty() {
        DeleteOptions::default()
    } else {
        serde_json::from_slice(body).map_err(|error| Status::bad_request(format!("invalid DeleteOptions: {error}")))?
    };
    let deletion = PodDeletion {
        grace_seconds: options.grace_period_seconds.or(params.grace_period_seconds),
        uid: options.preconditions.as_ref().and_then(|preconditions| preconditions.uid.clone()),
        resource_version: options.preconditions.and_then(|preconditions| preconditions.resource_version),
        dry_run: params.dry_run || options.dry_run.is_some_and(|modes| modes.iter().any(|mode| mode == "All")),
    };
    // Checked, applied and read back under one lock: the Pod the preconditions saw is the one
    // deleted and returned.
    let deleted = app.driver().with_world(|world| {
        world.delete_pod_with(scope, namespace, name, &deletion).map(|deleted| {
            let object = |pod: &cwsandbox_sim::k8s::Pod| convert::pod(pod, world.placeholder_job(&pod.uid));
            (object(&deleted.before), deleted.after.as_ref().map(object))
        })
    });
    let (before, after) = deleted.map_err(|error| Status::from_sim(error, "pods", name))?;
    // A Pod that is still terminating is returned as it is now; one already gone as it was.
    Ok(json_response(StatusCode::OK, &objects::pod(&after.unwrap_or(before))))
}

/// A kubeconfig for the facade: one cluster (HTTPS, trusting the emulator's own certificate: kubectl
/// sends no token over plain HTTP), one user with the admin token, one context.
pub fn kubeconfig(server: &str, certificate_pem: &str, token: &str) -> String {
    use base64::Engine;
    let authority = base64::engine::general_purpose::STANDARD.encode(certificate_pem);
    let document = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "cwsandbox-emulator",
            "cluster": { "server": server, "certificate-authority-data": authority },
        }],
        "users": [{ "name": "cwsandbox-admin", "user": { "token": token } }],
        "contexts": [{
            "name": "cwsandbox-emulator",
            "context": { "cluster": "cwsandbox-emulator", "user": "cwsandbox-admin", "namespace": "default" },
        }],
        "current-context": "cwsandbox-emulator",
        "preferences": {},
    });
    // JSON is YAML; kubectl reads either.
    serde_json::to_string_pretty(&document).unwrap_or_default() + "\n"
}

/// Real seconds a watch stays open without a `timeoutSeconds`: the API server's default range.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(30 * 60);
