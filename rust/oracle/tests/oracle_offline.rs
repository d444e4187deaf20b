//! The Oracle layer without an Oracle client or database: the connect strings the
//! pools use, the error classification, and the typed DPI-1047 error of building
//! pools when the client library is missing.
#![cfg(feature = "oracle")]

use oracle::{DbError, ErrorKind as OraKind};
use racaffinity::{Cluster, ErrorKind, NodeId, Outcome};
use racaffinity_oracle::{
    is_instance_gone_error, oracle_code, outcome_of, Error, NodePool, OracleCode, OracleError, OracleNodePools,
    OraclePool, INSTANCE_GONE,
};

const PASSWORD: &str = "s3cr3t-Pa55word";
const USER: &str = "scott_the_user";

fn cluster(text: &str) -> Cluster {
    Cluster::from_config_text(text).unwrap()
}

fn seed_cluster() -> Cluster {
    cluster(
        "name = orcl
         service = MYDB
         nodes = MYDB1, MYDB2, MYDB3
         node.MYDB1.address = MYDBHOST1:1522
         node.MYDB2.address = mydbhost2.example.com
         node.MYDB3.address = [2001:db8::3]:1523",
    )
}

fn config_message(e: OracleError) -> String {
    match e {
        Error::Config(m) => m,
        other => panic!("expected a Config error, got {other:?}"),
    }
}

// ---- connect strings -------------------------------------------------------

#[test]
fn connect_strings_are_per_instance_descriptors() {
    let got = OracleNodePools::builder(seed_cluster()).connect_strings().unwrap();
    let want = [
        "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))\
         (CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))",
        "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=mydbhost2.example.com)(PORT=1521)))\
         (CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB2)))",
        "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=2001:db8::3)(PORT=1523)))\
         (CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB3)))",
    ];
    let got: Vec<(u32, &str)> = got.iter().map(|(id, s)| (id.0, s.as_str())).collect();
    assert_eq!(got, [(0, want[0]), (1, want[1]), (2, want[2])]);
}

#[test]
fn service_parameter_and_default_port() {
    let got =
        OracleNodePools::builder(seed_cluster()).service("SALES.example.com").default_port(1600).connect_strings();
    let got = got.unwrap();
    assert_eq!(
        got[0].1,
        "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))\
         (CONNECT_DATA=(SERVICE_NAME=SALES.example.com)(INSTANCE_NAME=MYDB1)))"
    );
    assert_eq!(
        got[1].1,
        "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=mydbhost2.example.com)(PORT=1600)))\
         (CONNECT_DATA=(SERVICE_NAME=SALES.example.com)(INSTANCE_NAME=MYDB2)))"
    );
}

#[test]
fn connect_string_errors_are_typed_config_errors() {
    let no_service = cluster("nodes = A1\nnode.A1.address = h1:1521");
    assert_eq!(
        config_message(OracleNodePools::builder(no_service).connect_strings().unwrap_err()),
        "no service name: call `.service(..)` or set `service` in the cluster config"
    );

    let no_address = cluster("service = S\nnodes = A1, A2\nnode.A1.address = h1:1521");
    assert_eq!(
        config_message(OracleNodePools::builder(no_address).connect_strings().unwrap_err()),
        "node `A2` has no address; set `node.A2.address = host:port`"
    );

    // Node names may contain `-`; instance names in a descriptor may not.
    let bad_instance = cluster("service = S\nnodes = rac-1\nnode.rac-1.address = h1:1521");
    let m = config_message(OracleNodePools::builder(bad_instance).connect_strings().unwrap_err());
    assert!(
        m.starts_with("node `rac-1`: connect string: invalid argument: invalid character '-' in instance name"),
        "{m}"
    );

    let bad_service = OracleNodePools::builder(seed_cluster()).service("S)(SERVER=dedicated").connect_strings();
    let m = config_message(bad_service.unwrap_err());
    assert!(m.contains("invalid character ')' in service name"), "{m}");
}

#[test]
fn build_checks_config_before_loading_the_client() {
    // No credentials: a Config error, not DPI-1047.
    let e = OracleNodePools::builder(seed_cluster()).build().unwrap_err();
    assert_eq!(config_message(e), "no credentials: call `.credentials(user, password)`");
    let no_address = cluster("service = S\nnodes = A1");
    let e = OracleNodePools::builder(no_address).credentials(USER, PASSWORD).build().unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e:?}");
}

// ---- building without an Oracle client ----------------------------------------

#[test]
fn building_without_the_client_library_is_a_typed_dpi_1047_error() {
    let result = std::panic::catch_unwind(|| {
        OracleNodePools::builder(seed_cluster())
            .credentials(USER, PASSWORD)
            .max_connections(4)
            .configure(|b| {
                b.stmt_cache_size(10);
            })
            .build()
    });
    let e = result.expect("building must not panic").expect_err("no Oracle client is installed here");
    let msg = e.to_string();
    assert!(msg.contains("DPI-1047"), "{msg}");
    assert!(msg.starts_with("pool of node `MYDB1`: DPI Error: DPI-1047"), "{msg}");
    let Error::Pool { node, source } = &e else { panic!("expected Error::Pool, got {e:?}") };
    assert_eq!(node, "MYDB1", "the first node's pool is opened first");
    assert_eq!(source.kind(), OraKind::DpiError);
    assert_eq!(source.dpi_code(), Some(1047));
    assert_eq!(oracle_code(source), Some(OracleCode::Dpi(1047)));
    assert!(!is_instance_gone_error(source), "a missing client is not a node failure");
    // Credentials never leak.
    for text in [msg, format!("{e:?}"), format!("{:?}", std::error::Error::source(&e))] {
        assert!(!text.contains(PASSWORD) && !text.contains(USER), "{text}");
    }
}

#[test]
fn debug_never_shows_credentials() {
    let b = OracleNodePools::builder(seed_cluster()).credentials(USER, PASSWORD).configure(|_| {});
    let d = format!("{b:?}");
    assert!(d.contains("credentials: Some(<redacted>)"), "{d}");
    assert!(d.contains("service: None") && d.contains("default_port: 1521"), "{d}");
    assert!(!d.contains(PASSWORD) && !d.contains(USER), "{d}");
    let d = format!("{b:#?}");
    assert!(!d.contains(PASSWORD) && !d.contains(USER), "{d}");
}

#[test]
fn oracle_pools_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<OraclePool>();
    send_sync::<OracleNodePools>();
    send_sync::<OracleError>();
}

// ---- error classification ---------------------------------------------------------

/// An error as the `oracle` crate builds it from ODPI-C's error info: the message
/// decides OCI vs DPI, as in `oracle::Error::from_db_error`.
#[allow(deprecated)]
fn ora_err(code: i32, message: &str) -> oracle::Error {
    let db = DbError::new(code, 0, message, "dpiConn_create", "");
    if message.starts_with("DPI") {
        oracle::Error::DpiError(db)
    } else {
        oracle::Error::OciError(db)
    }
}

fn ora(code: i32) -> oracle::Error {
    ora_err(code, &format!("ORA-{code:05}: some text"))
}

#[test]
fn every_table_code_classifies_as_gone() {
    for g in INSTANCE_GONE {
        let e = match g.code {
            OracleCode::Ora(n) => ora(n),
            OracleCode::Dpi(n) => ora_err(0, &format!("DPI-{n:04}: {}", g.message)),
        };
        assert_eq!(oracle_code(&e), Some(g.code));
        assert!(is_instance_gone_error(&e), "{}", g.code);
        assert!(OraclePool::is_node_failure(&e), "{}", g.code);
        assert_eq!(outcome_of(&e), Outcome::Failed, "{}", g.code);
    }
}

#[test]
fn the_required_codes_are_gone() {
    for code in [3113, 3114, 3135, 12514, 12541, 1033, 1089, 1092, 25408] {
        assert_eq!(outcome_of(&ora(code)), Outcome::Failed, "ORA-{code}");
    }
}

#[test]
fn work_errors_are_neutral() {
    for code in [1, 942, 1017, 28, 1013, 60, 1591, 24756, 2049, 20001] {
        let e = ora(code);
        assert_eq!(oracle_code(&e), Some(OracleCode::Ora(code)));
        assert_eq!(outcome_of(&e), Outcome::Neutral, "ORA-{code}");
    }
    // ODPI-C errors that are not about the instance.
    for msg in ["DPI-1047: Cannot locate a 64-bit Oracle Client library", "DPI-1010: not connected"] {
        assert_eq!(outcome_of(&ora_err(0, msg)), Outcome::Neutral, "{msg}");
    }
    // The crate's own errors carry no code.
    let e = oracle::Error::new(OraKind::NullValue, "NULL value found");
    assert_eq!(oracle_code(&e), None);
    assert_eq!(outcome_of(&e), Outcome::Neutral);
}

#[test]
fn dpi_1080_is_classified_by_the_error_that_closed_the_connection() {
    // As ODPI-C words it (dpiError__wrap): code 0, DPI message, then the original.
    let eof =
        ora_err(0, "DPI-1080: connection was closed by ORA-3113\nORA-03113: end-of-file on communication channel");
    assert_eq!(oracle_code(&eof), Some(OracleCode::Dpi(1080)));
    assert_eq!(outcome_of(&eof), Outcome::Failed);
    let killed = ora_err(0, "DPI-1080: connection was closed by ORA-28\nORA-00028: your session has been killed");
    assert_eq!(outcome_of(&killed), Outcome::Neutral);
    assert_eq!(outcome_of(&ora_err(0, "DPI-1080: connection was closed")), Outcome::Failed);
}

#[test]
fn pool_errors_name_the_node_without_credentials() {
    let e: OracleError = Error::Pool {
        node: "MYDB2".into(),
        source: ora_err(1017, "ORA-01017: invalid username/password; logon denied"),
    };
    assert_eq!(e.to_string(), "pool of node `MYDB2`: OCI Error: ORA-01017: invalid username/password; logon denied");
    assert_eq!(e.node(), Some("MYDB2"));
    let e: OracleError = racaffinity::Error::NoNodeAvailable { scope: None }.into();
    assert_eq!(e.routing_error().unwrap().kind(), ErrorKind::NoNodeAvailable);
    let _ = NodeId(0);
}
