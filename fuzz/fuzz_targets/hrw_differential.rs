//! Differential: the Rust core's racaffinity-hrw-v2 against the independent
//! Python reference in tests/vectors/generate.py, on random topologies and
//! keys.
//!
//! One `python3 fuzz/hrw_reference.py` child runs for the whole fuzzing
//! session; each input is one JSON request line to it and one answer line
//! back. The reference was written from the documented scheme, not from the
//! Rust code, so agreement on random inputs (not only on the checked-in
//! vectors) is what lets C, Java, Python and Rust processes place the same
//! gtrid, session and partition on the same node.
//!
//! Compared, for every input:
//! - `h(key)` for byte keys, `h(i64 LE)` for integer keys, node seeds `h(name)`;
//! - `score` exactly, and `weighted_score` to within a few ulps (the README
//!   allows another language's `ln()` to differ by about an ulp);
//! - the partition of a byte or integer key (`h % data.partitions`) through
//!   `Cluster::partition_of`;
//! - the owner of partitions (random ones and the keys' own) through
//!   `Cluster::partition_owner`, and of stateless sessions through
//!   `Cluster::session_route`, over the nodes left after random removals,
//!   with equal or unequal static weights. A winner the reference calls
//!   Fragile (decided by the last bits of `ln()`) is skipped, as the vectors
//!   skip it.
#![no_main]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use racaffinity::{hash, Cluster, DataKey};
use serde_json::{json, Value};

#[derive(Debug, Arbitrary)]
struct Input {
    nodes: Vec<(Vec<u8>, u32)>,
    equal_weights: bool,
    partitions: u32,
    keys: Vec<Vec<u8>>,
    ints: Vec<i64>,
    parts: Vec<u32>,
    remove: Vec<u8>,
}

const NAME_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.$#";

/// A valid node name (letters, digits, `_ - . $ #`, 1..=64 bytes) from raw bytes.
fn node_name(raw: &[u8]) -> String {
    let mut s: String =
        raw.iter().take(64).map(|b| NAME_ALPHABET[usize::from(*b) % NAME_ALPHABET.len()] as char).collect();
    if s.is_empty() {
        s.push('N');
    }
    s
}

struct Reference {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

fn reference() -> &'static Mutex<Reference> {
    static REF: OnceLock<Mutex<Reference>> = OnceLock::new();
    REF.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/hrw_reference.py");
        let python = std::env::var("RACAFF_FUZZ_PYTHON").unwrap_or_else(|_| "python3".into());
        let mut child = Command::new(&python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the Python reference ({python} {script}): {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Mutex::new(Reference { _child: child, stdin, stdout })
    })
}

fn ask(req: &Value) -> Value {
    let mut r = reference().lock().unwrap_or_else(|p| p.into_inner());
    let mut line = req.to_string();
    line.push('\n');
    r.stdin.write_all(line.as_bytes()).expect("write to the Python reference");
    r.stdin.flush().expect("flush");
    let mut answer = String::new();
    let n = r.stdout.read_line(&mut answer).expect("read from the Python reference");
    assert!(n > 0, "the Python reference exited (see its traceback above)");
    serde_json::from_str(&answer).expect("reference answers JSON")
}

fn hex64(v: u64) -> String {
    format!("{v:016x}")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fuzz_target!(|input: Input| {
    // Topology: up to 12 distinct (case-insensitively) valid names.
    let mut nodes: Vec<(String, u32)> = Vec::new();
    let shared = input.nodes.first().map_or(1, |n| 1 + n.1 % 1_000_000);
    for (raw, w) in input.nodes.iter().take(12) {
        let name = node_name(raw);
        if nodes.iter().any(|(n, _)| n.eq_ignore_ascii_case(&name)) {
            continue;
        }
        let weight = if input.equal_weights { shared } else { 1 + w % 1_000_000 };
        nodes.push((name, weight));
    }
    if nodes.is_empty() {
        return;
    }
    let partitions = 1 + input.partitions % 1_048_576;
    let mut text = format!(
        "nodes = {}\ndata.partitions = {partitions}\nsession.mode = stateless\n",
        nodes.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
    );
    for (n, w) in &nodes {
        text.push_str(&format!("node.{n}.weight = {w}\n"));
    }
    let cluster = Cluster::from_config_text(&text).unwrap_or_else(|e| panic!("valid topology refused: {e}\n{text}"));
    // Remove some nodes (never the last): only the live ones take part.
    for r in input.remove.iter().take(nodes.len() - 1) {
        let i = usize::from(*r) % nodes.len();
        if nodes.len() > 1 {
            let (name, _) = nodes.remove(i);
            cluster.remove_node(&name).expect("remove a live node");
        }
    }

    let keys: Vec<&[u8]> =
        input.keys.iter().take(16).map(|k| &k[..k.len().min(1024)]).filter(|k| !k.is_empty()).collect();
    let ints: Vec<i64> = input.ints.iter().take(16).copied().collect();
    let mut parts: Vec<u32> = input.parts.iter().take(16).map(|p| p % partitions).collect();
    // The keys' own partitions too, so routing a key is covered end to end.
    let key_parts: Vec<u32> =
        keys.iter().map(|k| cluster.partition_of(DataKey::Bytes(k)).expect("valid key")).collect();
    let int_parts: Vec<u32> = ints.iter().map(|v| cluster.partition_of(DataKey::Int(*v)).expect("int key")).collect();
    parts.extend(&key_parts);
    parts.extend(&int_parts);
    // Score inputs: each key against each live node with its weight.
    let scores: Vec<(u64, &str, u32)> = keys
        .iter()
        .take(4)
        .flat_map(|k| nodes.iter().map(move |(n, w)| (hash::hash_bytes(k), n.as_str(), *w)))
        .collect();

    let req = json!({
        "nodes": nodes.iter().map(|(n, w)| json!([n, w])).collect::<Vec<_>>(),
        "partitions": partitions,
        "keys": keys.iter().map(|k| hex(k)).collect::<Vec<_>>(),
        "ints": ints,
        "parts": parts,
        "scores": scores.iter().map(|(h, n, w)| json!([hex64(*h), n, w])).collect::<Vec<_>>(),
    });
    let ans = ask(&req);
    let strs = |field: &str| -> Vec<Option<String>> {
        ans[field].as_array().expect(field).iter().map(|v| v.as_str().map(str::to_string)).collect()
    };

    for (k, want) in keys.iter().zip(strs("key_hash")) {
        assert_eq!(Some(hex64(hash::hash_bytes(k))), want, "h(key) differs for key {}", hex(k));
    }
    for (v, want) in ints.iter().zip(strs("int_hash")) {
        assert_eq!(Some(hex64(hash::hash_i64(*v))), want, "h(i64) differs for {v}");
    }
    for ((n, _), want) in nodes.iter().zip(strs("seed")) {
        assert_eq!(Some(hex64(hash::node_seed(n))), want, "node seed differs for {n}");
    }
    let want_parts: Vec<u64> = ans["key_partition"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    for ((k, got), want) in keys.iter().zip(&key_parts).zip(&want_parts) {
        assert_eq!(u64::from(*got), *want, "partition of key {} differs", hex(k));
    }
    for (((h, n, w), s), ws) in scores.iter().zip(strs("score")).zip(strs("wscore")) {
        let seed = hash::node_seed(n);
        let score = hash::score(*h, seed);
        assert_eq!(Some(hex64(score)), s, "score differs for node {n}");
        let got = hash::weighted_score(score, f64::from(*w));
        let want = f64::from_bits(u64::from_str_radix(ws.as_deref().unwrap(), 16).unwrap());
        // Both sides call the platform's ln(); allow the documented ulp-level drift.
        assert!(
            (got - want).abs() <= want.abs() * 4.0 * f64::EPSILON,
            "weighted score differs for node {n} weight {w}: {got:e} vs {want:e}"
        );
    }
    let name_of = |id| cluster.node_name(id).expect("owner is a node");
    for (k, want) in keys.iter().zip(strs("key_owner")) {
        let Some(want) = want else { continue };
        let got = cluster.session_route(k).expect("stateless session route");
        assert_eq!(name_of(got.node), want, "stateless session owner differs for key {} in {nodes:?}", hex(k));
    }
    for (p, want) in parts.iter().zip(strs("part_owner")) {
        let Some(want) = want else { continue };
        let got = cluster.partition_owner(*p).expect("partition owner");
        assert_eq!(name_of(got), want, "owner of partition {p} differs in {nodes:?}");
    }
});
