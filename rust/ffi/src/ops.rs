//! The body of every operation that the C ABI (`capi/`) and the JNI exports
//! (`jni/`) both offer, written once: a rule that lived in both layers could
//! (and did) drift. The layers around it only convert arguments (C pointers,
//! Java arrays and strings) and map errors (result codes, exceptions).
//!
//! Like the layers, this module holds no routing decision: it calls the core
//! and shapes its answers for the boundary. Rules that belong to one C type
//! live with it: the connect-string forms on `racaffinity_connect_form`, the
//! panic message beside the C guard (`capi::result::panic_message`).

use std::fmt::Display;

use racaffinity_core::{Cluster, ContextKey, DataKey, NodeId, NodeSpec, NodeState, RouteRequest};

use crate::capi::result::{racaffinity_result, Failure};

/// The error for a node id the cluster never had (or, from Java, a negative
/// one): the same code and text from every layer.
pub(crate) fn unknown_node(node: impl Display) -> Failure {
    Failure::new(racaffinity_result::UnknownNode, format!("no node with id {node}"))
}

/// A node's state as the boundary reports it: a removed node reads as `Down`,
/// whatever state it had when it left.
pub(crate) fn node_state(c: &Cluster, node: NodeId) -> Result<NodeState, Failure> {
    let n = c.node(node).ok_or_else(|| unknown_node(node.0))?;
    Ok(if n.is_removed() { NodeState::Down } else { n.state() })
}

/// Whether a node's Down ended a planned drain (`Node::down_is_planned`).
pub(crate) fn node_down_is_planned(c: &Cluster, node: NodeId) -> Result<bool, Failure> {
    Ok(c.node(node).ok_or_else(|| unknown_node(node.0))?.down_is_planned())
}

/// A node's name; removed nodes keep theirs.
pub(crate) fn node_name(c: &Cluster, node: NodeId) -> Result<String, Failure> {
    c.node_name(node).ok_or_else(|| unknown_node(node.0))
}

/// A node's configured `host:port`, or "" when it has none.
pub(crate) fn node_address(c: &Cluster, node: NodeId) -> Result<String, Failure> {
    let n = c.node(node).ok_or_else(|| unknown_node(node.0))?;
    Ok(n.address().unwrap_or_default().to_string())
}

/// Adds a node at runtime. A weight of 0 means 1, so hosts can pass "no
/// weight" without knowing the default.
pub(crate) fn add_node(c: &Cluster, name: &str, address: Option<&str>, weight: u32) -> Result<NodeId, Failure> {
    let mut spec = NodeSpec::new(name).weight(weight.max(1));
    spec.address = address.map(str::to_string);
    Ok(c.add_node(spec)?)
}

/// Leases `node` untracked (the Java `Lease` object releases it exactly once).
/// The core's `begin_lease` ignores a node it does not have, so a removed or
/// unknown node is refused here, as `Cluster::open_lease` refuses it for C.
pub(crate) fn begin_lease(c: &Cluster, node: NodeId) -> Result<(), Failure> {
    if c.node(node).is_none_or(|n| n.is_removed()) {
        return Err(unknown_node(node.0));
    }
    c.begin_lease(node);
    Ok(())
}

/// Longest partition map one replace may carry (every partition once).
pub(crate) const MAX_MAP_ENTRIES: usize = racaffinity_core::config::MAX_PARTITIONS as usize;

/// Refuses a partition map longer than any valid one before it is copied.
pub(crate) fn partition_map_len(len: usize) -> Result<(), Failure> {
    if len > MAX_MAP_ENTRIES {
        return Err(Failure::new(
            racaffinity_result::InvalidArgument,
            format!("{len} entries; a map holds at most {MAX_MAP_ENTRIES}"),
        ));
    }
    Ok(())
}

/// A route request from the affinities a host passes, each optional (the
/// layer decides what "absent" looks like: an empty C span, a null Java
/// array). An integer key, when given, wins over a byte key; context 0 means
/// the calling OS thread's pin.
pub(crate) fn route_request<'a>(
    transaction: Option<&'a [u8]>,
    key: Option<&'a [u8]>,
    key_i64: Option<i64>,
    session: Option<&'a [u8]>,
    context: u64,
) -> RouteRequest<'a> {
    RouteRequest {
        transaction,
        key: key_i64.map(DataKey::Int).or(key.map(DataKey::Bytes)),
        session,
        token: None,
        context: (context != 0).then_some(ContextKey(context)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Cluster {
        Cluster::from_config_text("nodes = A, B\nnode.A.address = h1:1521").unwrap()
    }

    #[test]
    fn a_removed_node_reads_as_down_and_keeps_its_name() {
        let c = cluster();
        let b = c.node_by_name("B").unwrap().id();
        c.set_node_state("B", NodeState::Draining).unwrap();
        c.remove_node("B").unwrap();
        assert_eq!(node_state(&c, b).unwrap(), NodeState::Down);
        assert_eq!(node_name(&c, b).unwrap(), "B");
    }

    #[test]
    fn an_unknown_node_id_is_unknown_node_with_its_id() {
        let c = cluster();
        for f in [node_state(&c, NodeId(9)).err(), node_name(&c, NodeId(9)).err(), node_address(&c, NodeId(9)).err()] {
            let f = f.unwrap();
            assert_eq!(f.code, racaffinity_result::UnknownNode);
            assert_eq!(f.detail, "no node with id 9");
        }
    }

    #[test]
    fn a_node_without_an_address_has_an_empty_one() {
        let c = cluster();
        assert_eq!(node_address(&c, c.node_by_name("A").unwrap().id()).unwrap(), "h1:1521");
        assert_eq!(node_address(&c, c.node_by_name("B").unwrap().id()).unwrap(), "");
    }

    #[test]
    fn weight_zero_adds_a_node_of_weight_one() {
        let c = cluster();
        let id = add_node(&c, "C", Some("h3:1521"), 0).unwrap();
        let n = c.node(id).unwrap();
        assert_eq!(n.weight(), 1);
        assert_eq!(n.address().as_deref(), Some("h3:1521"));
        assert_eq!(add_node(&c, "c", None, 5).unwrap_err().code, racaffinity_result::DuplicateNode);
    }

    #[test]
    fn a_removed_node_cannot_be_leased() {
        let c = cluster();
        let b = c.node_by_name("B").unwrap().id();
        begin_lease(&c, b).unwrap();
        c.end_lease(b, racaffinity_core::Outcome::Neutral);
        c.remove_node("B").unwrap();
        assert_eq!(begin_lease(&c, b).unwrap_err().code, racaffinity_result::UnknownNode);
        assert_eq!(begin_lease(&c, NodeId(7)).unwrap_err().detail, "no node with id 7");
    }

    #[test]
    fn an_integer_key_wins_and_context_zero_is_the_thread() {
        let r = route_request(None, Some(b"k"), Some(7), None, 0);
        assert!(matches!(r.key, Some(DataKey::Int(7))));
        assert_eq!(r.context, None);
        let r = route_request(Some(b"g"), Some(b"k"), None, Some(b"s"), 3);
        assert!(matches!(r.key, Some(DataKey::Bytes(b"k"))));
        assert_eq!((r.transaction, r.session, r.context), (Some(&b"g"[..]), Some(&b"s"[..]), Some(ContextKey(3))));
    }
}
