//! `racaffinity-feed`: see `racaffinity-feed help` and docs/operations.md.

fn main() {
    // args_os: a non-UTF-8 argument is a usage error, not a panic.
    let mut args = Vec::new();
    for a in std::env::args_os().skip(1) {
        match a.into_string() {
            Ok(s) => args.push(s),
            Err(raw) => {
                eprintln!("racaffinity-feed: argument {raw:?} is not UTF-8");
                std::process::exit(2);
            }
        }
    }
    let env_feed = std::env::var("RACAFF_FEED").ok();
    let code = racaffinity_feed_tool::run(&args, env_feed, &mut std::io::stdout(), &mut std::io::stderr());
    std::process::exit(code);
}
