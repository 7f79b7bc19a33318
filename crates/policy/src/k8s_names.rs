//! Kubernetes name syntax, as the API server enforces it. Policy `base` and sandbox annotations end
//! up on a real-looking Pod, so a name the API server would refuse is refused here, at the field
//! that carries it, instead of later as an opaque scheduling failure.

/// Longest DNS-1123 subdomain (object names such as RuntimeClass, annotation key prefixes).
const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest name part of a qualified name and longest label value.
const QUALIFIED_NAME_PART_MAX: usize = 63;
/// Kubernetes' limit on the total size of an object's annotations (keys plus values).
pub(crate) const TOTAL_ANNOTATION_SIZE_MAX: usize = 256 * 1024;

/// Why `name` is not a DNS-1123 subdomain (lowercase alphanumerics, `-` and `.`, each dot-separated
/// part starting and ending with an alphanumeric), or `None` when it is one.
pub(crate) fn dns1123_subdomain_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if name.len() > DNS1123_SUBDOMAIN_MAX {
        return Some(format!("{name:?} is longer than {DNS1123_SUBDOMAIN_MAX} characters"));
    }
    let parts_are_valid = name.split('.').all(|part| {
        let is_allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        let starts_and_ends_alphanumeric = part
            .chars()
            .next()
            .zip(part.chars().last())
            .is_some_and(|(first, last)| first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric());
        starts_and_ends_alphanumeric && part.chars().all(is_allowed)
    });
    if parts_are_valid {
        None
    } else {
        Some(format!(
            "{name:?} is not a valid DNS-1123 subdomain (lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit)"
        ))
    }
}

/// Whether `text` is 1–63 characters of `[A-Za-z0-9_.-]` starting and ending with an alphanumeric:
/// the shape of a qualified name's name part and of a non-empty label value.
fn is_qualified_name_part(text: &str) -> bool {
    let is_allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let starts_and_ends_alphanumeric = text
        .chars()
        .next()
        .zip(text.chars().last())
        .is_some_and(|(first, last)| first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric());
    text.len() <= QUALIFIED_NAME_PART_MAX && starts_and_ends_alphanumeric && text.chars().all(is_allowed)
}

/// Why `key` is not a Kubernetes qualified name (`[prefix/]name`, the syntax of label and
/// annotation keys), or `None` when it is one.
pub fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if name.contains('/') {
            return Some(format!("{key:?} has more than one '/'"));
        }
        if let Some(problem) = dns1123_subdomain_problem(prefix) {
            return Some(format!("prefix of {key:?}: {problem}"));
        }
    }
    if is_qualified_name_part(name) {
        None
    } else {
        Some(format!(
            "{key:?} is not a valid qualified name (an optional DNS subdomain prefix and '/', then \
             at most {QUALIFIED_NAME_PART_MAX} letters, digits, '-', '_' or '.', starting and \
             ending with a letter or digit)"
        ))
    }
}

/// Why `value` is not a Kubernetes label value (empty, or a qualified name's name part), or `None`.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() || is_qualified_name_part(value) {
        None
    } else {
        Some(format!(
            "{value:?} is not a valid label value (at most {QUALIFIED_NAME_PART_MAX} letters, \
             digits, '-', '_' or '.', starting and ending with a letter or digit)"
        ))
    }
}

/// The total annotation size Kubernetes counts: every key and value, in bytes.
pub(crate) fn annotation_size<'a>(entries: impl IntoIterator<Item = (&'a String, &'a String)>) -> usize {
    entries.into_iter().map(|(key, value)| key.len() + value.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains() {
        for good in ["kata", "kata-nvidia", "gvisor.example.com", "a", "1abc"] {
            assert_eq!(dns1123_subdomain_problem(good), None, "{good}");
        }
        for bad in ["", "Kata", "-kata", "kata-", "a..b", "a_b", &"a".repeat(254)] {
            assert!(dns1123_subdomain_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn qualified_names() {
        for good in ["team", "sunk.coreweave.com/partition", "a_b.c-d", "x/Y"] {
            assert_eq!(qualified_name_problem(good), None, "{good}");
        }
        for bad in ["", "bad key", "/name", "a/b/c", "Example.com/x", "x/", "-x", &"a".repeat(64)] {
            assert!(qualified_name_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn label_values() {
        assert_eq!(label_value_problem(""), None);
        assert_eq!(label_value_problem("platform"), None);
        assert!(label_value_problem("has space").is_some());
        assert!(label_value_problem(&"v".repeat(64)).is_some());
    }
}
