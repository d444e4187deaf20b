//! Config text parser: `racaffinity::Config::parse` on arbitrary text.
//!
//! Properties (README, "Configuration"):
//! - never a panic, whatever the text;
//! - a refusal is always a typed `Config` error (the bindings map kinds, so
//!   any other kind would surface as the wrong exception class);
//! - `to_text` round trip: a parsed config renders to text that parses back to
//!   the *same* value (`to_text`'s doc promises `parse(&c.to_text()) == c`),
//!   and rendering that value again gives the same text (a fixed point, so
//!   the rendering is canonical);
//! - text the parser accepts builds a cluster (`Cluster::new`): `parse`
//!   validates, so a config that parses but cannot be built would be a
//!   refusal at the wrong place, and `Cluster::from_config_text` agrees with
//!   `parse` + `new` on success and on the error kind. A config with a
//!   `topology.feed` is built without it: a subscribed cluster would
//!   connect to (and resolve) whatever host the input names, which makes
//!   runs slow and the target depend on the network; the feed URL's parser
//!   is still fuzzed, and tested against real etcd elsewhere.
#![no_main]

use libfuzzer_sys::fuzz_target;
use racaffinity::{Cluster, Config, ErrorKind};

fuzz_target!(|data: &[u8]| {
    // The parser takes `&str`; the C ABI turns invalid UTF-8 into its own
    // code before the parser runs, so only valid UTF-8 reaches it.
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Config::parse(text) {
        Ok(config) => {
            let rendered = config.to_text();
            let again = Config::parse(&rendered).unwrap_or_else(|e| {
                panic!("to_text output does not parse: {e}\n--- input\n{text}\n--- rendered\n{rendered}")
            });
            assert_eq!(again, config, "parse(to_text(c)) != c\n--- input\n{text}\n--- rendered\n{rendered}");
            assert_eq!(again.to_text(), rendered, "to_text is not a fixed point");
            // Building must accept what parsing accepted.
            let mut config = config;
            if config.feed.url.take().is_some() {
                let cluster = Cluster::new(config.clone())
                    .unwrap_or_else(|e| panic!("parsed config refused by Cluster::new: {e}\n--- input\n{text}"));
                assert_eq!(cluster.node_ids().len(), config.nodes.len(), "one live node per configured node");
                return;
            }
            let cluster = Cluster::new(config.clone())
                .unwrap_or_else(|e| panic!("parsed config refused by Cluster::new: {e}\n--- input\n{text}"));
            assert_eq!(cluster.config(), &config, "the cluster keeps the config it was built from");
            assert_eq!(cluster.node_ids().len(), config.nodes.len(), "one live node per configured node");
            let direct = Cluster::from_config_text(text)
                .unwrap_or_else(|e| panic!("from_config_text refused what parse accepted: {e}"));
            assert_eq!(direct.config(), &config);
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Config, "a refused config must be a Config error, got {e:?}");
            let direct = Cluster::from_config_text(text).expect_err("from_config_text accepted what parse refused");
            assert_eq!(direct.kind(), ErrorKind::Config);
        }
    }
});
