//! Registry credentials from a Docker-style `config.json` (what `docker login` writes, and what
//! a Kubernetes `dockerconfigjson` pull secret holds).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;
use tracing::{debug, warn};

use crate::reference::DOCKER_HUB;

/// The key `docker login` uses for Docker Hub.
const DOCKER_HUB_AUTH_KEY: &str = "https://index.docker.io/v1/";
const DOCKER_HUB_ALIASES: &[&str] = &["docker.io", "index.docker.io", "registry-1.docker.io"];

/// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, when the file exists.
pub fn default_docker_config() -> Option<PathBuf> {
    let path = match std::env::var_os("DOCKER_CONFIG") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("config.json"),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".docker").join("config.json"),
    };
    path.is_file().then_some(path)
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default)]
    creds_store: Option<String>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

/// Registry credentials a sandbox brings for its image (`Container.image_pull_credentials`, read
/// from its organization's secret store): used for `registry` only, instead of the emulator's
/// docker config. Its Debug form hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct PullCredentials {
    /// The registry host they are for (`host[:port]`, `docker.io` for Docker Hub).
    pub registry: String,
    /// The secret.
    pub secret: RegistrySecret,
}

/// A registry secret, in either form a secret store holds one.
#[derive(Clone, PartialEq, Eq)]
pub enum RegistrySecret {
    /// A user and password (HTTP basic, or the registry's token exchange).
    Basic {
        /// The user.
        username: String,
        /// The password or access token.
        password: String,
    },
    /// A Docker `config.json` (what `docker login` writes and a Kubernetes `dockerconfigjson`
    /// pull secret holds); its entry for the registry is used.
    DockerConfigJson(Vec<u8>),
}

impl std::fmt::Debug for PullCredentials {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let form = match self.secret {
            RegistrySecret::Basic { .. } => "user and password",
            RegistrySecret::DockerConfigJson(_) => "docker config.json",
        };
        formatter.debug_struct("PullCredentials").field("registry", &self.registry).field("secret", &form).finish()
    }
}

impl PullCredentials {
    /// The authentication these credentials give for `registry`: `None` when they are for
    /// another registry.
    pub(crate) fn auth_for(&self, registry: &str) -> Option<RegistryAuth> {
        if !same_registry(&self.registry, registry) {
            return None;
        }
        Some(match &self.secret {
            RegistrySecret::Basic { username, password } => RegistryAuth::Basic(username.clone(), password.clone()),
            RegistrySecret::DockerConfigJson(json) => docker_config_auth(json, registry, "the sandbox's pull secret"),
        })
    }
}

/// Whether two registry names are the same registry (Docker Hub's aliases are one).
fn same_registry(named: &str, registry: &str) -> bool {
    let hub = |name: &str| name == DOCKER_HUB || DOCKER_HUB_ALIASES.contains(&name);
    let named = hostname_of_key(named.trim());
    named.eq_ignore_ascii_case(registry) || (hub(registry) && hub(named))
}

/// A stable digest of the credentials in `auth`, so a cache can remember who may read what
/// without keeping the secret; `None` for anonymous access.
pub(crate) fn fingerprint(auth: &RegistryAuth) -> Option<String> {
    use sha2::Digest;
    let text = match auth {
        RegistryAuth::Anonymous => return None,
        RegistryAuth::Basic(user, password) => format!("basic\0{user}\0{password}"),
        RegistryAuth::Bearer(token) => format!("bearer\0{token}"),
    };
    Some(hex::encode(sha2::Sha256::digest(text.as_bytes())))
}

/// The credentials `config` holds for `registry` (`host[:port]`, `docker.io` for Docker Hub);
/// anonymous when there are none or the file cannot be read (said in the log).
pub(crate) fn registry_auth(config: Option<&Path>, registry: &str) -> RegistryAuth {
    let Some(path) = config else { return RegistryAuth::Anonymous };
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) => {
            warn!(path = %path.display(), error = %e, "docker config not readable; pulling anonymously");
            return RegistryAuth::Anonymous;
        }
    };
    docker_config_auth(&text, registry, &path.display().to_string())
}

/// The credentials a docker `config.json` (`text`, read from `source`) holds for `registry`.
fn docker_config_auth(text: &[u8], registry: &str, source: &str) -> RegistryAuth {
    let path = source;
    let parsed: DockerConfig = match serde_json::from_slice(text) {
        Ok(parsed) => parsed,
        Err(e) => {
            warn!(path, error = %e, "docker config is not valid JSON; pulling anonymously");
            return RegistryAuth::Anonymous;
        }
    };
    let wanted = |key: &str| {
        let host = hostname_of_key(key);
        host == registry
            || (registry == DOCKER_HUB && (key == DOCKER_HUB_AUTH_KEY || DOCKER_HUB_ALIASES.contains(&host)))
    };
    // An exact key first (`docker login` writes the bare host), then the URL forms.
    let entry = parsed.auths.get(registry).or_else(|| parsed.auths.iter().find(|(key, _)| wanted(key)).map(|(_, e)| e));
    let Some(entry) = entry else {
        if parsed.cred_helpers.keys().any(|key| wanted(key)) || parsed.creds_store.is_some() {
            // Credential helpers run programs of the host; the emulator does not.
            debug!(registry, "docker config names a credential helper, which is not used; pulling anonymously");
        }
        return RegistryAuth::Anonymous;
    };
    if let Some(token) = entry.registrytoken.as_deref().filter(|t| !t.is_empty()) {
        return RegistryAuth::Bearer(token.to_string());
    }
    if let (Some(user), Some(password)) = (&entry.username, &entry.password)
        && !user.is_empty()
    {
        return RegistryAuth::Basic(user.clone(), password.clone());
    }
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok());
        match decoded.as_deref().and_then(|text| text.split_once(':')) {
            Some((user, password)) => return RegistryAuth::Basic(user.to_string(), password.to_string()),
            None => {
                warn!(registry, path, "docker config's auth is not base64 of user:password; pulling anonymously")
            }
        }
    }
    RegistryAuth::Anonymous
}

/// `https://host:5000/v1/` → `host:5000`, as Docker's `ConvertToHostname`.
fn hostname_of_key(key: &str) -> &str {
    let rest = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_config(json: &str, registry: &str) -> RegistryAuth {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, json).unwrap();
        registry_auth(Some(&path), registry)
    }

    #[test]
    fn credentials_come_from_the_matching_entry() {
        // "alice:s3cr:et" in base64: the password keeps its colon.
        let json = r#"{"auths":{
            "127.0.0.1:5000":{"auth":"YWxpY2U6czNjcjpldA=="},
            "https://ghcr.io/v2/":{"username":"bob","password":"pw"},
            "https://index.docker.io/v1/":{"auth":"aHViOmh1YnB3"},
            "tok.example.com":{"registrytoken":"T"}}}"#;
        assert_eq!(with_config(json, "127.0.0.1:5000"), RegistryAuth::Basic("alice".into(), "s3cr:et".into()));
        assert_eq!(with_config(json, "ghcr.io"), RegistryAuth::Basic("bob".into(), "pw".into()));
        assert_eq!(with_config(json, "docker.io"), RegistryAuth::Basic("hub".into(), "hubpw".into()));
        assert_eq!(with_config(json, "tok.example.com"), RegistryAuth::Bearer("T".into()));
        assert_eq!(with_config(json, "127.0.0.1:5001"), RegistryAuth::Anonymous);
        assert_eq!(with_config(json, "quay.io"), RegistryAuth::Anonymous);
    }

    #[test]
    fn a_sandboxs_credentials_serve_their_registry_only() {
        let basic = PullCredentials {
            registry: "127.0.0.1:5000".into(),
            secret: RegistrySecret::Basic { username: "u".into(), password: "p".into() },
        };
        assert_eq!(basic.auth_for("127.0.0.1:5000"), Some(RegistryAuth::Basic("u".into(), "p".into())));
        assert_eq!(basic.auth_for("127.0.0.1:5001"), None);
        let hub = PullCredentials {
            registry: "index.docker.io".into(),
            secret: RegistrySecret::DockerConfigJson(
                br#"{"auths":{"https://index.docker.io/v1/":{"auth":"aHViOmh1YnB3"}}}"#.to_vec(),
            ),
        };
        assert_eq!(hub.auth_for("docker.io"), Some(RegistryAuth::Basic("hub".into(), "hubpw".into())));
        assert_eq!(
            format!("{basic:?}"),
            r#"PullCredentials { registry: "127.0.0.1:5000", secret: "user and password" }"#
        );
        assert_eq!(fingerprint(&RegistryAuth::Anonymous), None);
        assert_ne!(
            fingerprint(&RegistryAuth::Basic("u".into(), "p".into())),
            fingerprint(&RegistryAuth::Basic("u".into(), "q".into()))
        );
    }

    #[test]
    fn unusable_configs_mean_anonymous() {
        assert_eq!(with_config("not json", "x.io"), RegistryAuth::Anonymous);
        assert_eq!(with_config(r#"{"auths":{"x.io":{"auth":"!!!"}}}"#, "x.io"), RegistryAuth::Anonymous);
        assert_eq!(with_config(r#"{"credsStore":"desktop"}"#, "x.io"), RegistryAuth::Anonymous);
        assert_eq!(registry_auth(Some(Path::new("/nonexistent/config.json")), "x.io"), RegistryAuth::Anonymous);
        assert_eq!(registry_auth(None, "x.io"), RegistryAuth::Anonymous);
    }
}
