//! Which attached sandboxes a group rule (same organization, same user, a label selector) names.

use std::collections::BTreeMap;

use crate::types::{Peer, PeerIdentity};

/// Whether `peer` (a group) of the sandbox `owner` names the sandbox `other`. Address peers
/// are not groups: `false`.
pub(crate) fn names(peer: &Peer, owner: &PeerIdentity, other: &PeerIdentity) -> bool {
    if owner.organization != other.organization {
        return false;
    }
    match peer {
        Peer::SameOrganization => true,
        Peer::SameUser => owner.user == other.user,
        Peer::Selector { pod_labels, namespace_labels } => {
            let in_namespace = match namespace_labels {
                None => other.namespace == owner.namespace,
                Some(labels) => includes(&other.namespace_labels, labels),
            };
            in_namespace && includes(&other.pod_labels, pod_labels)
        }
        Peer::Any | Peer::Cidr { .. } => false,
    }
}

/// Whether a peer is a group whose members change as sandboxes come and go.
pub(crate) fn is_group(peer: &Peer) -> bool {
    matches!(peer, Peer::SameOrganization | Peer::SameUser | Peer::Selector { .. })
}

fn includes(labels: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>) -> bool {
    wanted.iter().all(|(key, value)| labels.get(key) == Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(organization: &str, user: &str, namespace: &str, labels: &[(&str, &str)]) -> PeerIdentity {
        PeerIdentity {
            organization: organization.to_owned(),
            user: user.to_owned(),
            namespace: namespace.to_owned(),
            pod_labels: labels.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect(),
            namespace_labels: BTreeMap::from([("team".to_owned(), namespace.to_owned())]),
        }
    }

    #[test]
    fn groups_never_reach_another_organization() {
        let owner = identity("org-a", "alice", "ns", &[("app", "web")]);
        let stranger = identity("org-b", "alice", "ns", &[("app", "web")]);
        let selector =
            Peer::Selector { pod_labels: BTreeMap::from([("app".into(), "web".into())]), namespace_labels: None };
        for peer in [Peer::SameOrganization, Peer::SameUser, selector] {
            assert!(!names(&peer, &owner, &stranger), "{peer:?}");
        }
    }

    #[test]
    fn same_user_and_selectors_narrow_the_organization() {
        let owner = identity("org", "alice", "ns", &[]);
        let bob_web = identity("org", "bob", "ns", &[("app", "web"), ("tier", "1")]);
        let alice_other_namespace = identity("org", "alice", "other", &[("app", "web")]);
        assert!(names(&Peer::SameOrganization, &owner, &bob_web));
        assert!(!names(&Peer::SameUser, &owner, &bob_web));
        assert!(names(&Peer::SameUser, &owner, &alice_other_namespace));
        let web = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        let own_namespace = Peer::Selector { pod_labels: web.clone(), namespace_labels: None };
        assert!(names(&own_namespace, &owner, &bob_web));
        assert!(!names(&own_namespace, &owner, &alice_other_namespace));
        let labelled = Peer::Selector {
            pod_labels: web.clone(),
            namespace_labels: Some(BTreeMap::from([("team".to_owned(), "other".to_owned())])),
        };
        assert!(names(&labelled, &owner, &alice_other_namespace));
        assert!(!names(&labelled, &owner, &bob_web));
        let every_namespace = Peer::Selector { pod_labels: web, namespace_labels: Some(BTreeMap::new()) };
        assert!(names(&every_namespace, &owner, &bob_web) && names(&every_namespace, &owner, &alice_other_namespace));
        assert!(!names(&Peer::Any, &owner, &bob_web));
    }
}
