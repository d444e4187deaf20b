//! The tool's command line against the core's etcd gateway stand-in (no
//! etcd): what a shell pipeline and the usual option spellings do to it.

#[path = "../../core/tests/support/gateway.rs"]
mod gateway;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use gateway::{kv, silent, Gateway, Request};

const TOOL: &str = env!("CARGO_BIN_EXE_racaffinity-feed");

/// A stand-in whose prefix `p/` holds `n` records; puts answer revision 9.
fn gateway_of(n: usize) -> Gateway {
    let kvs: Vec<String> = (0..n).map(|i| kv(&format!("p/fan/instance-{i:05}"), "x", 3)).collect();
    let body = format!(r#"{{"header":{{"revision":"5"}},"kvs":[{}],"count":"{n}"}}"#, kvs.join(","));
    Gateway::start(
        Arc::new(move |_: &Request, _| body.clone()),
        Arc::new(|s: &mut TcpStream, _: &Request, _| silent(s)),
    )
}

fn run(args: &[&str]) -> Output {
    Command::new(TOOL).args(args).env_remove("RACAFF_FEED").stdin(Stdio::null()).output().expect("run racaffinity-feed")
}

/// `out` is a usage error (status 2) whose message names `says`; `what`
/// tells the case in a failure.
fn assert_usage_error(out: &Output, says: &str, what: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: stdout {} stderr {err}", text(&out.stdout));
    assert!(err.contains(says), "{what}: {err}");
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `show | head -1`: the reader goes away after a line while `show` has
/// far more than a pipe holds to print (20,000 records, about 700 KB). A
/// read command whose reader is gone has nothing left to do: status 0 and
/// nothing on stderr. Before, it exited 1 ("cannot write the output:
/// Broken pipe"), the status that says etcd was unreachable, and a
/// `set -o pipefail` script failed.
#[test]
fn show_into_a_closed_pipe_ends_quietly_with_status_0() {
    let gw = gateway_of(20_000);
    let feed = format!("etcd://{}/p", gw.endpoint);
    let mut child = Command::new(TOOL)
        .args(["show", "--feed", &feed])
        .env_remove("RACAFF_FEED")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("# 20000 records under p/"), "{first}");
    // The reader (and the pipe's read end) is dropped here, as `head` exits.
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "nothing to say about a reader that left");
}

/// Options before the command: a command's own option with its value
/// (`--timeout 30s drain A`) is not taken for the command. Before, `30s`
/// was: "unknown command `30s`".
#[test]
fn an_option_before_the_command_is_read_as_an_option() {
    let gw = gateway_of(0);
    let feed = format!("etcd://{}/p", gw.endpoint);
    let out = run(&["--timeout", "30s", "drain", "A", "--feed", &feed]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "wrote node/A/state = draining timeout=30s at revision 9\n");
    let out = run(&["--feed", &feed, "--kind", "tcp", "--interval", "1s", "show"]);
    assert_usage_error(&out, "`show` has no option --kind", "a monitor option before `show`");
    let out = run(&["--bogus", "drain", "A", "--feed", &feed]);
    assert_usage_error(&out, "no option --bogus", "--bogus");
    assert_eq!(gw.puts.load(std::sync::atomic::Ordering::SeqCst), 1, "only the good command wrote");
}

/// `--name=value` anywhere: before the command, after it, global options
/// and a command's own. Coverage: it passed the first time (the parser
/// took `=` already).
#[test]
fn options_take_their_value_after_an_equals_sign() {
    let gw = gateway_of(0);
    let feed = format!("--feed=etcd://{}/p", gw.endpoint);
    let out = run(&["--etcd-timeout=2s", &feed, "--timeout=5s", "drain", "B"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "wrote node/B/state = draining timeout=5s at revision 9\n");
    let out = run(&["weight", "B", "7", &feed, "--etcd-timeout=2s"]);
    assert_eq!(text(&out.stdout), "wrote node/B/weight = 7 at revision 9\n", "{}", text(&out.stderr));
}

/// `help` into a writer that fails: a closed pipe is the reader leaving
/// (status 0, nothing said), any other failure (a full disk) is status 3
/// with the reason, not etcd's status 1.
#[test]
fn a_read_command_whose_output_fails_otherwise_exits_3() {
    struct Failing(std::io::ErrorKind);
    impl std::io::Write for Failing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(self.0.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(self.0.into())
        }
    }
    let help = ["help".to_string()];
    let mut err = Vec::new();
    let code = racaffinity_feed_tool::run(&help, None, &mut Failing(std::io::ErrorKind::BrokenPipe), &mut err);
    assert_eq!((code, text(&err)), (0, String::new()));
    let code = racaffinity_feed_tool::run(&help, None, &mut Failing(std::io::ErrorKind::StorageFull), &mut err);
    assert_eq!(code, 3, "{}", text(&err));
    assert!(text(&err).contains("cannot write the output"), "{}", text(&err));
}

/// Waits up to `limit` for the child to exit; kills it and fails if it
/// does not, as a monitor that ignores its output would run forever.
fn exits_within(mut child: std::process::Child, limit: std::time::Duration, what: &str) -> Output {
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("{what}: still running after {limit:?}; stderr: {}", text(&out.stderr));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn monitor(feed: &str, stdout: Stdio) -> std::process::Child {
    Command::new(TOOL)
        .args(["monitor", "--feed", feed, "--node", "A=127.0.0.1:1", "--interval", "100ms", "--probe-timeout", "100ms"])
        .env_remove("RACAFF_FEED")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `monitor | head -1`: the reader of the monitor's log went away. As for
/// the read commands, a closed pipe is the reader having enough: the
/// monitor stops as on SIGTERM (its lease, if any, revoked) with status 0
/// and says nothing about the pipe. Before, it ignored every failed write
/// and ran on, so the pipeline never ended.
#[test]
fn monitor_into_a_closed_pipe_stops_with_status_0() {
    let gw = gateway_of(0);
    let feed = format!("etcd://{}/p", gw.endpoint);
    let mut child = monitor(&feed, Stdio::piped());
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("monitor "), "{first}");
    // The read end is closed here; the next line the monitor writes (its
    // probe of A, which refuses, within an interval) meets a closed pipe.
    let out = exits_within(child, std::time::Duration::from_secs(20), "monitor | head -1");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains("output") && !err.contains("pipe"), "nothing to say about a reader that left: {err}");
}

/// The monitor's log into a full disk: status 3 with the reason, as any
/// command whose output fails otherwise.
#[test]
fn monitor_whose_output_fails_otherwise_exits_3() {
    let gw = gateway_of(0);
    let feed = format!("etcd://{}/p", gw.endpoint);
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let out =
        exits_within(monitor(&feed, Stdio::from(full)), std::time::Duration::from_secs(20), "monitor > /dev/full");
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot write the output"), "{}", text(&out.stderr));
}

/// `drain NODE --timeout T` writes `draining timeout=T`: a value with a
/// space would add fields of its own to the record. `--timeout '30s
/// since=0'` wrote `draining timeout=30s since=0`, a drain dated 1970 that
/// every subscriber ends at once (the node down fleet-wide) though
/// `--dated` was not given, and `'30s timeout=1h'` a second timeout.
/// Nothing may be written: status 2, as for `add --weight '1 2'`.
#[test]
fn a_drain_timeout_with_spaces_is_refused_not_spliced_into_the_record() {
    let gw = gateway_of(0);
    let feed = format!("etcd://{}/p", gw.endpoint);
    for timeout in ["30s since=0", "30s timeout=1h", " 30s", "30s "] {
        let out = run(&["drain", "A", "--timeout", timeout, "--feed", &feed]);
        assert_usage_error(&out, "--timeout", &format!("--timeout {timeout:?}"));
    }
    assert_eq!(gw.puts.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing written");
}

/// `-h` and `--help` after the command ask for the help, as they do before
/// it: `down -h` took `-h` for the node and wrote `node/-h/state = down`
/// to the fleet's feed, and `drain A --help` was a usage error. Both now
/// print the help, status 0, nothing written; a node really named `-h` is
/// still reachable after `--`.
#[test]
fn help_after_the_command_prints_the_help_and_writes_nothing() {
    let gw = gateway_of(0);
    let feed = format!("etcd://{}/p", gw.endpoint);
    for args in [&["down", "-h", "--feed", &feed][..], &["drain", "A", "--help", "--feed", &feed]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: stdout {} stderr {}", text(&out.stdout), text(&out.stderr));
        assert_eq!(text(&out.stdout), racaffinity_feed_tool::HELP, "{args:?}");
    }
    assert_eq!(gw.puts.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing written");
    let out = run(&["down", "--feed", &feed, "--", "-h"]);
    assert_eq!(text(&out.stdout), "wrote node/-h/state = down at revision 9\n", "{}", text(&out.stderr));
}

/// `--partitions` out of the clusters' range is the flag's error: it named
/// the config key (`data.partitions is out of range`), which the command
/// line has no such thing as. Nothing is written.
#[test]
fn partitions_out_of_range_is_refused_naming_the_flag() {
    let gw = gateway_of(0);
    let feed = format!("etcd://{}/p", gw.endpoint);
    for n in ["99999999", "1048577", "0"] {
        let out = run(&["partition-map", "0=A", "--partitions", n, "--feed", &feed]);
        assert_usage_error(&out, "--partitions", &format!("--partitions {n}"));
        let err = text(&out.stderr);
        assert!(!err.contains("data.partitions"), "--partitions {n}: {err}");
    }
    let out = run(&["partition-map", "0=A", "--partitions", "1048576", "--feed", &feed]);
    assert_eq!(text(&out.stdout), "wrote partition_map = 0=A at revision 9\n", "{}", text(&out.stderr));
    assert_eq!(gw.puts.load(std::sync::atomic::Ordering::SeqCst), 1, "only the good map written");
}

/// `--` as an option's value before the command is that value, as it is
/// after the command: it was taken for the end of options and dropped, so
/// the next word became the value (`--address -- add A B` wrote
/// `node/B = present address=A`).
#[test]
fn a_double_dash_value_before_the_command_is_the_options_value() {
    let gw = gateway_of(0);
    let feed = format!("etcd://{}/p", gw.endpoint);
    for (before, after) in [
        (&["--address", "--", "add", "A", "B"][..], &["add", "A", "B", "--address", "--"][..]),
        (&["--timeout", "--", "drain", "A"], &["drain", "A", "--timeout", "--"]),
    ] {
        let first = run(&[before, &["--feed", &feed]].concat());
        let second = run(&[after, &["--feed", &feed]].concat());
        assert_eq!(
            (first.status.code(), text(&first.stdout), text(&first.stderr)),
            (second.status.code(), text(&second.stdout), text(&second.stderr)),
            "{before:?} and {after:?}"
        );
        assert_eq!(first.status.code(), Some(2), "{before:?}: {}", text(&first.stderr));
    }
    assert_eq!(gw.puts.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing written");
}

/// A write whose request etcd took and never answered may have been
/// carried out (a member cut off from its client after committing, a
/// timeout shorter than the commit): the tool says the outcome is unknown.
/// It said "no etcd member reachable" under the status whose help reads
/// "nothing written", and a script took the record for unwritten. A
/// member that refuses the connection got nothing: that still says so.
#[test]
fn a_write_sent_and_never_answered_is_reported_as_of_unknown_outcome() {
    use std::io::Read;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = l.local_addr().unwrap().to_string();
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                // Takes the whole request, then holds the connection silent.
                let mut buf = Vec::new();
                let mut b = [0u8; 4096];
                while let Ok(n) = s.read(&mut b) {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&b[..n]);
                    if buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.ends_with(b"}") {
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            });
        }
    });
    let feed = format!("etcd://{endpoint}/p");
    let out = run(&["down", "A", "--feed", &feed, "--etcd-timeout", "300ms"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(text(&out.stdout), "", "nothing confirmed");
    assert!(requests.load(std::sync::atomic::Ordering::SeqCst) >= 1, "the request reached the member");
    assert!(err.contains("outcome unknown") && !err.contains("unreachable"), "{err}");

    // A port nobody listens on: the request never left.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let out = run(&["down", "A", "--feed", &format!("etcd://{closed}/p"), "--etcd-timeout", "300ms"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nothing written") && !err.contains("outcome unknown"), "{err}");
}

/// `--partitions +8` was taken for 8: the clusters' `data.partitions`
/// refuses a sign (digits only), and so does the flag now.
#[test]
fn a_signed_partitions_count_is_refused() {
    let gw = gateway_of(0);
    let feed = format!("etcd://{}/p", gw.endpoint);
    let out = run(&["partition-map", "0=A", "--partitions", "+8", "--feed", &feed]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--partitions"), "{err}");
    assert_eq!(gw.puts.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing written");
}

/// `show` prints one record a line, tab-separated: a key or value holding a
/// newline, a tab or a terminal escape (etcd takes any bytes; the records
/// subscribers refuse are shown too) must not make a line of its own nor
/// reach the terminal raw. Before, the value `down\n6\tnode/B/state\tdown`
/// printed as two records, the second one forged.
#[test]
fn show_prints_each_record_on_one_line_whatever_its_bytes() {
    let body = format!(
        r#"{{"header":{{"revision":"5"}},"kvs":[{},{}],"count":"2"}}"#,
        kv("p/node/A/state", "down\n6\tnode/B/state\tdown", 3),
        kv("p/fan/x\ty", "\u{1b}[2Jback\\slash", 4)
    );
    let gw = Gateway::start(
        Arc::new(move |_: &Request, _| body.clone()),
        Arc::new(|s: &mut TcpStream, _: &Request, _| silent(s)),
    );
    let out = run(&["show", "--feed", &format!("etcd://{}/p", gw.endpoint)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let records: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        records,
        ["3\tnode/A/state\tdown\\n6\\tnode/B/state\\tdown", "4\tfan/x\\ty\t\\u{1b}[2Jback\\\\slash"],
        "{stdout}"
    );
}

/// The monitor's log is one event a line, and `following ID` repeats the
/// leader key's value, which etcd holds as any bytes: a holder written
/// `x\nleading as me` must not print a `leading as` line of its own (nor a
/// terminal escape reach the terminal). Before, it printed two lines, the
/// second forged.
#[test]
fn the_monitor_prints_a_holder_with_a_newline_on_one_line() {
    use std::io::Read;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let Some(req) = gateway::read_request(&mut s) else { return };
                let body = match req.path.as_str() {
                    "/v3/lease/grant" => r#"{"header":{"revision":"5"},"ID":"7","TTL":"5"}"#.to_string(),
                    // The leader key is another's (lease 99), its value forged.
                    "/v3/kv/txn" => format!(
                        r#"{{"header":{{"revision":"5"}},"responses":[{{"response_range":{{"kvs":[{}]}}}}]}}"#,
                        kv("p/_monitor/leader", "x\nleading as me", 4).replace('}', r#","lease":"99"}"#)
                    ),
                    "/v3/watch" | "/v3/lease/keepalive" => {
                        silent(&mut s);
                        return;
                    }
                    _ => r#"{"header":{"revision":"5"}}"#.to_string(),
                };
                gateway::respond(&mut s, "200 OK", &body);
            });
        }
    });
    let mut child = monitor(&format!("etcd://{ep}/p"), Stdio::piped());
    let mut stdout = child.stdout.take().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.kill().unwrap();
    let mut log = String::new();
    stdout.read_to_string(&mut log).unwrap();
    let _ = child.wait();
    assert!(log.lines().any(|l| l == "following x\\nleading as me"), "{log}");
    assert!(!log.lines().any(|l| l.starts_with("leading as")), "a forged line: {log}");
}
