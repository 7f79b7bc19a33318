//! Runner administration and the emulator's own API, both over Connect JSON.
//!
//! RunnerManagementService's JSON names are public, its field numbers are not: JSON is what lets
//! the same code talk to `api.coreweave.com` and to the emulator.

use cwsandbox_api::emulator_v1 as emu;
use cwsandbox_api::emulator_v1::emulator_service_connect_client::EmulatorServiceClient;
use cwsandbox_api::sandbox_v1::runner_management_service_connect_client::RunnerManagementServiceClient;
use cwsandbox_api::wkt::FieldMask;

use crate::{Config, Error, Result, pb};

fn bearer(config: &Config) -> String {
    format!("Bearer {}", config.api_key)
}

/// RunnerManagementService on the control plane.
pub struct RunnerAdmin {
    client: RunnerManagementServiceClient,
}

impl std::fmt::Debug for RunnerAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerAdmin").finish_non_exhaustive()
    }
}

impl RunnerAdmin {
    /// A client for `config.control_plane_url`.
    pub fn new(config: &Config) -> Result<RunnerAdmin> {
        let client = RunnerManagementServiceClient::builder(config.control_plane_url.clone())
            .use_json()
            .try_default_header("authorization", bearer(config))
            .map_err(|_| Error::Config("the API key is not a valid header value".to_owned()))?
            .timeout(config.timeout)
            .build()
            .map_err(|error| Error::Config(format!("control plane URL {:?}: {error}", config.control_plane_url)))?;
        Ok(RunnerAdmin { client })
    }

    /// One runner.
    pub async fn get(&self, runner_id: &str) -> Result<pb::ManagedRunner> {
        let request = pb::GetManagedRunnerRequest { runner_id: runner_id.to_owned() };
        Ok(self.client.get_managed_runner(&request).await?.into_inner())
    }

    /// Every runner, following pages; optionally filtered by cluster and zone.
    pub async fn list(&self, cluster_id: &str, zone: &str) -> Result<Vec<pb::ManagedRunner>> {
        let mut request = pb::ListManagedRunnersRequest {
            cluster_id: cluster_id.to_owned(),
            zone: zone.to_owned(),
            ..Default::default()
        };
        let mut all = Vec::new();
        loop {
            let page = self.client.list_managed_runners(&request).await?.into_inner();
            all.extend(page.managed_runners);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            request.page_token = page.next_page_token;
        }
    }

    /// Creates a runner.
    pub async fn create(&self, runner: pb::ManagedRunner, request_id: &str) -> Result<pb::ManagedRunner> {
        let request =
            pb::CreateManagedRunnerRequest { managed_runner: Some(runner), request_id: request_id.to_owned() };
        Ok(self.client.create_managed_runner(&request).await?.into_inner())
    }

    /// Deletes a runner.
    pub async fn delete(&self, runner_id: &str, allow_missing: bool) -> Result<()> {
        let request = pb::DeleteManagedRunnerRequest { runner_id: runner_id.to_owned(), allow_missing };
        self.client.delete_managed_runner(&request).await?;
        Ok(())
    }

    /// Updates the fields named by `paths`.
    pub async fn update(
        &self,
        runner_id: &str,
        runner: pb::ManagedRunner,
        paths: &[&str],
    ) -> Result<pb::ManagedRunner> {
        let request = pb::UpdateManagedRunnerRequest {
            runner_id: runner_id.to_owned(),
            managed_runner: Some(runner),
            update_mask: Some(FieldMask { paths: paths.iter().map(|p| (*p).to_owned()).collect() }),
        };
        Ok(self.client.update_managed_runner(&request).await?.into_inner())
    }

    /// Replaces the whole policy (mask `policy`) if its etag is still `etag`; a concurrent change
    /// fails with FAILED_PRECONDITION ([`Error::is_stale_etag`]).
    pub async fn update_policy(&self, runner_id: &str, policy: pb::Policy, etag: &str) -> Result<pb::ManagedRunner> {
        let runner = pb::ManagedRunner { policy: Some(policy), etag: etag.to_owned(), ..Default::default() };
        self.update(runner_id, runner, &["policy"]).await
    }
}

/// The emulator's own API (`coreweave.sandbox.emulator.v1.EmulatorService`), admin only.
pub struct EmulatorAdmin {
    client: EmulatorServiceClient,
    config: Config,
}

impl std::fmt::Debug for EmulatorAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatorAdmin").finish_non_exhaustive()
    }
}

impl EmulatorAdmin {
    /// A client for `config.base_url`.
    pub fn new(config: &Config) -> Result<EmulatorAdmin> {
        let client = EmulatorServiceClient::builder(config.base_url.clone())
            .use_json()
            .try_default_header("authorization", bearer(config))
            .map_err(|_| Error::Config("the API key is not a valid header value".to_owned()))?
            .timeout(config.timeout)
            .build()
            .map_err(|error| Error::Config(format!("base URL {:?}: {error}", config.base_url)))?;
        Ok(EmulatorAdmin { client, config: config.clone() })
    }

    /// The raw Connect client, for every other RPC.
    pub fn raw(&self) -> &EmulatorServiceClient {
        &self.client
    }

    /// The values in force, as YAML.
    pub async fn get_values(&self) -> Result<String> {
        Ok(self.client.get_values(&emu::GetValuesRequest::default()).await?.into_inner().yaml)
    }

    /// The values in force (YAML) and their JSON Schema.
    pub async fn values_with_schema(&self) -> Result<(String, String)> {
        let response = self.client.get_values(&emu::GetValuesRequest { include_schema: true }).await?.into_inner();
        Ok((response.yaml, response.json_schema))
    }

    /// Applies a YAML values document like `helm upgrade -f` (merge): the values now in force and
    /// what changed (`changes`, empty for a no-op, which restarts nothing).
    pub async fn apply_values(&self, yaml: &str, validate_only: bool) -> Result<emu::ApplyValuesResponse> {
        let request = emu::ApplyValuesRequest {
            document: Some(emu::apply_values_request::Document::Yaml(yaml.to_owned())),
            mode: emu::ApplyMode::Merge as i32,
            validate_only,
        };
        Ok(self.client.apply_values(&request).await?.into_inner())
    }

    /// Slurm jobs: queue rows (`squeue`, `scontrol show job`) and accounting rows (`sacct`), with
    /// the emulator's time of the listing.
    pub async fn list_jobs(&self, request: &emu::ListJobsRequest) -> Result<emu::ListJobsResponse> {
        Ok(self.client.list_jobs(request).await?.into_inner())
    }

    /// Slurm nodes in configuration order.
    pub async fn list_slurm_nodes(&self, request: &emu::ListSlurmNodesRequest) -> Result<Vec<emu::SlurmNode>> {
        Ok(self.client.list_slurm_nodes(request).await?.into_inner().nodes)
    }

    /// Slurm partitions.
    pub async fn list_partitions(&self) -> Result<Vec<emu::Partition>> {
        Ok(self.client.list_partitions(&emu::ListPartitionsRequest {}).await?.into_inner().partitions)
    }

    /// `scancel <job_id>` as `uid` (the caller's uid when `None`).
    pub async fn cancel_job(&self, job_id: u32, uid: Option<u32>) -> Result<Option<emu::Job>> {
        Ok(self.client.cancel_job(&emu::CancelJobRequest { job_id, uid }).await?.into_inner().job)
    }

    /// The emulator's clock.
    pub async fn clock(&self) -> Result<emu::Clock> {
        Ok(self.client.get_clock(&emu::GetClockRequest {}).await?.into_inner().clock.unwrap_or_default())
    }

    /// Stops the emulator's clock.
    pub async fn freeze_clock(&self) -> Result<emu::Clock> {
        Ok(self.client.freeze_clock(&emu::FreezeClockRequest {}).await?.into_inner().clock.unwrap_or_default())
    }

    /// Moves the emulator's clock forward; every timer due by then has fired when this returns.
    pub async fn advance_clock(&self, by: std::time::Duration) -> Result<emu::Clock> {
        let duration = pbjson_types::Duration {
            seconds: i64::try_from(by.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(by.subsec_nanos()).unwrap_or(0),
        };
        let request = emu::AdvanceClockRequest { duration: Some(duration) };
        Ok(self.client.advance_clock(&request).await?.into_inner().clock.unwrap_or_default())
    }

    /// `sbatch`: an ordinary Slurm batch job.
    pub async fn submit_batch_job(&self, request: &emu::SubmitBatchJobRequest) -> Result<Option<emu::Job>> {
        Ok(self.client.submit_batch_job(request).await?.into_inner().job)
    }

    /// `scontrol update nodename=… state=resume`: a drained node takes jobs again.
    pub async fn resume_node(&self, node_name: &str) -> Result<Option<emu::SlurmNode>> {
        let request = emu::ResumeNodeRequest { node_name: node_name.to_owned() };
        Ok(self.client.resume_node(&request).await?.into_inner().node)
    }

    /// `scontrol update nodename=… state=drain reason=…` as `uid` (the caller's uid when `None`):
    /// the node takes no new job.
    pub async fn drain_node(&self, node_name: &str, reason: &str, uid: Option<u32>) -> Result<Option<emu::SlurmNode>> {
        let request = emu::DrainNodeRequest { node_name: node_name.to_owned(), reason: reason.to_owned(), uid };
        Ok(self.client.drain_node(&request).await?.into_inner().node)
    }

    /// slurm.conf as the controller holds it (`scontrol show config`). Any role may ask.
    pub async fn slurm_config(&self) -> Result<emu::SlurmConfig> {
        let response = self.client.get_slurm_config(&emu::GetSlurmConfigRequest {}).await?.into_inner();
        Ok(response.config.unwrap_or_default())
    }

    /// The Slurm users of the values in force (name, uid), for `-u <name>`, and the uid of this
    /// client's token: what the Slurm commands act as by default. Any role may ask.
    pub async fn slurm_users(&self) -> Result<(Vec<(String, u32)>, u32)> {
        let response = self.client.list_slurm_users(&emu::ListSlurmUsersRequest {}).await?.into_inner();
        let users = response.users.into_iter().map(|user| (user.name, user.uid)).collect();
        Ok((users, response.caller_uid))
    }

    /// A fresh world.
    pub async fn reset(&self) -> Result<()> {
        self.client.reset(&emu::ResetRequest::default()).await?;
        Ok(())
    }

    /// Resets one organization's part only (its sandboxes, Pods and jobs); every other
    /// organization, the runners and the clock are kept. The operator may name any organization,
    /// an organization's sandbox_admin only its own. Returns how many running Pods were stopped.
    pub async fn reset_organization(&self, organization: &str) -> Result<i32> {
        let request = emu::ResetRequest { organization: organization.to_owned() };
        Ok(self.client.reset(&request).await?.into_inner().stopped_pods)
    }

    /// Lets the emulator's clock run again.
    pub async fn resume_clock(&self) -> Result<emu::Clock> {
        Ok(self.client.resume_clock(&emu::ResumeClockRequest {}).await?.into_inner().clock.unwrap_or_default())
    }

    /// A tenant: a fresh organization with a user token and an admin token (the operator's).
    pub async fn create_tenant(&self, request: &emu::CreateTenantRequest) -> Result<emu::Tenant> {
        let tenant = self.client.create_tenant(request).await?.into_inner().tenant;
        tenant.ok_or_else(|| Error::Config("the emulator answered CreateTenant without a tenant".to_owned()))
    }

    /// Ends a tenant: its tokens stop working and its part of the world is reset. Returns how
    /// many running Pods were stopped.
    pub async fn delete_tenant(&self, organization: &str) -> Result<i32> {
        let request = emu::DeleteTenantRequest { organization: organization.to_owned() };
        Ok(self.client.delete_tenant(&request).await?.into_inner().stopped_pods)
    }

    /// The tenants, in creation order.
    pub async fn list_tenants(&self) -> Result<Vec<emu::Tenant>> {
        Ok(self.client.list_tenants(&emu::ListTenantsRequest {}).await?.into_inner().tenants)
    }

    /// Installs a fault; returns it with its id.
    pub async fn add_fault(&self, fault: emu::Fault) -> Result<emu::Fault> {
        let added = self.client.add_fault(&emu::AddFaultRequest { fault: Some(fault) }).await?.into_inner().fault;
        added.ok_or_else(|| Error::Config("the emulator answered AddFault without the fault".to_owned()))
    }

    /// The faults in force in the caller's scope, with their counts.
    pub async fn list_faults(&self) -> Result<Vec<emu::Fault>> {
        Ok(self.client.list_faults(&emu::ListFaultsRequest {}).await?.into_inner().faults)
    }

    /// Removes one fault; returns it with its final counts.
    pub async fn remove_fault(&self, id: &str) -> Result<Option<emu::Fault>> {
        Ok(self.client.remove_fault(&emu::RemoveFaultRequest { id: id.to_owned() }).await?.into_inner().fault)
    }

    /// Removes every fault in the caller's scope; returns how many.
    pub async fn clear_faults(&self) -> Result<i32> {
        Ok(self.client.clear_faults(&emu::ClearFaultsRequest {}).await?.into_inner().removed)
    }

    /// Loads the images of the archive at `path` (a `docker save` file or an OCI layout
    /// tarball) into the emulator's image cache (cluster_admin). The file is streamed in 1 MiB
    /// chunks over gRPC (LoadImages is client-streaming), with no deadline of its own: an
    /// archive of gigabytes takes what it takes.
    pub async fn load_images(&self, path: &std::path::Path) -> Result<emu::LoadImagesResponse> {
        use std::io::Read;
        const CHUNK: usize = 1 << 20;
        let mut file = std::fs::File::open(path)
            .map_err(|error| Error::Config(format!("image archive {}: {error}", path.display())))?;
        let token: tonic::metadata::MetadataValue<tonic::metadata::Ascii> = format!("Bearer {}", self.config.api_key)
            .parse()
            .map_err(|_| Error::Config("the API key is not a valid header value".to_owned()))?;
        let channel = tonic::transport::Endpoint::from_shared(self.config.base_url.clone())
            .map_err(|error| Error::Config(format!("base URL {:?}: {error}", self.config.base_url)))?
            .connect_timeout(std::time::Duration::from_secs(10))
            .connect_lazy();
        let mut client =
            emu::emulator_service_client::EmulatorServiceClient::with_interceptor(channel, crate::Auth::new(token))
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(2 * CHUNK);
        let (sender, receiver) = tokio::sync::mpsc::channel::<emu::LoadImagesRequest>(4);
        let reader = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut buffer = vec![0u8; CHUNK];
            loop {
                let mut have = 0;
                while have < CHUNK {
                    let n = file.read(&mut buffer[have..])?;
                    if n == 0 {
                        break;
                    }
                    have += n;
                }
                if have == 0 {
                    return Ok(());
                }
                let chunk = emu::LoadImagesRequest { chunk: buffer[..have].to_vec() };
                if sender.blocking_send(chunk).is_err() || have < CHUNK {
                    return Ok(());
                }
            }
        });
        let response = client.load_images(tokio_stream::wrappers::ReceiverStream::new(receiver)).await;
        match reader.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(Error::Config(format!("reading {}: {error}", path.display()))),
            Err(error) => return Err(Error::Protocol(format!("reading {}: {error}", path.display()))),
        }
        Ok(response?.into_inner())
    }

    /// The images of the emulator's image cache, most recently used first (cluster_admin).
    pub async fn list_images(&self) -> Result<emu::ListImagesResponse> {
        Ok(self.client.list_images(&emu::ListImagesRequest {}).await?.into_inner())
    }

    /// Removes the name `name` from the image cache, and its image when it was the last name;
    /// refused for an image a running sandbox uses (cluster_admin).
    pub async fn remove_image(&self, name: &str) -> Result<emu::RemoveImageResponse> {
        Ok(self.client.remove_image(&emu::RemoveImageRequest { name: name.to_owned() }).await?.into_inner())
    }

    /// Removes the cached images no sandbox runs on; says what went (cluster_admin).
    pub async fn prune_images(&self) -> Result<emu::PruneImagesResponse> {
        Ok(self.client.prune_images(&emu::PruneImagesRequest {}).await?.into_inner())
    }
}
