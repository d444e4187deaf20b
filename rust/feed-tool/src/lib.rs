//! `racaffinity-feed`: publishes the records of a topology feed (issue
//! [fleet-feed]; docs/operations.md, "Topology feed: the operator tool and
//! the monitor") to the etcd prefix racaffinity clusters subscribe to with
//! `topology.feed = etcd://…/<prefix>`.
//!
//! Operator commands write one record each, checked first by the
//! subscribers' own parser ([`records`]); `monitor` probes the nodes and
//! publishes `down`/`up`, one elected monitor writing at a time
//! ([`monitor`]).

pub mod cli;
pub mod monitor;
mod probe;
pub mod records;
mod signals;

use std::io::{Read, Write};
use std::time::Duration;

use racaffinity::config::MAX_PARTITIONS;
use racaffinity::feed::etcd::{EtcdClient, EtcdError};
use racaffinity::FeedUrl;

use cli::{Args, Failure, Spec};
use records::Record;

/// The help text (`racaffinity-feed help`).
pub const HELP: &str = "\
usage: racaffinity-feed COMMAND [ARGS] --feed etcd://host:port[,host:port…]/<prefix>

Publishes topology-feed records under <prefix>/ for the racaffinity clusters
whose config has `topology.feed` = the same URL. Each write prints the etcd
revision it was written at. RACAFF_FEED stands for --feed when that is absent.

operator commands (one record each, checked as subscribers parse it first):
  drain NODE [--timeout 30s] [--dated]
                               node/NODE/state = draining [timeout=30s] [since=<now>]:
                               --dated starts the timeout at this machine's clock
                               for every subscriber, however late it reads the
                               record (subscribers of 0.2.0 and earlier refuse it)
  down NODE                    node/NODE/state = down
  up NODE                      node/NODE/state = up
  weight NODE W                node/NODE/weight = W (1..=1000000)
  reset-weight NODE            delete node/NODE/weight (back to the configured weight)
  partition-map MAP [--partitions N]
                               partition_map = MAP, entries p=NODE separated by
                               commas or newlines; MAP `-` reads stdin,
                               `--file PATH` reads a file; '' is the empty map;
                               --partitions checks p < N (the clusters' data.partitions)
  add NODE [--weight W] [--address host:port]
                               node/NODE = present [weight=W] [address=host:port]
  remove NODE                  node/NODE = removed (subscribers remove the node)
  fan LINE [--id ID]           fan/<ID> = LINE, a FAN or RLB line; the default ID
                               is the core relay's: <type>-<INSTANCE|HOST|SERVICE>
  show                         every record under the prefix, with its revision

monitor (probes nodes, publishes node/NODE/state down and up):
  monitor --node NAME=host:port [--node …] [--nodes NAME=host:port,…]
          [--kind tcp|postgres] [--interval 1s] [--probe-timeout 1s] [--misses 2]
          [--lease-ttl 5s] [--id ID] [--pg-user postgres] [--pg-dbname postgres]
    After --misses failed probes in a row a node is published down; after one
    good probe a node this monitor found down is published up. Monitors of one
    prefix elect one writer with an etcd lease (key <prefix>/_monitor/leader);
    every write is guarded by that lease. SIGTERM/SIGINT revoke it and exit 0;
    so does a failed write to stdout (status 0 for a closed pipe, else 3).

options of every command:
  --feed URL            the feed (or RACAFF_FEED)
  --etcd-timeout 5s     bound of each etcd call
Options go before or after the command, as `--name value` or `--name=value`;
-h or --help anywhere prints this help; `--` ends the options.

exit status: 0 done (a record written whose line cannot be printed goes to stderr;
               `show`, `help` or `monitor` whose reader went away, as in `show | head`);
             1 etcd unreachable or refusing (nothing written), or a write etcd took
               and never answered (outcome unknown; the message says which);
             2 bad command line or a value subscribers would refuse (nothing written);
             3 `show`, `help` or `monitor` could not write its output (other than a
               closed pipe)
";

const NODE_ONLY: Spec = Spec { valued: &[], flags: &[] };

/// Every command (but `help`) and its options.
const COMMANDS: &[&str] =
    &["drain", "weight", "down", "up", "reset-weight", "remove", "show", "partition-map", "add", "fan", "monitor"];

fn spec_of(command: &str) -> Option<Spec> {
    Some(match command {
        "drain" => Spec { valued: &["--timeout"], flags: &["--dated"] },
        "weight" | "down" | "up" | "reset-weight" | "remove" | "show" => NODE_ONLY,
        "partition-map" => Spec { valued: &["--file", "--partitions"], flags: &[] },
        "add" => Spec { valued: &["--weight", "--address"], flags: &[] },
        "fan" => Spec { valued: &["--id"], flags: &[] },
        "monitor" => monitor::SPEC,
        _ => return None,
    })
}

/// Whether `option` takes a value in the commands that have it (`None`:
/// no command has it), for the words before the command.
fn option_kind(option: &str) -> Option<bool> {
    let specs = COMMANDS.iter().filter_map(|c| spec_of(c));
    let mut kind = None;
    for spec in specs {
        if spec.valued.contains(&option) {
            return Some(true);
        }
        if spec.flags.contains(&option) {
            kind = Some(false);
        }
    }
    kind
}

/// Runs the tool with `args` (without the program name) and `env_feed` (the
/// value of RACAFF_FEED); returns the exit status.
pub fn run(args: &[String], env_feed: Option<String>, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match run_inner(args, env_feed, out, err) {
        Ok(()) => 0,
        Err(f) => {
            let _ = writeln!(err, "racaffinity-feed: {f}");
            f.exit_code()
        }
    }
}

fn run_inner(
    args: &[String],
    env_feed: Option<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), Failure> {
    let Some((command, rest)) = cli::split_command(args, &option_kind)? else {
        return Err(Failure::Usage("no command given".into()));
    };
    if command == "help" {
        return printed(out.write_all(HELP.as_bytes()).and_then(|()| out.flush()));
    }
    let Some(spec) = spec_of(&command) else {
        return Err(Failure::Usage(format!("unknown command `{}`", command.escape_debug())));
    };
    let args = cli::parse(&command, &rest, &spec)?;
    if args.help {
        return printed(out.write_all(HELP.as_bytes()).and_then(|()| out.flush()));
    }
    let feed = feed_url(&args, env_feed)?;
    let timeout = match args.value("--etcd-timeout") {
        Some(t) => cli::duration("--etcd-timeout", t)?,
        None => Duration::from_secs(5),
    };
    if command == "monitor" {
        let opts = monitor::Options::parse(&args)?;
        return monitor::run(&feed, timeout, opts, out, err);
    }
    // Every check is done before etcd is called: nothing is written unless
    // the whole command is good.
    let record = match command.as_str() {
        "drain" => {
            let since = args.flag("--dated").then(unix_now_s);
            records::drain(&args.exactly("drain", &["NODE"])?[0], args.value("--timeout"), since)?
        }
        "down" => records::state(&args.exactly("down", &["NODE"])?[0], "down")?,
        "up" => records::state(&args.exactly("up", &["NODE"])?[0], "up")?,
        "weight" => {
            let p = args.exactly("weight", &["NODE", "W"])?;
            records::weight(&p[0], &p[1])?
        }
        "reset-weight" => records::reset_weight(&args.exactly("reset-weight", &["NODE"])?[0])?,
        "partition-map" => {
            let text = map_text(&args)?;
            let partitions = match args.value("--partitions") {
                // Checked here: out of range, the scratch cluster's config
                // error would name `data.partitions`, no flag of this tool.
                Some(p) => {
                    Some(cli::digits::<u32>(p).filter(|n| (1..=MAX_PARTITIONS).contains(n)).ok_or_else(|| {
                        Failure::Invalid(format!(
                            "--partitions must be a number of partitions, 1..={MAX_PARTITIONS}, got `{}`",
                            p.escape_debug()
                        ))
                    })?)
                }
                None => None,
            };
            records::partition_map(&text, partitions)?
        }
        "add" => records::add(&args.exactly("add", &["NODE"])?[0], args.value("--weight"), args.value("--address"))?,
        "remove" => records::remove(&args.exactly("remove", &["NODE"])?[0])?,
        "fan" => records::fan(&args.exactly("fan", &["LINE"])?[0], args.value("--id"))?,
        "show" => {
            args.exactly("show", &[])?;
            return show(&feed, timeout, out);
        }
        _ => unreachable!("every command of the spec table is handled"),
    };
    let client = EtcdClient::new(feed.endpoints.clone(), timeout);
    let line = write_record(&client, &feed.prefix, &record)?;
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        // Written: status 1 would say nothing was, and a script would retry
        // or raise an etcd alert. The line is not lost.
        let _ = writeln!(err, "racaffinity-feed: {line} (not printed: {e})");
    }
    Ok(())
}

fn feed_url(args: &Args, env_feed: Option<String>) -> Result<FeedUrl, Failure> {
    let text = match args.value("--feed") {
        Some(t) => t.to_string(),
        None => env_feed.filter(|t| !t.is_empty()).ok_or_else(|| {
            Failure::Usage("no feed: give --feed etcd://host:port/<prefix> or set RACAFF_FEED".into())
        })?,
    };
    FeedUrl::parse(&text).map_err(|e| Failure::Invalid(format!("--feed: {e}")))
}

fn map_text(args: &Args) -> Result<String, Failure> {
    match (args.value("--file"), args.positionals.as_slice()) {
        (Some(path), []) => {
            std::fs::read_to_string(path).map_err(|e| Failure::Invalid(format!("--file {}: {e}", path.escape_debug())))
        }
        (None, [dash]) if dash == "-" => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map_err(|e| Failure::Invalid(format!("stdin: {e}")))?;
            Ok(s)
        }
        (None, [text]) => Ok(text.clone()),
        _ => Err(Failure::Usage("`partition-map` takes one MAP, `-` (stdin) or --file PATH".into())),
    }
}

/// Writes one record; the line to print (with the revision).
pub fn write_record(client: &EtcdClient, prefix: &str, record: &Record) -> Result<String, Failure> {
    let key = format!("{prefix}{}", record.key);
    let etcd = |e: EtcdError| {
        // Only a call etcd never took, or refused, surely wrote nothing: a
        // member that took it may have committed it and lost the answer.
        let outcome = match e {
            EtcdError::Unreachable(_) | EtcdError::Server { .. } => "nothing written".to_string(),
            EtcdError::Unanswered(_) | EtcdError::Protocol(_) => {
                format!("outcome unknown: `racaffinity-feed show` tells whether {} was written", record.key)
            }
        };
        Failure::Etcd(format!("{e} (feed etcd://{}/{prefix}); {outcome}", client.endpoints().join(",")))
    };
    match &record.value {
        Some(v) => {
            let rev = client.put(&key, v, 0).map_err(etcd)?;
            Ok(format!("wrote {} = {v} at revision {rev}", record.key))
        }
        None => {
            let (rev, deleted) = client.delete(&key).map_err(etcd)?;
            Ok(if deleted {
                format!("deleted {} at revision {rev}", record.key)
            } else {
                format!("no record {} to delete (store at revision {rev})", record.key)
            })
        }
    }
}

fn show(feed: &FeedUrl, timeout: Duration, out: &mut dyn Write) -> Result<(), Failure> {
    let client = EtcdClient::new(feed.endpoints.clone(), timeout);
    let (rev, kvs) = client.range_prefix(&feed.prefix).map_err(|e| Failure::Etcd(format!("{e} (feed {feed})")))?;
    let mut text =
        format!("# {} records under {}, store at revision {rev}\n# revision\tkey\tvalue\n", kvs.len(), feed.prefix);
    for kv in kvs {
        let key = kv.key.strip_prefix(&feed.prefix).unwrap_or(&kv.key);
        let lease = if kv.lease != 0 { format!("\t(lease {:x})", kv.lease) } else { String::new() };
        let value = kv.value.unwrap_or_default();
        text.push_str(&format!("{}\t{}\t{}{lease}\n", kv.mod_revision, one_line(key), one_line(&value)));
    }
    printed(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}

/// A key or value as `show` prints it: control characters escaped (`\n`,
/// `\t`, `\u{1b}`) and a backslash doubled, so a record is one line of
/// three fields whatever bytes etcd holds (a subscriber refuses such a
/// record, but it is shown), and no terminal escape reaches the terminal.
/// Printable text is printed as it is. The monitor's log lines too: they
/// repeat the leader key's value and etcd's errors.
pub(crate) fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() || c == '\\') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// How a read command's output went (`show`, `help`). A reader that went
/// away (`show | head`: a closed pipe) wanted no more: done, status 0,
/// nothing said. Any other failure to write is [`Failure::Output`].
fn printed(r: std::io::Result<()>) -> Result<(), Failure> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::Output(format!("cannot write the output: {e}"))),
        Ok(()) => Ok(()),
    }
}

/// This machine's wall clock, seconds since 1970 UTC (0 before 1970: a
/// drain dated then has ended, and ends at once, bounded as any).
fn unix_now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
