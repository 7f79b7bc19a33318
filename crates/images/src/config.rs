//! What an image says about running it (its config's `Entrypoint`, `Cmd`, `Env`, `WorkingDir`,
//! `User`), and how a Pod's container spec combines with it.

use serde::{Deserialize, Serialize};

/// The `PATH` containerd gives a container whose image and spec set none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The run settings of an image's config (OCI `config` or Docker's `container_config`-less
/// `config`; both spell the fields alike).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// In the image's order; a variable set twice keeps its last value.
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    /// As written in the image (`1000`, `1000:1000`, `name`, `name:group`); see [`crate::resolve_user`].
    pub user: Option<String>,
}

impl ImageConfig {
    /// The process's argv as Kubernetes builds it: a container's `command` replaces the image's
    /// ENTRYPOINT and then the image's CMD is dropped too; its `args` replace CMD.
    ///
    /// | command | args | argv |
    /// |---|---|---|
    /// | – | – | ENTRYPOINT + CMD |
    /// | set | – | command |
    /// | – | set | ENTRYPOINT + args |
    /// | set | set | command + args |
    ///
    /// An empty result means the image and the spec give nothing to run (the runtime's
    /// "no command specified" error).
    pub fn argv(&self, command: &[String], args: &[String]) -> Vec<String> {
        let head = if command.is_empty() { &self.entrypoint } else { command };
        let tail = match (command.is_empty(), args.is_empty()) {
            (_, false) => args,
            (true, true) => &self.cmd[..],
            (false, true) => &[],
        };
        head.iter().chain(tail).cloned().collect()
    }

    /// The container's environment: the image's variables with the Pod's over them (a variable
    /// the Pod sets keeps the image's place, new ones follow in the Pod's order), and containerd's
    /// default `PATH` when neither sets one.
    pub fn env_with(&self, pod_env: &[(String, String)]) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::with_capacity(self.env.len() + pod_env.len() + 1);
        for (key, value) in self.env.iter().chain(pod_env) {
            match env.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value.clone(),
                None => env.push((key.clone(), value.clone())),
            }
        }
        if !env.iter().any(|(k, _)| k == "PATH") {
            env.insert(0, ("PATH".to_string(), DEFAULT_PATH.to_string()));
        }
        env
    }

    /// Reads the run settings from an image config blob (JSON). Absent and `null` fields are
    /// empty; an `Env` entry without `=` is a variable set to the empty string (as Docker reads it).
    pub(crate) fn from_blob(blob: &[u8]) -> Result<Self, serde_json::Error> {
        #[derive(Deserialize, Default)]
        struct File {
            #[serde(default)]
            config: Option<Run>,
        }
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "PascalCase")]
        struct Run {
            #[serde(default)]
            entrypoint: Option<Vec<String>>,
            #[serde(default)]
            cmd: Option<Vec<String>>,
            #[serde(default)]
            env: Option<Vec<String>>,
            #[serde(default)]
            working_dir: Option<String>,
            #[serde(default)]
            user: Option<String>,
        }
        let run = serde_json::from_slice::<File>(blob)?.config.unwrap_or_default();
        let mut config = Self {
            entrypoint: run.entrypoint.unwrap_or_default(),
            cmd: run.cmd.unwrap_or_default(),
            env: Vec::new(),
            working_dir: run.working_dir.filter(|w| !w.is_empty()),
            user: run.user.filter(|u| !u.is_empty()),
        };
        for entry in run.env.unwrap_or_default() {
            let (key, value) = entry.split_once('=').unwrap_or((&entry, ""));
            match config.env.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value.to_string(),
                None => config.env.push((key.to_string(), value.to_string())),
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn argv_follows_kubernetes_rules() {
        let image = ImageConfig {
            entrypoint: strings(&["/entry", "-e"]),
            cmd: strings(&["default-arg"]),
            ..Default::default()
        };
        let none: Vec<String> = Vec::new();
        assert_eq!(image.argv(&none, &none), strings(&["/entry", "-e", "default-arg"]));
        assert_eq!(image.argv(&strings(&["sh", "-c"]), &none), strings(&["sh", "-c"]));
        assert_eq!(image.argv(&none, &strings(&["x", "y"])), strings(&["/entry", "-e", "x", "y"]));
        assert_eq!(image.argv(&strings(&["sh"]), &strings(&["-c", "true"])), strings(&["sh", "-c", "true"]));

        let cmd_only = ImageConfig { cmd: strings(&["sh"]), ..Default::default() };
        assert_eq!(cmd_only.argv(&none, &none), strings(&["sh"]));
        assert_eq!(cmd_only.argv(&none, &strings(&["ls"])), strings(&["ls"]));
        assert!(ImageConfig::default().argv(&none, &none).is_empty());
    }

    #[test]
    fn pod_env_goes_over_the_image_env() {
        let image = ImageConfig {
            env: pairs(&[("PATH", "/image/bin"), ("LANG", "C.UTF-8"), ("A", "image")]),
            ..Default::default()
        };
        assert_eq!(
            image.env_with(&pairs(&[("A", "pod"), ("B", "pod")])),
            pairs(&[("PATH", "/image/bin"), ("LANG", "C.UTF-8"), ("A", "pod"), ("B", "pod")])
        );
        assert_eq!(image.env_with(&pairs(&[("PATH", "/pod")]))[0], ("PATH".to_string(), "/pod".to_string()));
        // Neither sets PATH: containerd's default comes first.
        let bare = ImageConfig::default();
        assert_eq!(bare.env_with(&pairs(&[("X", "1")])), pairs(&[("PATH", DEFAULT_PATH), ("X", "1")]));
    }

    #[test]
    fn config_blobs_are_read_leniently() {
        let blob = br#"{"architecture":"amd64","config":{"Env":["PATH=/bin","EMPTY","K=a=b","PATH=/usr/bin"],
            "Entrypoint":null,"Cmd":["sh"],"WorkingDir":"","User":"1000:1000"},"rootfs":{"type":"layers","diff_ids":[]}}"#;
        let config = ImageConfig::from_blob(blob).unwrap();
        assert_eq!(config.entrypoint, Vec::<String>::new());
        assert_eq!(config.cmd, strings(&["sh"]));
        assert_eq!(config.env, pairs(&[("PATH", "/usr/bin"), ("EMPTY", ""), ("K", "a=b")]));
        assert_eq!(config.working_dir, None);
        assert_eq!(config.user.as_deref(), Some("1000:1000"));
        assert_eq!(ImageConfig::from_blob(b"{}").unwrap(), ImageConfig::default());
        assert!(ImageConfig::from_blob(b"not json").is_err());
    }
}
