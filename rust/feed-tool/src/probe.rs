//! One probe of one node, bounded by a deadline whatever the node does (a
//! stopped process, a black-holed address): the probe runs on its own
//! thread and the caller stops waiting at the deadline.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Duration;

/// How a node is probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A TCP connect to the address.
    Tcp,
    /// Connect as `user` to `dbname` and run `SELECT 1`.
    Postgres { user: String, dbname: String },
}

/// Probes `addr` (`host:port`) within `timeout`: `Err` says why it failed.
fn probe_once(kind: &Kind, addr: &str, timeout: Duration) -> Result<(), String> {
    match kind {
        Kind::Tcp => {
            let mut last = format!("{addr}: no address");
            for sa in addr.to_socket_addrs().map_err(|e| format!("{addr}: {e}"))? {
                match TcpStream::connect_timeout(&sa, timeout) {
                    Ok(_) => return Ok(()),
                    Err(e) => last = format!("{sa}: {e}"),
                }
            }
            Err(last)
        }
        Kind::Postgres { user, dbname } => {
            let (host, port) = addr.rsplit_once(':').ok_or_else(|| format!("{addr}: no :port"))?;
            let port: u16 = crate::cli::digits(port).ok_or_else(|| format!("{addr}: bad port"))?;
            let ms = timeout.as_millis().max(1);
            let mut config = postgres::Config::new();
            config
                .host(host.trim_start_matches('[').trim_end_matches(']'))
                .port(port)
                .user(user)
                .dbname(dbname)
                .connect_timeout(timeout)
                .application_name("racaffinity-feed monitor")
                // The server ends a statement that hangs; the caller's
                // deadline covers a server that does not answer at all.
                .options(&format!("-c statement_timeout={ms}"));
            if let Ok(pw) = std::env::var("PGPASSWORD") {
                config.password(pw);
            }
            let mut client = config.connect(postgres::NoTls).map_err(|e| format!("{addr}: {e}"))?;
            client.simple_query("SELECT 1").map_err(|e| format!("{addr}: SELECT 1: {e}"))?;
            let _ = client.close();
            Ok(())
        }
    }
}

/// Probes one node again and again; at most one probe in flight.
pub struct Prober {
    kind: Kind,
    addr: String,
    timeout: Duration,
    pending: Option<Receiver<Result<(), String>>>,
}

impl Prober {
    pub fn new(kind: Kind, addr: String, timeout: Duration) -> Self {
        Prober { kind, addr, timeout, pending: None }
    }

    /// One probe: its result, or a failure when it does not end within the
    /// timeout. A probe still running from last time counts as a failure
    /// and no second one is started, so a hung node costs one thread.
    pub fn probe(&mut self) -> Result<(), String> {
        if let Some(rx) = &self.pending {
            match rx.try_recv() {
                Err(TryRecvError::Empty) => return Err(format!("{}: the previous probe has not ended", self.addr)),
                _ => self.pending = None,
            }
        }
        let (tx, rx) = mpsc::channel();
        let (kind, addr, timeout) = (self.kind.clone(), self.addr.clone(), self.timeout);
        std::thread::spawn(move || {
            let _ = tx.send(probe_once(&kind, &addr, timeout));
        });
        match rx.recv_timeout(self.timeout) {
            Ok(r) => r,
            Err(_) => {
                self.pending = Some(rx);
                Err(format!("{}: no answer within {} ms", self.addr, self.timeout.as_millis()))
            }
        }
    }
}
