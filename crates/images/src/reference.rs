//! Image names as Kubernetes and Docker read them (`docker/distribution`'s
//! `ParseNormalizedNamed`), and the pull policy Kubernetes defaults from them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use thiserror::Error;

/// Docker Hub, the registry of a name without one.
pub const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_LEGACY: &str = "index.docker.io";
const OFFICIAL_NAMESPACE: &str = "library";
const DEFAULT_TAG: &str = "latest";
// docker/distribution's limit on `domain/path`.
const NAME_TOTAL_LENGTH_MAX: usize = 255;

/// An image name that cannot be pulled: Kubernetes' `InvalidImageName`. Its Display reads like
/// the kubelet's ("couldn't parse image name …: invalid reference format") plus what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("couldn't parse image name \"{image}\": invalid reference format: {reason}")]
pub struct InvalidReference {
    /// The name as given.
    pub image: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A fully qualified image reference: `registry/repository[:tag][@digest]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageReference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl ImageReference {
    /// Reads an image name as Kubernetes does: `python:3.11` is
    /// `docker.io/library/python:3.11`, `ubuntu` is `docker.io/library/ubuntu:latest`, a first
    /// component with a `.` or `:` (or `localhost`) is a registry, and a digest is kept (and is what
    /// is pulled). A name with neither tag nor digest gets `:latest`.
    pub fn normalize(image: &str) -> Result<Self, InvalidReference> {
        let invalid = |reason: &str| InvalidReference { image: image.to_string(), reason: reason.to_string() };
        if image.is_empty() {
            return Err(invalid("the name is empty"));
        }
        if image.trim() != image || image.chars().any(char::is_whitespace) {
            return Err(invalid("the name contains white space"));
        }
        // Docker refuses a bare image id: it would be taken for a repository on Docker Hub.
        if image.len() == 64 && image.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
            return Err(invalid("a 64-character hexadecimal string is an image id, not a name"));
        }

        let (name_and_tag, digest) = match image.split_once('@') {
            Some((rest, digest)) => (rest, Some(parse_digest(digest).map_err(|r| invalid(&r))?)),
            None => (image, None),
        };
        // A tag follows the last `:` that comes after the last `/` (a `:` before it is a port).
        let last_slash = name_and_tag.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name_and_tag[last_slash..].rfind(':') {
            Some(i) => {
                let at = last_slash + i;
                (&name_and_tag[..at], Some(parse_tag(&name_and_tag[at + 1..]).map_err(|r| invalid(&r))?))
            }
            None => (name_and_tag, None),
        };
        if name.is_empty() {
            return Err(invalid("the repository name is empty"));
        }

        let (mut registry, mut repository) = match name.split_once('/') {
            Some((first, rest)) if is_registry_like(first) => (first.to_string(), rest.to_string()),
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        if registry == DOCKER_HUB_LEGACY {
            registry = DOCKER_HUB.to_string();
        }
        if registry == DOCKER_HUB && !repository.contains('/') {
            repository = format!("{OFFICIAL_NAMESPACE}/{repository}");
        }
        check_registry(&registry).map_err(|r| invalid(&r))?;
        check_repository(&repository).map_err(|r| invalid(&r))?;
        if registry.len() + 1 + repository.len() > NAME_TOTAL_LENGTH_MAX {
            return Err(invalid(&format!("the repository name is longer than {NAME_TOTAL_LENGTH_MAX} characters")));
        }
        let tag = match (tag, &digest) {
            (None, None) => Some(DEFAULT_TAG.to_string()),
            (tag, _) => tag,
        };
        Ok(Self { registry, repository, tag, digest })
    }

    /// The registry's host (and port): `docker.io`, `ghcr.io`, `127.0.0.1:5000`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository within the registry: `library/python`.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, when there is one (a name given with only a digest has none).
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The manifest digest the name pins, `sha256:…`.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// Whether the registry is on this machine's loopback (`127.0.0.0/8`, `localhost`, `[::1]`),
    /// which Docker speaks to over plain HTTP.
    pub fn is_loopback_registry(&self) -> bool {
        let host = host_of(&self.registry);
        if host.eq_ignore_ascii_case("localhost") {
            return true;
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) => ip.is_loopback(),
            Ok(IpAddr::V6(ip)) => ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4: Ipv4Addr| v4.is_loopback()),
            Err(_) => false,
        }
    }

    pub(crate) fn to_oci(&self) -> oci_client::Reference {
        let (registry, repository) = (self.registry.clone(), self.repository.clone());
        match (&self.tag, &self.digest) {
            (Some(tag), Some(digest)) => {
                oci_client::Reference::with_tag_and_digest(registry, repository, tag.clone(), digest.clone())
            }
            (None, Some(digest)) => oci_client::Reference::with_digest(registry, repository, digest.clone()),
            (Some(tag), None) => oci_client::Reference::with_tag(registry, repository, tag.clone()),
            // normalize gives every reference a tag or a digest.
            (None, None) => oci_client::Reference::with_tag(registry, repository, DEFAULT_TAG.to_string()),
        }
    }
}

impl fmt::Display for ImageReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl FromStr for ImageReference {
    type Err = InvalidReference;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::normalize(s)
    }
}

/// The host part of `host[:port]` (an IPv6 literal keeps its brackets).
pub(crate) fn host_of(registry: &str) -> &str {
    if registry.starts_with('[') {
        return registry.find(']').map_or(registry, |end| &registry[..=end]);
    }
    registry.split(':').next().unwrap_or(registry)
}

fn is_registry_like(first: &str) -> bool {
    first.contains('.') || first.contains(':') || first == "localhost" || first.chars().any(|c| c.is_ascii_uppercase())
}

fn check_registry(registry: &str) -> Result<(), String> {
    let (host, port) = if registry.starts_with('[') {
        let end = registry.find(']').ok_or_else(|| format!("registry \"{registry}\": unclosed IPv6 bracket"))?;
        let host = &registry[1..end];
        if host.is_empty() || !host.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return Err(format!("registry \"{registry}\": not an IPv6 address"));
        }
        let rest = &registry[end + 1..];
        match rest.strip_prefix(':') {
            Some(port) => (None, Some(port)),
            None if rest.is_empty() => (None, None),
            None => return Err(format!("registry \"{registry}\": unexpected text after the address")),
        }
    } else {
        match registry.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(registry), None),
        }
    };
    if let Some(host) = host {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !host.split('.').all(label_ok) {
            return Err(format!("registry \"{registry}\": not a host name"));
        }
    }
    if let Some(port) = port
        && (port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err())
    {
        return Err(format!("registry \"{registry}\": port \"{port}\" is not a number up to 65535"));
    }
    Ok(())
}

fn check_repository(repository: &str) -> Result<(), String> {
    for component in repository.split('/') {
        if component.is_empty() {
            return Err(format!("repository \"{repository}\" has an empty path component"));
        }
        if component.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(format!("repository name \"{repository}\" must be lowercase"));
        }
        if !path_component_ok(component) {
            return Err(format!(
                "repository \"{repository}\": \"{component}\" may hold only a-z, 0-9 and single separators (., _, __, -)"
            ));
        }
    }
    Ok(())
}

// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
fn path_component_ok(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !bytes.first().copied().is_some_and(alnum) || !bytes.last().copied().is_some_and(alnum) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

// `[\w][\w.-]{0,127}`
fn parse_tag(tag: &str) -> Result<String, String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && tag.as_bytes().first().copied().is_some_and(word)
        && tag.bytes().all(|b| word(b) || b == b'.' || b == b'-');
    if ok {
        Ok(tag.to_string())
    } else {
        Err(format!("tag \"{tag}\" must be 1 to 128 of A-Z, a-z, 0-9, _, . and -, not starting with . or -"))
    }
}

fn parse_digest(digest: &str) -> Result<String, String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Err(format!("digest \"{digest}\" must be algorithm:hex"));
    };
    match algorithm {
        "sha256" if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => {
            Ok(digest.to_string())
        }
        "sha256" => Err(format!("digest \"{digest}\": sha256 needs 64 lowercase hexadecimal digits")),
        _ => Err(format!("digest \"{digest}\": only sha256 digests are supported")),
    }
}

/// When the image is pulled: a container's `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PullPolicy {
    /// Ask the registry every time (the layers already here are not downloaded again).
    Always,
    /// Use the image on this machine when there is one.
    IfNotPresent,
    /// Never pull: the image must be on this machine (`ErrImageNeverPull` otherwise).
    Never,
}

impl PullPolicy {
    /// Kubernetes' default for a container that names none: `Always` for a `:latest` or untagged
    /// name (`foo@sha256:…` is pinned, so `IfNotPresent`), `IfNotPresent` otherwise.
    pub fn default_for(reference: &ImageReference) -> Self {
        if reference.tag() == Some(DEFAULT_TAG) { Self::Always } else { Self::IfNotPresent }
    }

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

impl fmt::Display for PullPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pull policy string that is none of Kubernetes' three.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unsupported value \"{0}\" for imagePullPolicy: supported values: \"Always\", \"IfNotPresent\", \"Never\"")]
pub struct InvalidPullPolicy(pub String);

impl FromStr for PullPolicy {
    type Err = InvalidPullPolicy;

    /// Kubernetes' exact spellings (the API server rejects others, case included).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Always" => Ok(Self::Always),
            "IfNotPresent" => Ok(Self::IfNotPresent),
            "Never" => Ok(Self::Never),
            other => Err(InvalidPullPolicy(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn names_normalize_as_docker_does() {
        let with_digest = format!("ghcr.io/a/b@{DIGEST}");
        let with_tag_and_digest = format!("ghcr.io/a/b:1@{DIGEST}");
        let cases: &[(&str, &str)] = &[
            ("python:3.11", "docker.io/library/python:3.11"),
            ("ubuntu", "docker.io/library/ubuntu:latest"),
            ("library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
            ("docker.io/ubuntu", "docker.io/library/ubuntu:latest"),
            ("index.docker.io/library/ubuntu", "docker.io/library/ubuntu:latest"),
            ("index.docker.io/ubuntu", "docker.io/library/ubuntu:latest"),
            ("jupyter/base-notebook", "docker.io/jupyter/base-notebook:latest"),
            ("ghcr.io/org/tool:v1.2.3", "ghcr.io/org/tool:v1.2.3"),
            ("host:5000/x/y:1", "host:5000/x/y:1"),
            ("127.0.0.1:5000/test/busybox:1", "127.0.0.1:5000/test/busybox:1"),
            ("localhost/foo", "localhost/foo:latest"),
            ("localhost:5000/foo", "localhost:5000/foo:latest"),
            ("[::1]:5000/foo:bar", "[::1]:5000/foo:bar"),
            ("registry.example.com/a/b/c/d:tag_1.0-x", "registry.example.com/a/b/c/d:tag_1.0-x"),
            ("foo/bar__baz.qux-1---2", "docker.io/foo/bar__baz.qux-1---2:latest"),
            // A first component that is not a host is a Docker Hub user.
            ("foo_bar/x", "docker.io/foo_bar/x:latest"),
            // `test.com:5000` without a slash is an official image with a tag.
            ("test.com:5000", "docker.io/library/test.com:5000"),
            ("python:Latest", "docker.io/library/python:Latest"),
        ];
        for (input, want) in cases {
            let got = ImageReference::normalize(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(&got.to_string(), want, "{input}");
        }
        let r = ImageReference::normalize(&with_digest).unwrap();
        assert_eq!((r.registry(), r.repository(), r.tag(), r.digest()), ("ghcr.io", "a/b", None, Some(DIGEST)));
        assert_eq!(r.to_string(), with_digest);
        let r = ImageReference::normalize(&with_tag_and_digest).unwrap();
        assert_eq!((r.tag(), r.digest()), (Some("1"), Some(DIGEST)));
        assert_eq!(r.to_string(), with_tag_and_digest);
        let r = ImageReference::normalize("host:5000/x/y:1").unwrap();
        assert_eq!((r.registry(), r.repository(), r.tag()), ("host:5000", "x/y", Some("1")));
    }

    #[test]
    fn bad_names_say_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("Ubuntu", "lowercase"),
            ("docker.io/Library/ubuntu", "lowercase"),
            ("ubuntu:", "tag"),
            ("ubuntu:.x", "tag"),
            ("ubuntu:a b", "white space"),
            (" ubuntu", "white space"),
            ("ubuntu@sha256:abc", "64 lowercase"),
            ("ubuntu@md5:0123", "only sha256"),
            ("ubuntu@", "algorithm:hex"),
            ("a//b", "empty path component"),
            ("foo/-bar", "may hold only"),
            ("foo/bar-", "may hold only"),
            ("foo/b..ar", "may hold only"),
            ("host:99999/x", "port"),
            ("host:/x", "port"),
            ("-host.com/x", "not a host name"),
            ("[::1/x", "unclosed"),
            (":tag", "repository name is empty"),
            ("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "image id"),
        ];
        for (input, fragment) in cases {
            let err = ImageReference::normalize(input).expect_err(input);
            let text = err.to_string();
            assert!(text.contains(fragment), "{input:?}: {text}");
            assert!(
                text.starts_with(&format!("couldn't parse image name \"{input}\": invalid reference format")),
                "{text}"
            );
        }
        let long = format!("example.com/{}", "a".repeat(250));
        assert!(ImageReference::normalize(&long).unwrap_err().reason.contains("longer than 255"));
    }

    #[test]
    fn loopback_registries_are_recognised() {
        for (name, loopback) in [
            ("127.0.0.1:5000/x", true),
            ("127.3.4.5/x", true),
            ("localhost/x", true),
            ("localhost:5000/x", true),
            ("[::1]:5000/x", true),
            ("128.0.0.1/x", false),
            ("ubuntu", false),
            ("localhost.example.com/x", false),
        ] {
            assert_eq!(ImageReference::normalize(name).unwrap().is_loopback_registry(), loopback, "{name}");
        }
    }

    #[test]
    fn pull_policy_defaults_as_kubernetes() {
        let policy = |name: &str| PullPolicy::default_for(&ImageReference::normalize(name).unwrap());
        assert_eq!(policy("ubuntu"), PullPolicy::Always);
        assert_eq!(policy("ubuntu:latest"), PullPolicy::Always);
        assert_eq!(policy("ubuntu:22.04"), PullPolicy::IfNotPresent);
        assert_eq!(policy(&format!("ubuntu@{DIGEST}")), PullPolicy::IfNotPresent);
        assert_eq!(policy(&format!("ubuntu:latest@{DIGEST}")), PullPolicy::Always);
        assert_eq!("Always".parse(), Ok(PullPolicy::Always));
        assert_eq!("IfNotPresent".parse(), Ok(PullPolicy::IfNotPresent));
        assert_eq!("Never".parse(), Ok(PullPolicy::Never));
        let err = "always".parse::<PullPolicy>().unwrap_err();
        assert!(err.to_string().contains("\"always\""), "{err}");
        assert_eq!(PullPolicy::IfNotPresent.to_string(), "IfNotPresent");
    }
}
