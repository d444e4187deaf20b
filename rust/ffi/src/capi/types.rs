//! Plain C value types shared by the call modules.

//! Enum *parameters* cross the boundary as `uint32_t` and are checked here: a
//! C caller can pass any integer, and an out-of-range Rust enum is undefined
//! behaviour. Enums the library *writes* use the enum types.

use racaffinity_core::{NodeId, NodeState, Outcome, RecoveryScope, Route, RouteKind, Scope};

use super::result::{c_enum, CEnum, Failure};

/// How a node was chosen (mirrors the core's `RouteKind`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_route_kind {
    /// The load-balancing policy chose.
    Balanced = 0,
    /// An existing affinity was honoured.
    Affinity = 1,
    /// A new affinity was created.
    Placed = 2,
    /// The affinity moved off an unavailable node.
    Repinned = 3,
    /// Data affinity fell back to load balancing.
    Fallback = 4,
    /// The panic policy chose among unavailable nodes.
    Panic = 5,
}

c_enum!(racaffinity_route_kind => RouteKind { Balanced, Affinity, Placed, Repinned, Fallback, Panic });

/// A routing decision: node id (dense, in config order) and how it was chosen.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct racaffinity_route {
    /// Node id: index of the node in config order (added nodes follow).
    pub node: u32,
    /// How the node was chosen.
    pub kind: racaffinity_route_kind,
}

/// A unit of work in flight on a node. Release it exactly once with
/// `racaffinity_lease_release`; the library remembers open leases, so a
/// second release (even of a copy) is INVALID_LEASE.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct racaffinity_lease {
    /// Node id.
    pub node: u32,
    /// How the node was chosen.
    pub kind: racaffinity_route_kind,
    /// Private: the issuing cluster handle.
    pub owner: u64,
    /// Private: the lease's token in the issuing cluster, except that 0
    /// (never issued) marks a route the library leased nothing for (see
    /// `racaffinity_cluster_pick_host_begins`).
    pub token: u64,
}

/// Node state.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_node_state {
    /// Takes new work.
    Up = 0,
    /// Planned maintenance: no new affinities.
    Draining = 1,
    /// Takes no picks.
    Down = 2,
}

c_enum!(racaffinity_node_state => NodeState { Up, Draining, Down });

/// What the nodes are to each other (`recovery.scope`), which decides how
/// in-doubt transactions are recovered.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_recovery_scope {
    /// Independent databases: scan every node, complete each id where it was found.
    Node = 0,
    /// Instances of one database (RAC): any answering instance lists and completes every id.
    Database = 1,
}

c_enum!(racaffinity_recovery_scope => RecoveryScope { Node, Database });

/// How a leased unit of work ended.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_outcome {
    /// Completed.
    Ok = 0,
    /// Failed with a node-level error.
    Failed = 1,
    /// Ended without a verdict on the node.
    Neutral = 2,
}

c_enum!(racaffinity_outcome => Outcome { Ok, Failed, Neutral });

/// Affinity scope.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_scope {
    /// Thread / context pins.
    Thread = 0,
    /// XA transactions.
    Transaction = 1,
    /// Web sessions.
    Session = 2,
    /// Data keys.
    Data = 3,
}

c_enum!(racaffinity_scope => Scope { Thread, Transaction, Session, Data });

impl From<Route> for racaffinity_route {
    #[inline]
    fn from(r: Route) -> Self {
        racaffinity_route { node: r.node.0, kind: r.kind.into() }
    }
}

/// An enum parameter as the core's type: `C` is the boundary's enum.
#[inline]
pub(crate) fn enum_arg<C: CEnum, T: From<C>>(v: u32) -> Result<T, Failure> {
    Ok(T::from(C::try_from(v)?))
}

/// A `racaffinity_node_state` parameter.
pub(crate) fn node_state_arg(v: u32) -> Result<NodeState, Failure> {
    enum_arg::<racaffinity_node_state, _>(v)
}

/// A `racaffinity_outcome` parameter.
pub(crate) fn outcome_arg(v: u32) -> Result<Outcome, Failure> {
    enum_arg::<racaffinity_outcome, _>(v)
}

/// A `racaffinity_scope` parameter.
pub(crate) fn scope_arg(v: u32) -> Result<Scope, Failure> {
    enum_arg::<racaffinity_scope, _>(v)
}

pub(crate) fn node_id(n: u32) -> NodeId {
    NodeId(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::connect::racaffinity_connect_form;
    use crate::capi::result::{racaffinity_result, InvalidEnumValue};

    /// Checks what every boundary enum must hold: distinct values, each one
    /// read back as itself, everything else refused with the type's name.
    fn check<E: CEnum + std::fmt::Debug + PartialEq + Into<u32>>() {
        let mut values: Vec<u32> = E::ALL.iter().map(|&e| e.into()).collect();
        for (&e, &v) in E::ALL.iter().zip(&values) {
            assert_eq!(E::try_from(v), Ok(e), "{} {v}", E::NAME);
        }
        values.sort_unstable();
        values.dedup();
        assert_eq!(values.len(), E::ALL.len(), "{}: two variants share a value", E::NAME);
        for bad in [values[values.len() - 1] + 1, u32::MAX] {
            let err = E::try_from(bad).unwrap_err();
            assert_eq!(err, InvalidEnumValue { name: E::NAME, value: bad });
            let f = Failure::from(err);
            assert_eq!(f.code, racaffinity_result::InvalidArgument);
            assert_eq!(f.detail, format!("{bad} is not a valid {}", E::NAME));
        }
    }

    macro_rules! as_u32 {
        ($($t:ty),+) => {$(
            impl From<$t> for u32 {
                fn from(e: $t) -> u32 {
                    e as u32
                }
            }
        )+};
    }
    as_u32!(
        racaffinity_result,
        racaffinity_route_kind,
        racaffinity_node_state,
        racaffinity_recovery_scope,
        racaffinity_outcome,
        racaffinity_scope,
        racaffinity_connect_form
    );

    #[test]
    fn every_boundary_enum_reads_back_each_value_and_refuses_the_rest() {
        check::<racaffinity_result>();
        check::<racaffinity_route_kind>();
        check::<racaffinity_node_state>();
        check::<racaffinity_recovery_scope>();
        check::<racaffinity_outcome>();
        check::<racaffinity_scope>();
        check::<racaffinity_connect_form>();
    }

    #[test]
    fn enum_parameters_keep_their_published_values() {
        // The header's values: callers and the other bindings hold these numbers.
        assert_eq!(node_state_arg(0).unwrap(), NodeState::Up);
        assert_eq!(node_state_arg(1).unwrap(), NodeState::Draining);
        assert_eq!(node_state_arg(2).unwrap(), NodeState::Down);
        assert_eq!(outcome_arg(0).unwrap(), Outcome::Ok);
        assert_eq!(outcome_arg(1).unwrap(), Outcome::Failed);
        assert_eq!(outcome_arg(2).unwrap(), Outcome::Neutral);
        assert_eq!(scope_arg(0).unwrap(), Scope::Thread);
        assert_eq!(scope_arg(1).unwrap(), Scope::Transaction);
        assert_eq!(scope_arg(2).unwrap(), Scope::Session);
        assert_eq!(scope_arg(3).unwrap(), Scope::Data);
        assert_eq!(scope_arg(4).unwrap_err().detail, "4 is not a valid racaffinity_scope");
    }

    #[test]
    fn core_enums_convert_both_ways_by_name() {
        for &s in &Scope::ALL {
            assert_eq!(Scope::from(racaffinity_scope::from(s)), s);
            assert_eq!(format!("{:?}", racaffinity_scope::from(s)), format!("{s:?}"));
        }
        for s in [NodeState::Up, NodeState::Draining, NodeState::Down] {
            assert_eq!(NodeState::from(racaffinity_node_state::from(s)), s);
        }
        for &k in racaffinity_route_kind::ALL {
            assert_eq!(racaffinity_route_kind::from(RouteKind::from(k)), k);
            assert_eq!(format!("{:?}", RouteKind::from(k)), format!("{k:?}"));
        }
        for &r in racaffinity_recovery_scope::ALL {
            assert_eq!(racaffinity_recovery_scope::from(RecoveryScope::from(r)), r);
        }
        for &o in racaffinity_outcome::ALL {
            assert_eq!(racaffinity_outcome::from(Outcome::from(o)), o);
        }
    }
}
