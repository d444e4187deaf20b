//! Command-line parsing with std only: the tool has a dozen commands with a
//! few options each, which a table and thirty lines handle; an argument
//! crate would add more code to the build than it saves here.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use racaffinity::config::parse_duration_ms;

/// Why the tool stopped; each kind has its exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Bad command line (unknown command or option, missing argument): 2.
    Usage(String),
    /// A value subscribers would refuse, or a malformed feed URL: 2.
    Invalid(String),
    /// etcd unreachable or refusing the call: 1.
    Etcd(String),
    /// A read command's output could not be written (not a closed pipe,
    /// which ends the command quietly with 0): 3.
    Output(String),
}

impl Failure {
    /// The process exit status for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Usage(_) | Failure::Invalid(_) => 2,
            Failure::Etcd(_) => 1,
            Failure::Output(_) => 3,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) => write!(f, "{m} (see `racaffinity-feed help`)"),
            Failure::Invalid(m) | Failure::Etcd(m) | Failure::Output(m) => f.write_str(m),
        }
    }
}

/// A number in decimal digits only, as the clusters' config and the feed's
/// records read numbers: `str::parse` also takes a leading `+`.
pub fn digits<T: std::str::FromStr>(text: &str) -> Option<T> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The options a command accepts: those taking a value, and bare flags.
pub struct Spec {
    pub valued: &'static [&'static str],
    pub flags: &'static [&'static str],
}

/// Options every command takes.
pub const GLOBAL_VALUED: &[&str] = &["--feed", "--etcd-timeout"];

/// A parsed command line (the command itself removed).
#[derive(Debug, Default)]
pub struct Args {
    pub positionals: Vec<String>,
    /// `-h` or `--help` among the options: print the help, run nothing.
    pub help: bool,
    values: HashMap<String, Vec<String>>,
    flags: Vec<String>,
}

impl Args {
    /// The last value given for `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).and_then(|v| v.last()).map(String::as_str)
    }

    /// Every value given for `name`, in order.
    pub fn values(&self, name: &str) -> &[String] {
        self.values.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    /// The positionals, checked to be exactly `names` (for the message).
    pub fn exactly(&self, command: &str, names: &[&str]) -> Result<&[String], Failure> {
        if self.positionals.len() != names.len() {
            let want = names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" ");
            return Err(Failure::Usage(format!(
                "`{command}` takes {} argument(s): {command} {want}; got {}",
                names.len(),
                self.positionals.len()
            )));
        }
        Ok(&self.positionals)
    }
}

/// What an option is, by its name, across every command: `Some(true)`
/// takes a value, `Some(false)` is a flag, `None` is no option of any.
pub type OptionKind<'a> = &'a dyn Fn(&str) -> Option<bool>;

/// Splits `args` into the command and the rest: the command is the first
/// word that is neither an option nor an option's value, so
/// `--feed URL drain A`, `--timeout 30s drain A` and `drain A --feed URL`
/// all work. Before the command is known, `kind` says which options take a
/// value (an option taking one in any command takes one in all); a word
/// that is no option of any command is a usage error there, rather than
/// its value being taken for the command. The command then checks that
/// its options are its own ([`parse`]).
pub fn split_command(args: &[String], kind: OptionKind<'_>) -> Result<Option<(String, Vec<String>)>, Failure> {
    let mut i = 0;
    // Where the `--` that ended the options stands: a `--` read as an
    // option's value is that value and stays.
    let mut separator = None;
    while i < args.len() {
        let a = &args[i];
        if a == "--help" || a == "-h" {
            return Ok(Some(("help".into(), Vec::new())));
        }
        if a == "--" {
            // Options end: the next word is the command.
            separator = Some(i);
            i += 1;
            break;
        }
        if let Some(option) = a.strip_prefix("--").map(|_| a.split_once('=').map_or(a.as_str(), |(n, _)| n)) {
            let inline = a.contains('=');
            let valued = if GLOBAL_VALUED.contains(&option) { Some(true) } else { kind(option) };
            i += match valued {
                Some(true) if !inline => 2,
                Some(_) => 1,
                None => {
                    return Err(Failure::Usage(format!(
                        "no option {} (before the command: it is no option of any command)",
                        option.escape_debug()
                    )))
                }
            };
            continue;
        }
        break;
    }
    if i >= args.len() {
        return Ok(None);
    }
    let mut rest = args.to_vec();
    let cmd = rest.remove(i);
    if let Some(at) = separator {
        rest.remove(at);
    }
    Ok(Some((cmd, rest)))
}

/// Parses options (`--name value`, `--name=value`, flags) and positionals;
/// `--` ends the options, and a lone `-` is a positional (stdin). `-h` or
/// `--help` before `--` asks for the help ([`Args::help`]), as before the
/// command: `down -h` must not take `-h` for a node and write its record.
pub fn parse(command: &str, args: &[String], spec: &Spec) -> Result<Args, Failure> {
    let mut out = Args::default();
    let mut it = args.iter();
    let mut options_done = false;
    while let Some(a) = it.next() {
        if !options_done && (a == "-h" || a == "--help") {
            out.help = true;
            continue;
        }
        if options_done || !a.starts_with("--") {
            out.positionals.push(a.clone());
            continue;
        }
        if a == "--" {
            options_done = true;
            continue;
        }
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        if GLOBAL_VALUED.contains(&name) || spec.valued.contains(&name) {
            let v = match inline {
                Some(v) => v,
                None => it.next().cloned().ok_or_else(|| Failure::Usage(format!("{name} needs a value")))?,
            };
            out.values.entry(name.to_string()).or_default().push(v);
        } else if spec.flags.contains(&name) && inline.is_none() {
            out.flags.push(name.to_string());
        } else {
            return Err(Failure::Usage(format!("`{command}` has no option {}", name.escape_debug())));
        }
    }
    Ok(out)
}

/// A duration option (`500ms`, `2s`, …), parsed like the core's config.
pub fn duration(option: &str, text: &str) -> Result<Duration, Failure> {
    let ms = parse_duration_ms(option, text).map_err(|e| Failure::Invalid(e.to_string()))?;
    if ms == 0 {
        return Err(Failure::Invalid(format!("{option} must be more than 0, got `{}`", text.escape_debug())));
    }
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_command_is_the_first_word_that_is_not_an_option_value() {
        let kind = |o: &str| match o {
            "--timeout" => Some(true),
            "--x" => Some(false),
            _ => None,
        };
        let split = |a: &[&str]| split_command(&s(a), &kind);
        let (c, rest) = split(&["--feed", "etcd://h:1/p", "drain", "A"]).unwrap().unwrap();
        assert_eq!((c.as_str(), rest), ("drain", s(&["--feed", "etcd://h:1/p", "A"])));
        let (c, rest) = split(&["--timeout", "3s", "--x", "--feed=u", "drain", "A"]).unwrap().unwrap();
        assert_eq!((c.as_str(), rest), ("drain", s(&["--timeout", "3s", "--x", "--feed=u", "A"])));
        let (c, rest) = split(&["--timeout=3s", "--", "show"]).unwrap().unwrap();
        assert_eq!((c.as_str(), rest), ("show", s(&["--timeout=3s"])));
        let (c, rest) = split(&["--timeout", "--", "drain", "A"]).unwrap().unwrap();
        assert_eq!((c.as_str(), rest), ("drain", s(&["--timeout", "--", "A"])));
        assert_eq!(split(&["--help"]).unwrap().unwrap().0, "help");
        assert!(split(&["--feed", "x"]).unwrap().is_none());
        assert!(matches!(split(&["--nope", "3s", "drain"]), Err(Failure::Usage(m)) if m.contains("no option --nope")));
    }

    #[test]
    fn options_inline_separate_flags_and_unknown() {
        let spec = Spec { valued: &["--timeout"], flags: &["--x"] };
        let a = parse("drain", &s(&["A", "--timeout=3s", "--x", "--feed", "u", "--", "--B"]), &spec).unwrap();
        assert_eq!(a.positionals, s(&["A", "--B"]));
        assert_eq!((a.value("--timeout"), a.value("--feed"), a.flag("--x")), (Some("3s"), Some("u"), true));
        assert!(matches!(parse("drain", &s(&["--nope"]), &spec), Err(Failure::Usage(_))));
        assert!(matches!(parse("drain", &s(&["--timeout"]), &spec), Err(Failure::Usage(_))));
        assert!(matches!(parse("drain", &s(&["--x=1"]), &spec), Err(Failure::Usage(_))));
    }

    #[test]
    fn durations_need_a_unit_and_more_than_zero() {
        assert_eq!(duration("--interval", "250ms").unwrap(), Duration::from_millis(250));
        for bad in ["1", "0s", "x", "-1s", "1w"] {
            assert!(matches!(duration("--interval", bad), Err(Failure::Invalid(_))), "{bad}");
        }
    }
}
