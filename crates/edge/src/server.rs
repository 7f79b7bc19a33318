//! One port, every protocol: gRPC (h2c), Connect (unary and streaming, JSON and binary, HTTP/1.1
//! and h2c), gRPC-Web, `grpc.health.v1` and gRPC server reflection, plus `GET /healthz`, the kube
//! facade and the web dashboard under `/ui/` (`cwsandbox_dashboard`).
//!
//! connectrpc-axum builds, from one set of handlers per service, both the Connect routes and the
//! tonic gRPC services, and dispatches on `content-type` (`application/grpc*` goes to tonic).
//! gRPC-Web requests (`application/grpc-web*`) are translated to gRPC by tonic-web first. Every
//! RPC passes the [`Guard`] (token, size, memory, cardinality) before anything decodes it.

use std::convert::Infallible;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use connectrpc_axum::MakeServiceBuilder;
use cwsandbox_api::emulator_v1::emulator_service_connect::EmulatorServiceTonicCompatibleBuilder;
use cwsandbox_api::sandbox_v1 as pb;
use cwsandbox_api::sandbox_v1::discovery_service_connect::DiscoveryServiceTonicCompatibleBuilder;
use cwsandbox_api::sandbox_v1::runner_management_service_connect::RunnerManagementServiceTonicCompatibleBuilder;
use cwsandbox_api::sandbox_v1::sandbox_data_plane_service_connect::SandboxDataPlaneServiceTonicCompatibleBuilder;
use cwsandbox_api::sandbox_v1::sandbox_service_connect::SandboxServiceTonicCompatibleBuilder;
use cwsandbox_api::sandbox_v1::sandbox_template_service_connect::SandboxTemplateServiceTonicCompatibleBuilder;
use cwsandbox_api::sandbox_v1::settings_service_connect::SettingsServiceTonicCompatibleBuilder;
use cwsandbox_api::sandbox_v1::volume_service_connect::VolumeServiceTonicCompatibleBuilder;
use http::Request;
use tower::{Layer, ServiceExt};

use crate::guard::{Guard, RequestLimits};
use crate::transport::Transport;
use cwsandbox_surface::app::App;
use cwsandbox_surface::not_implemented;
use cwsandbox_surface::services::{
    data, discovery, emulator, faults, images, runners, sandbox, settings, snapshots, templates, tenants, volumes,
};

/// The whole HTTP service of the emulator, ready for [`crate::transport::serve`].
pub async fn router(app: App, transport: &Transport) -> Router {
    let limit = app.limits().max_message_bytes;
    let request_limits = request_limits(&app, transport);

    let (sandbox_routes, sandbox_grpc) = SandboxServiceTonicCompatibleBuilder::new()
        .create_sandbox(sandbox::create_sandbox)
        .get_sandbox(sandbox::get_sandbox)
        .list_sandboxes(sandbox::list_sandboxes)
        .delete_sandbox(sandbox::delete_sandbox)
        .connect_sandbox(sandbox::connect_sandbox)
        .exec(data::exec)
        .stream_exec(data::stream_exec)
        .stream_logs(data::stream_logs)
        .write_file(data::write_file)
        .read_file(data::read_file)
        .create_sandbox_from_template(sandbox::create_sandbox_from_template)
        .create_sandbox_from_file(sandbox::create_sandbox_from_file)
        .get_sandbox_build_logs(not_implemented!(pb::GetSandboxBuildLogsRequest, pb::GetSandboxBuildLogsResponse))
        .purge_sandboxes(not_implemented!(pb::PurgeSandboxesRequest, pb::PurgeSandboxesResponse))
        .create_file_system_snapshot(snapshots::create_file_system_snapshot)
        .get_file_system_snapshot(snapshots::get_file_system_snapshot)
        .list_file_system_snapshots(snapshots::list_file_system_snapshots)
        .delete_file_system_snapshot(snapshots::delete_file_system_snapshot)
        .with_state(app.clone())
        .build();

    let (data_plane_routes, data_plane_grpc) = data_plane(&app);

    let (discovery_routes, discovery_grpc) = DiscoveryServiceTonicCompatibleBuilder::new()
        .list_available_runners(discovery::list_available_runners)
        .get_available_runner(discovery::get_available_runner)
        .with_state(app.clone())
        .build();

    let (runner_routes, runner_grpc) = RunnerManagementServiceTonicCompatibleBuilder::new()
        .create_managed_runner(runners::create_managed_runner)
        .get_managed_runner(runners::get_managed_runner)
        .list_managed_runners(runners::list_managed_runners)
        .update_managed_runner(runners::update_managed_runner)
        .delete_managed_runner(runners::delete_managed_runner)
        .apply_available_update(runners::apply_available_update)
        .with_state(app.clone())
        .build();

    let (template_routes, template_grpc) = SandboxTemplateServiceTonicCompatibleBuilder::new()
        .create_sandbox_template(templates::create_sandbox_template)
        .get_sandbox_template(templates::get_sandbox_template)
        .list_sandbox_templates(templates::list_sandbox_templates)
        .update_sandbox_template(templates::update_sandbox_template)
        .delete_sandbox_template(templates::delete_sandbox_template)
        .with_state(app.clone())
        .build();

    let (settings_routes, settings_grpc) = SettingsServiceTonicCompatibleBuilder::new()
        .get_build_storage_config(not_implemented!(pb::GetBuildStorageConfigRequest, pb::BuildStorageConfig))
        .update_build_storage_config(not_implemented!(pb::UpdateBuildStorageConfigRequest, pb::BuildStorageConfig))
        .get_object_storage_wif_config(not_implemented!(
            pb::GetObjectStorageWifConfigRequest,
            pb::ObjectStorageWifConfig
        ))
        .update_object_storage_wif_config(not_implemented!(
            pb::UpdateObjectStorageWifConfigRequest,
            pb::ObjectStorageWifConfig
        ))
        .delete_object_storage_wif_config(not_implemented!(
            pb::DeleteObjectStorageWifConfigRequest,
            pbjson_types::Empty
        ))
        .get_file_system_snapshot_bucket_config(settings::get_file_system_snapshot_bucket_config)
        .update_file_system_snapshot_bucket_config(settings::update_file_system_snapshot_bucket_config)
        .create_secret_store(settings::create_secret_store)
        .get_secret_store(settings::get_secret_store)
        .list_secret_stores(settings::list_secret_stores)
        .update_secret_store(settings::update_secret_store)
        .delete_secret_store(settings::delete_secret_store)
        .with_state(app.clone())
        .build();

    let (volume_routes, volume_grpc) = VolumeServiceTonicCompatibleBuilder::new()
        .create_volume(volumes::create_volume)
        .get_volume(volumes::get_volume)
        .list_volumes(volumes::list_volumes)
        .update_volume(volumes::update_volume)
        .delete_volume(volumes::delete_volume)
        .validate_volume(volumes::validate_volume)
        .with_state(app.clone())
        .build();

    let (emulator_routes, emulator_grpc) = EmulatorServiceTonicCompatibleBuilder::new()
        .get_values(emulator::get_values)
        .create_tenant(tenants::create_tenant)
        .delete_tenant(tenants::delete_tenant)
        .list_tenants(tenants::list_tenants)
        .add_fault(faults::add_fault)
        .list_faults(faults::list_faults)
        .remove_fault(faults::remove_fault)
        .clear_faults(faults::clear_faults)
        .prune_images(emulator::prune_images)
        .load_images(images::load_images)
        .list_images(images::list_images)
        .remove_image(images::remove_image)
        .apply_values(emulator::apply_values)
        .list_pods(emulator::list_pods)
        .delete_pod(emulator::delete_pod)
        .list_nodes(emulator::list_nodes)
        .list_events(emulator::list_events)
        .list_config_maps(emulator::list_config_maps)
        .list_namespaces(emulator::list_namespaces)
        .list_jobs(emulator::list_jobs)
        .list_slurm_nodes(emulator::list_slurm_nodes)
        .list_partitions(emulator::list_partitions)
        .list_slurm_users(emulator::list_slurm_users)
        .cancel_job(emulator::cancel_job)
        .submit_batch_job(emulator::submit_batch_job)
        .resume_node(emulator::resume_node)
        .drain_node(emulator::drain_node)
        .get_slurm_config(emulator::get_slurm_config)
        .get_clock(emulator::get_clock)
        .freeze_clock(emulator::freeze_clock)
        .advance_clock(emulator::advance_clock)
        .resume_clock(emulator::resume_clock)
        .reset(emulator::reset)
        .with_state(app.clone())
        .build();

    let (health_reporter, health_grpc) = tonic_health::server::health_reporter();
    for service in cwsandbox_surface::catalogue::SERVED_SERVICES {
        health_reporter.set_service_status(*service, tonic_health::ServingStatus::Serving).await;
    }
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(cwsandbox_api::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("the embedded descriptor set is valid");
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(cwsandbox_api::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .expect("the embedded descriptor set is valid");

    let switch = MakeServiceBuilder::new()
        .receive_max_bytes(limit)
        .send_max_bytes(limit)
        .add_routers([
            sandbox_routes,
            data_plane_routes,
            discovery_routes,
            runner_routes,
            template_routes,
            settings_routes,
            volume_routes,
            emulator_routes,
        ])
        .add_grpc_service(sandbox_grpc.max_decoding_message_size(limit).max_encoding_message_size(limit))
        .add_grpc_service(data_plane_grpc)
        .add_grpc_service(discovery_grpc.max_decoding_message_size(limit).max_encoding_message_size(limit))
        .add_grpc_service(runner_grpc.max_decoding_message_size(limit).max_encoding_message_size(limit))
        .add_grpc_service(template_grpc.max_decoding_message_size(limit).max_encoding_message_size(limit))
        .add_grpc_service(settings_grpc.max_decoding_message_size(limit).max_encoding_message_size(limit))
        .add_grpc_service(volume_grpc.max_decoding_message_size(limit).max_encoding_message_size(limit))
        .add_grpc_service(emulator_grpc.max_decoding_message_size(limit).max_encoding_message_size(limit))
        .add_grpc_service(health_grpc)
        .add_grpc_service(reflection_v1)
        .add_grpc_service(reflection_v1alpha)
        .build();

    let switch = Guard::new(app.clone(), request_limits, switch);

    // tonic-web answers 400 to any HTTP/1.1 request that is not gRPC-Web, so only gRPC-Web goes
    // through it; everything else reaches the guarded content-type switch directly.
    let grpc_web = tonic_web::GrpcWebLayer::new()
        .layer(switch.clone().map_request(|request: Request<tonic::body::Body>| request.map(Body::new)));
    let dispatch = tower::service_fn(move |request: Request<Body>| {
        let is_grpc_web = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|content_type| content_type.starts_with("application/grpc-web"));
        let switch = switch.clone();
        let grpc_web = grpc_web.clone();
        async move {
            if is_grpc_web {
                let response = grpc_web.oneshot(request).await?;
                Ok::<_, Infallible>(response.map(Body::new))
            } else {
                let response = switch.oneshot(request).await?;
                Ok(cwsandbox_surface::errors::enrich_connect_error(response, None).await)
            }
        }
    });
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(cwsandbox_dashboard::routes(app.clone()))
        .merge(cwsandbox_surface::kube::routes(app))
        .fallback_service(dispatch)
}

/// The request guard's limits, from the transport settings.
fn request_limits(app: &App, transport: &Transport) -> RequestLimits {
    RequestLimits {
        max_request_bytes: transport.max_request_bytes,
        max_message_bytes: app.limits().max_message_bytes,
        max_decoded_request_bytes: transport.max_decoded_request_bytes,
        request_memory_bytes: transport.request_memory_bytes,
        body_read_timeout: transport.body_read_timeout,
    }
}

/// SandboxDataPlaneService's Connect routes and gRPC service: the data handlers, which the
/// gateway's SandboxService serves too.
fn data_plane(
    app: &App,
) -> (
    Router,
    impl tower::Service<
        Request<tonic::body::Body>,
        Response = http::Response<tonic::body::Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + tonic::server::NamedService
    + Clone
    + Send
    + Sync
    + 'static,
) {
    let limit = app.limits().max_message_bytes;
    let (routes, grpc) = SandboxDataPlaneServiceTonicCompatibleBuilder::new()
        .exec(data::exec)
        .stream_exec(data::stream_exec)
        .stream_logs(data::stream_logs)
        .write_file(data::write_file)
        .read_file(data::read_file)
        .with_state(app.clone())
        .build();
    (routes, grpc.max_decoding_message_size(limit).max_encoding_message_size(limit))
}

/// The direct data plane's endpoint (`cwsandbox_surface::direct`): SandboxDataPlaneService only, over gRPC
/// and Connect, behind the same request guard, which takes the caller from the connection's
/// client certificate. Its own guard has its own request memory budget.
pub fn direct_router(app: App, transport: &Transport) -> Router {
    let limit = app.limits().max_message_bytes;
    let (routes, grpc) = data_plane(&app);
    let switch = MakeServiceBuilder::new()
        .receive_max_bytes(limit)
        .send_max_bytes(limit)
        .add_routers([routes])
        .add_grpc_service(grpc)
        .build();
    let guarded = Guard::new(app.clone(), request_limits(&app, transport), switch);
    let dispatch = tower::service_fn(move |request: Request<Body>| {
        let guarded = guarded.clone();
        async move {
            let response = guarded.oneshot(request).await?;
            Ok::<_, Infallible>(cwsandbox_surface::errors::enrich_connect_error(response, None).await)
        }
    });
    Router::new().fallback_service(dispatch)
}
