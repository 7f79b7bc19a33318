//! The API as the embedded descriptor set (`cwsandbox_api::FILE_DESCRIPTOR_SET`) describes it,
//! decoded once per process: every RPC by its HTTP path, every message type by its full name.
//!
//! The request guard (shapes, payload limits, the `sandbox_id` a fault matches), the decoded-size
//! estimator, the fidelity check and the fault rules all read this one table, so they cannot
//! disagree about what the API is.

use std::collections::HashMap;
use std::sync::OnceLock;

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};

/// RPCs whose request carries file content, allowed up to `max_message_bytes` rather than
/// `max_request_bytes`.
const PAYLOAD_METHODS: &[&str] =
    &["/coreweave.sandbox.v1.SandboxService/WriteFile", "/coreweave.sandbox.v1.SandboxDataPlaneService/WriteFile"];

/// The gRPC services the emulator answers for (health reports each as SERVING); the descriptor
/// set holds others it does not serve.
pub const SERVED_SERVICES: &[&str] = &[
    "coreweave.sandbox.v1.SandboxService",
    "coreweave.sandbox.v1.SandboxDataPlaneService",
    "coreweave.sandbox.v1.DiscoveryService",
    "coreweave.sandbox.v1.RunnerManagementService",
    "coreweave.sandbox.v1.SandboxTemplateService",
    "coreweave.sandbox.v1.SettingsService",
    "coreweave.sandbox.v1.VolumeService",
    "coreweave.sandbox.emulator.v1.EmulatorService",
];

/// The RPCs the code acts on by name (the data plane's operations, the one RPC domain faults
/// apply to), as the descriptor set names them: a test checks each against the catalogue, so a
/// name that is not the API's fails the build's tests rather than matching nothing.
pub mod names {
    /// The sandbox service, by its full name.
    pub const SANDBOX_SERVICE: &str = "coreweave.sandbox.v1.SandboxService";
    /// The direct data plane's service, by its full name.
    pub const DATA_PLANE_SERVICE: &str = "coreweave.sandbox.v1.SandboxDataPlaneService";
    /// `SandboxService/CreateSandbox`.
    pub const CREATE_SANDBOX: &str = "CreateSandbox";
    /// The data operations, served by both services.
    pub const EXEC: &str = "Exec";
    /// Exec with streams both ways.
    pub const STREAM_EXEC: &str = "StreamExec";
    /// The main process's output.
    pub const STREAM_LOGS: &str = "StreamLogs";
    /// A file into the sandbox.
    pub const WRITE_FILE: &str = "WriteFile";
    /// A file out of the sandbox.
    pub const READ_FILE: &str = "ReadFile";
    /// Every data operation.
    pub const DATA_OPERATIONS: [&str; 5] = [EXEC, STREAM_EXEC, STREAM_LOGS, WRITE_FILE, READ_FILE];
}

/// Who may call an RPC: checked by the request guard, once, before the request's body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `sandbox_user` (an organization's admin holds it too): sandboxes, their data plane,
    /// discovery, templates, volumes, settings.
    SandboxUser,
    /// `sandbox_admin`: RunnerManagementService, and the template writes (an organization's
    /// templates are its admins' to change, its users' to read).
    SandboxAdmin,
    /// `sandbox_admin` or `cluster_admin`, each in its scope: the emulator's cluster views and an
    /// organization's changes (Pods, Events, Slurm jobs, faults, Reset).
    Administrators,
    /// Any role, in the caller's scope: the Slurm views any Slurm user reads, and the clock.
    Readers,
    /// `cluster_admin` only: the calls that concern the whole cluster (values, nodes, the clock,
    /// tenants, the image cache).
    Operator,
}

/// EmulatorService's methods for every role.
const EMULATOR_READERS: &[&str] =
    &["ListJobs", "ListSlurmNodes", "ListPartitions", "ListSlurmUsers", "GetSlurmConfig", "GetClock"];
/// EmulatorService's methods for the cluster operator only.
const EMULATOR_OPERATOR: &[&str] = &[
    "GetValues",
    "ApplyValues",
    "ResumeNode",
    "DrainNode",
    "FreezeClock",
    "AdvanceClock",
    "ResumeClock",
    "CreateTenant",
    "DeleteTenant",
    "ListTenants",
    "LoadImages",
    "ListImages",
    "RemoveImage",
    "PruneImages",
];

/// SandboxTemplateService's methods that change templates.
const TEMPLATE_WRITES: &[&str] = &["CreateSandboxTemplate", "UpdateSandboxTemplate", "DeleteSandboxTemplate"];

/// Who may call `service`'s `method`.
fn access_of(service: &str, method: &str) -> Access {
    match service {
        "RunnerManagementService" => Access::SandboxAdmin,
        "SandboxTemplateService" if TEMPLATE_WRITES.contains(&method) => Access::SandboxAdmin,
        "SettingsService"
            if method.starts_with("Update") || method.starts_with("Delete") || method.starts_with("Create") =>
        {
            Access::SandboxAdmin
        }
        "EmulatorService" if EMULATOR_READERS.contains(&method) => Access::Readers,
        "EmulatorService" if EMULATOR_OPERATOR.contains(&method) => Access::Operator,
        "EmulatorService" => Access::Administrators,
        _ => Access::SandboxUser,
    }
}

/// One RPC of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    /// `/package.Service/Method`, as HTTP/2 and Connect address it.
    pub path: String,
    /// The proto package (`coreweave.sandbox.v1`).
    pub package: String,
    /// The service's short name (`SandboxService`).
    pub service: String,
    /// The method's name (`CreateSandbox`).
    pub name: String,
    /// The request message's full name (`.coreweave.sandbox.v1.CreateSandboxRequest`).
    pub input: String,
    /// Whether the client streams requests.
    pub client_streaming: bool,
    /// Whether the server streams answers.
    pub server_streaming: bool,
    /// Whether the request carries file content (a larger size limit).
    pub payload: bool,
    /// The number of the request's `sandbox_id` field, if it has one (faults match it by tag).
    pub sandbox_id_field: Option<u32>,
    /// Who may call it.
    pub access: Access,
}

impl Method {
    /// `package.Service/Method`, as fault rules name it.
    pub fn qualified_name(&self) -> &str {
        self.path.strip_prefix('/').unwrap_or(&self.path)
    }

    /// Whether this is `service`'s (full name, as in [`names`]) method `name`.
    pub fn is(&self, service: &str, name: &str) -> bool {
        self.name == name
            && service.strip_prefix(self.package.as_str()).and_then(|rest| rest.strip_prefix('.'))
                == Some(self.service.as_str())
    }
}

/// What a field holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldKind {
    /// A nested message or a map entry, by full name (`.pkg.Message`).
    Message(String),
    /// `string` or `bytes`.
    Text,
    /// Numbers, booleans, enums.
    Scalar,
}

/// One field of a message type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field's name in the proto file (`sandbox_id`).
    pub name: String,
    /// What it holds.
    pub kind: FieldKind,
    /// `repeated` (map fields are repeated entries).
    pub repeated: bool,
    /// A map field: its kind is the generated entry message.
    pub map: bool,
}

impl Field {
    /// The message type of a message field that is not a map.
    pub fn message_type(&self) -> Option<&str> {
        match &self.kind {
            FieldKind::Message(name) if !self.map => Some(name),
            _ => None,
        }
    }
}

/// One message type: its fields by number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageType {
    /// The fields, by field number.
    pub fields: HashMap<u32, Field>,
}

/// Every RPC and message type of the API.
#[derive(Debug)]
pub struct Catalogue {
    methods: HashMap<String, Method>,
    /// In the descriptor set's order (files, services, methods), for listings.
    order: Vec<String>,
    messages: HashMap<String, MessageType>,
}

impl Catalogue {
    /// The catalogue of the embedded descriptor set, decoded on first use.
    pub fn get() -> &'static Catalogue {
        static CATALOGUE: OnceLock<Catalogue> = OnceLock::new();
        CATALOGUE.get_or_init(|| {
            let set = prost_types::FileDescriptorSet::decode(cwsandbox_api::FILE_DESCRIPTOR_SET)
                .expect("the embedded descriptor set is generated by the build and valid");
            Catalogue::from_set(&set)
        })
    }

    fn from_set(set: &prost_types::FileDescriptorSet) -> Catalogue {
        let mut raw = Vec::new();
        let mut map_entries = std::collections::HashSet::new();
        fn collect<'a>(
            prefix: &str,
            message: &'a prost_types::DescriptorProto,
            raw: &mut Vec<(String, &'a prost_types::DescriptorProto)>,
            map_entries: &mut std::collections::HashSet<String>,
        ) {
            let name = format!("{prefix}.{}", message.name());
            if message.options.as_ref().is_some_and(|options| options.map_entry()) {
                map_entries.insert(name.clone());
            }
            for nested in &message.nested_type {
                collect(&name, nested, raw, map_entries);
            }
            raw.push((name, message));
        }
        for file in &set.file {
            let prefix = if file.package().is_empty() { String::new() } else { format!(".{}", file.package()) };
            for message in &file.message_type {
                collect(&prefix, message, &mut raw, &mut map_entries);
            }
        }
        let messages: HashMap<String, MessageType> = raw
            .into_iter()
            .map(|(name, message)| {
                let fields = message
                    .field
                    .iter()
                    .map(|field| {
                        let kind = match field.r#type() {
                            Type::Message | Type::Group => FieldKind::Message(field.type_name().to_owned()),
                            Type::String | Type::Bytes => FieldKind::Text,
                            _ => FieldKind::Scalar,
                        };
                        let map = matches!(&kind, FieldKind::Message(entry) if map_entries.contains(entry));
                        let repeated = field.label() == Label::Repeated;
                        (field.number() as u32, Field { name: field.name().to_owned(), kind, repeated, map })
                    })
                    .collect();
                (name, MessageType { fields })
            })
            .collect();

        let mut methods = HashMap::new();
        let mut order = Vec::new();
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                    let input = method.input_type().to_owned();
                    let sandbox_id_field = messages.get(&input).and_then(|message| {
                        message.fields.iter().find(|(_, field)| field.name == "sandbox_id").map(|(number, _)| *number)
                    });
                    order.push(path.clone());
                    methods.insert(
                        path.clone(),
                        Method {
                            payload: PAYLOAD_METHODS.contains(&path.as_str()),
                            path,
                            package: file.package().to_owned(),
                            service: service.name().to_owned(),
                            name: method.name().to_owned(),
                            input,
                            client_streaming: method.client_streaming(),
                            server_streaming: method.server_streaming(),
                            sandbox_id_field,
                            access: access_of(service.name(), method.name()),
                        },
                    );
                }
            }
        }
        Catalogue { methods, order, messages }
    }

    /// The RPC at an HTTP path (`/coreweave.sandbox.v1.SandboxService/GetSandbox`).
    pub fn method(&self, path: &str) -> Option<&Method> {
        self.methods.get(path)
    }

    /// Every RPC, in the descriptor set's order.
    pub fn methods(&self) -> impl Iterator<Item = &Method> {
        self.order.iter().filter_map(|path| self.methods.get(path))
    }

    /// A message type by full name (`.coreweave.sandbox.v1.Container`).
    pub fn message(&self, name: &str) -> Option<&MessageType> {
        self.messages.get(name)
    }

    /// Every message type, by full name.
    pub fn messages(&self) -> impl Iterator<Item = (&str, &MessageType)> {
        self.messages.iter().map(|(name, message)| (name.as_str(), message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_knows_every_rpc_its_shape_and_its_messages() {
        let catalogue = Catalogue::get();
        let create = catalogue.method("/coreweave.sandbox.v1.SandboxService/CreateSandbox").expect("CreateSandbox");
        assert_eq!(create.qualified_name(), "coreweave.sandbox.v1.SandboxService/CreateSandbox");
        assert_eq!((create.service.as_str(), create.name.as_str()), ("SandboxService", "CreateSandbox"));
        assert!(!create.client_streaming && !create.server_streaming && !create.payload);
        let exec = catalogue.method("/coreweave.sandbox.v1.SandboxService/StreamExec").expect("StreamExec");
        assert!(exec.client_streaming && exec.server_streaming);
        let write = catalogue.method("/coreweave.sandbox.v1.SandboxDataPlaneService/WriteFile").expect("WriteFile");
        assert!(write.payload);
        let get = catalogue.method("/coreweave.sandbox.v1.SandboxService/GetSandbox").expect("GetSandbox");
        let input = catalogue.message(&get.input).expect("GetSandboxRequest");
        assert_eq!(get.sandbox_id_field.map(|number| input.fields[&number].name.as_str()), Some("sandbox_id"));
        assert!(catalogue.methods().any(|method| method.service == "RunnerManagementService"));
        assert!(catalogue.method("/coreweave.sandbox.v1.SandboxService/NoSuchMethod").is_none());
        // The names the code acts on are the API's.
        let path = |service: &str, method: &str| format!("/{service}/{method}");
        assert!(create.is(names::SANDBOX_SERVICE, names::CREATE_SANDBOX));
        assert!(
            !create.is(names::DATA_PLANE_SERVICE, names::CREATE_SANDBOX) && !exec.is(names::SANDBOX_SERVICE, "Exec")
        );
        for operation in names::DATA_OPERATIONS {
            for service in [names::SANDBOX_SERVICE, names::DATA_PLANE_SERVICE] {
                assert!(catalogue.method(&path(service, operation)).is_some(), "{service}/{operation}");
            }
        }

        let access = |path: &str| catalogue.method(path).map(|method| method.access);
        assert_eq!(access("/coreweave.sandbox.v1.SandboxService/CreateSandbox"), Some(Access::SandboxUser));
        assert_eq!(access("/coreweave.sandbox.v1.SandboxDataPlaneService/ReadFile"), Some(Access::SandboxUser));
        assert_eq!(
            access("/coreweave.sandbox.v1.RunnerManagementService/UpdateManagedRunner"),
            Some(Access::SandboxAdmin)
        );
        // An organization's settings: anyone of it reads them, its administrators change them.
        assert_eq!(
            access("/coreweave.sandbox.v1.SettingsService/GetFileSystemSnapshotBucketConfig"),
            Some(Access::SandboxUser)
        );
        assert_eq!(
            access("/coreweave.sandbox.v1.SettingsService/UpdateFileSystemSnapshotBucketConfig"),
            Some(Access::SandboxAdmin)
        );
        assert_eq!(access("/coreweave.sandbox.emulator.v1.EmulatorService/ListPods"), Some(Access::Administrators));
        assert_eq!(access("/coreweave.sandbox.emulator.v1.EmulatorService/ListJobs"), Some(Access::Readers));
        assert_eq!(access("/coreweave.sandbox.emulator.v1.EmulatorService/ApplyValues"), Some(Access::Operator));
        // Every name the tables give is a method of EmulatorService: a renamed RPC cannot fall
        // silently to the default.
        let emulator: Vec<&str> = catalogue
            .methods()
            .filter(|method| method.service == "EmulatorService")
            .map(|method| method.name.as_str())
            .collect();
        for name in EMULATOR_READERS.iter().chain(EMULATOR_OPERATOR) {
            assert!(emulator.contains(name), "{name} is not a method of EmulatorService");
        }
        for name in TEMPLATE_WRITES {
            assert!(
                catalogue.methods().any(|method| method.service == "SandboxTemplateService" && method.name == *name),
                "{name} is not a method of SandboxTemplateService"
            );
        }

        // Maps are told from repeated messages: a map's kind is its entry, not a message type.
        let container = catalogue.message(".coreweave.sandbox.v1.Container").expect("Container");
        let environment = container.fields.values().find(|field| field.name == "environment_variables").expect("env");
        assert!(environment.map && environment.repeated && environment.message_type().is_none());
        let sandbox = catalogue.message(".coreweave.sandbox.v1.Sandbox").expect("Sandbox");
        assert!(sandbox.fields.values().any(|field| field.message_type().is_some()));
    }
}
