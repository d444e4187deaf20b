//! [continuity]: the replay decisions every binding shares
//! (`Cluster::replay_step`), walked step by step as a binding does.

mod common;

use racaffinity::{
    classify_sqlstate, Cluster, CommitOutcome, ErrorClass, ErrorKind, NodeId, NodeState, ReplayRefusal, ReplayStep,
    RequestFailure,
};

fn failure(c: &Cluster, node: &str) -> RequestFailure {
    RequestFailure {
        node: c.node_by_name(node).unwrap().id(),
        class: classify_sqlstate("57P01"),
        commit_in_flight: false,
        outcome: None,
        forced: false,
        replays: 0,
        replayable: true,
    }
}

fn id(c: &Cluster, n: &str) -> NodeId {
    c.node_by_name(n).unwrap().id()
}

const RAC: &str = "nodes = A, B, C\nrecovery.scope = database";
const INDEPENDENT: &str = "nodes = A, B, C";

#[test]
fn a_request_lost_before_commit_is_replayed_once_on_another_node() {
    let c = common::cluster(RAC);
    c.set_node_state("A", NodeState::Down).unwrap();
    let f = failure(&c, "A");
    let ReplayStep::Replay { node } = c.replay_step(&f).unwrap() else { panic!("replay expected") };
    assert_ne!(node, id(&c, "A"), "the replay goes elsewhere");
    let again = RequestFailure { replays: 1, node, ..f };
    assert_eq!(c.replay_step(&again).unwrap(), ReplayStep::GiveUp { refusal: ReplayRefusal::ReplayedAlready });
}

#[test]
fn a_lost_commit_is_checked_before_anything_is_replayed() {
    let c = common::cluster(RAC);
    let f = RequestFailure { commit_in_flight: true, ..failure(&c, "A") };
    // RAC: another instance answers for the failed one.
    let ReplayStep::CheckOutcome { node } = c.replay_step(&f).unwrap() else { panic!("check expected") };
    assert_ne!(node, id(&c, "A"));
    let committed = RequestFailure { outcome: Some(CommitOutcome::Committed), ..f };
    assert_eq!(c.replay_step(&committed).unwrap(), ReplayStep::Succeeded, "committed: success, no replay");
    // Committed wins even where a replay would be refused.
    let not_replayable = RequestFailure { replayable: false, replays: 9, ..committed };
    assert_eq!(c.replay_step(&not_replayable).unwrap(), ReplayStep::Succeeded);
    let aborted = RequestFailure { outcome: Some(CommitOutcome::Aborted), ..f };
    assert!(matches!(c.replay_step(&aborted).unwrap(), ReplayStep::Replay { .. }));
}

#[test]
fn a_transaction_still_running_is_ended_before_the_replay_and_given_up_if_it_still_runs() {
    let c = common::cluster(RAC);
    let f = RequestFailure { commit_in_flight: true, outcome: Some(CommitOutcome::InProgress), ..failure(&c, "B") };
    let ReplayStep::ForceOutcome { node } = c.replay_step(&f).unwrap() else { panic!("force expected") };
    assert_ne!(node, id(&c, "B"));
    let after = RequestFailure { forced: true, ..f };
    assert_eq!(c.replay_step(&after).unwrap(), ReplayStep::GiveUp { refusal: ReplayRefusal::OutcomeUnknown });
    let ended = RequestFailure { forced: true, outcome: Some(CommitOutcome::Aborted), ..f };
    assert!(matches!(c.replay_step(&ended).unwrap(), ReplayStep::Replay { .. }));
    let unknown = RequestFailure { outcome: Some(CommitOutcome::Unknown), ..f };
    assert_eq!(c.replay_step(&unknown).unwrap(), ReplayStep::GiveUp { refusal: ReplayRefusal::OutcomeUnknown });
}

#[test]
fn independent_databases_ask_the_failed_node_itself() {
    let c = common::cluster(INDEPENDENT);
    let f = RequestFailure { commit_in_flight: true, ..failure(&c, "C") };
    assert_eq!(c.replay_step(&f).unwrap(), ReplayStep::CheckOutcome { node: id(&c, "C") });
    let running = RequestFailure { outcome: Some(CommitOutcome::InProgress), ..f };
    assert_eq!(c.replay_step(&running).unwrap(), ReplayStep::ForceOutcome { node: id(&c, "C") });
}

#[test]
fn refusals_carry_their_cause() {
    let c = common::cluster(RAC);
    let f = failure(&c, "A");
    let unique = RequestFailure { class: classify_sqlstate("23505"), ..f };
    assert_eq!(c.replay_step(&unique).unwrap(), ReplayStep::GiveUp { refusal: ReplayRefusal::NotRecoverable });
    assert_eq!(unique.class, ErrorClass::NotRecoverable);
    let xa = RequestFailure { replayable: false, ..f };
    assert_eq!(c.replay_step(&xa).unwrap(), ReplayStep::GiveUp { refusal: ReplayRefusal::NotReplayable });
    for n in ["A", "B", "C"] {
        c.set_node_state(n, NodeState::Down).unwrap();
    }
    assert_eq!(c.replay_step(&f).unwrap(), ReplayStep::GiveUp { refusal: ReplayRefusal::NoNode });
    let lost = RequestFailure { commit_in_flight: true, ..f };
    assert_eq!(
        c.replay_step(&lost).unwrap(),
        ReplayStep::GiveUp { refusal: ReplayRefusal::OutcomeUnknown },
        "RAC with no instance left to ask: unknown, never a blind replay"
    );
    let bogus = RequestFailure { node: NodeId(99), ..f };
    assert_eq!(c.replay_step(&bogus).unwrap_err().kind(), ErrorKind::UnknownNode);
}

#[test]
fn a_reset_connection_on_the_only_usable_node_replays_there() {
    let c = common::cluster(RAC);
    c.set_node_state("B", NodeState::Down).unwrap();
    c.set_node_state("C", NodeState::Down).unwrap();
    assert_eq!(c.replay_step(&failure(&c, "A")).unwrap(), ReplayStep::Replay { node: id(&c, "A") });
}

#[test]
fn the_decision_changes_nothing() {
    let c = common::cluster(RAC);
    let before = (c.topology_fingerprint(), c.metrics().to_json());
    for commit_in_flight in [false, true] {
        let _ = c.replay_step(&RequestFailure { commit_in_flight, ..failure(&c, "A") }).unwrap();
    }
    assert_eq!((c.topology_fingerprint(), c.metrics().to_json()), before);
}

#[test]
fn a_removed_node_is_never_where_a_replay_or_an_outcome_check_goes() {
    let c = common::cluster(RAC);
    let f = failure(&c, "A");
    c.set_node_state("B", NodeState::Down).unwrap();
    c.set_node_state("C", NodeState::Down).unwrap();
    // The request failed on A, which the operator then took out of the cluster.
    c.remove_node("A").unwrap();
    assert_eq!(c.replay_step(&f).unwrap(), ReplayStep::GiveUp { refusal: ReplayRefusal::NoNode });
    let lost = RequestFailure { commit_in_flight: true, ..f };
    assert_eq!(c.replay_step(&lost).unwrap(), ReplayStep::GiveUp { refusal: ReplayRefusal::OutcomeUnknown });
}

#[test]
fn an_outcome_or_a_force_without_a_commit_in_flight_is_an_invalid_argument() {
    // A host that says no COMMIT was in flight yet reports what a check of
    // it found contradicts itself: answering `Replay` would commit twice
    // where the outcome was `committed`; answering `Succeeded` would report
    // work the host says it never committed. Neither guess is safe.
    let c = common::cluster(RAC);
    for outcome in [CommitOutcome::Committed, CommitOutcome::Aborted, CommitOutcome::InProgress, CommitOutcome::Unknown]
    {
        let f = RequestFailure { outcome: Some(outcome), ..failure(&c, "A") };
        let e = c.replay_step(&f).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{outcome:?}: {e}");
        assert!(e.to_string().contains("commit_in_flight"), "{e}");
    }
    let forced = RequestFailure { forced: true, ..failure(&c, "A") };
    assert_eq!(c.replay_step(&forced).unwrap_err().kind(), ErrorKind::InvalidArgument);
    // A failure that is not recoverable is refused first, whatever else it says.
    let not_recoverable = RequestFailure {
        class: classify_sqlstate("23505"),
        outcome: Some(CommitOutcome::Committed),
        ..failure(&c, "A")
    };
    assert_eq!(c.replay_step(&not_recoverable).unwrap_err().kind(), ErrorKind::InvalidArgument);
}
