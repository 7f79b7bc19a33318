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
    let parsed: DockerConfig = match serde_json::from_slice(&text) {
        Ok(parsed) => parsed,
        Err(e) => {
            warn!(path = %path.display(), error = %e, "docker config is not valid JSON; pulling anonymously");
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
                warn!(registry, path = %path.display(), "docker config's auth is not base64 of user:password; pulling anonymously")
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
    fn unusable_configs_mean_anonymous() {
        assert_eq!(with_config("not json", "x.io"), RegistryAuth::Anonymous);
        assert_eq!(with_config(r#"{"auths":{"x.io":{"auth":"!!!"}}}"#, "x.io"), RegistryAuth::Anonymous);
        assert_eq!(with_config(r#"{"credsStore":"desktop"}"#, "x.io"), RegistryAuth::Anonymous);
        assert_eq!(registry_auth(Some(Path::new("/nonexistent/config.json")), "x.io"), RegistryAuth::Anonymous);
        assert_eq!(registry_auth(None, "x.io"), RegistryAuth::Anonymous);
    }
}
