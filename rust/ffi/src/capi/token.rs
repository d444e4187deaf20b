//! Seed 001 (WebLogic): session routing data carried in the session id.

use std::os::raw::c_char;

use racaffinity_core::TokenRoute;

use super::buffer::{bytes_arg, out_arg, str_arg, write_str, Out};
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result, Failure};
use super::types::racaffinity_route;

/// Stands for "no node" where a node id is optional (an empty backup slot).
pub const RACAFFINITY_NO_NODE: u32 = 4_294_967_295;

/// A session token is at most its session id plus this many bytes (and the NUL).
pub const RACAFFINITY_TOKEN_EXTRA_BYTES: usize = 23;

/// The routing data a new session with key `key` gets: the first node of the
/// key's rendezvous ranking that takes new work, and a backup on another
/// machine (`node.<N>.machine`, default the address's host), else any other
/// usable node, else `RACAFFINITY_NO_NODE`.
///
/// # Safety
/// `key` must be valid for `len` bytes; `out_primary`/`out_backup` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_session_routing(
    cluster: *const racaffinity_cluster,
    key: *const u8,
    len: usize,
    out_primary: *mut u32,
    out_backup: *mut u32,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (k, primary, backup) = unsafe {
            (bytes_arg(key, len, "key")?, out_arg(out_primary, "out_primary")?, out_arg(out_backup, "out_backup")?)
        };
        handle::with(cluster, |c| {
            let r = c.session_routing(k)?;
            primary.set(r.primary.0)?;
            backup.set(r.backup.map_or(RACAFFINITY_NO_NODE, |b| b.0))
        })
    })
}

/// Writes a new token for session `session_id` (NUL-terminated, cookie-safe
/// characters) into `buf`: `<session-id>!ra1.<primary>.<backup>`. A buffer
/// of `strlen(session_id) + RACAFFINITY_TOKEN_EXTRA_BYTES + 1` always fits.
///
/// # Safety
/// `session_id` NULL or NUL-terminated; `buf` NULL or valid for `cap` bytes;
/// `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_session_token_new(
    cluster: *const racaffinity_cluster,
    session_id: *const c_char,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let sid = unsafe { str_arg(session_id, "session_id")? };
        let token = handle::with(cluster, |c| Ok(c.session_token(sid)?))?;
        // SAFETY: per this function's contract.
        unsafe { write_str(&token, buf, cap, out_len) }
    })
}

/// Routes a request carrying `token` (seed 001's rules: primary; else the
/// backup is promoted and a new backup chosen; with both gone a fresh pair;
/// strict session mode refuses). Writes the node to `*out` and the token the
/// client must keep into `buf` (the same text unless the routing data
/// changed; `*out_changed` says which). A malformed or foreign token is
/// INVALID_ARGUMENT; a node the token names that this cluster does not know
/// counts as down. A buffer of `strlen(token) + 5` always fits: an empty
/// backup slot (`none`) can become a node's 8 hex digits. BUFFER_TOO_SMALL
/// comes after the route: `*out` holds the node and the route is counted,
/// so size the buffer by that bound rather than retrying with a larger one.
/// `buf` may be the token's own storage (a cookie routed in place).
///
/// # Safety
/// `token` NULL or NUL-terminated; `out` and `out_changed` NULL or writable;
/// `buf` NULL or valid for `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_session_token_route(
    cluster: *const racaffinity_cluster,
    token: *const c_char,
    out: *mut racaffinity_route,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
    out_changed: *mut bool,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { str_arg(token, "token")? };
        // SAFETY: per this function's contract.
        let outputs = unsafe { RouteOutputs::check(out, out_changed, buf, cap, out_len)? };
        let r = handle::with(cluster, |c| Ok(c.route_token(t)?))?;
        outputs.write(r, t)
    })
}

/// Takes a token apart without routing: writes the session id into `buf`
/// and the nodes it names to `*out_primary` / `*out_backup`
/// (`RACAFFINITY_NO_NODE` for an empty backup slot or a node this cluster
/// does not know). A malformed or foreign token is INVALID_ARGUMENT.
///
/// # Safety
/// `token` NULL or NUL-terminated; `out_primary`/`out_backup` NULL or
/// writable; `buf` NULL or valid for `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_session_token_decode(
    cluster: *const racaffinity_cluster,
    token: *const c_char,
    out_primary: *mut u32,
    out_backup: *mut u32,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (t, primary, backup) = unsafe {
            (str_arg(token, "token")?, out_arg(out_primary, "out_primary")?, out_arg(out_backup, "out_backup")?)
        };
        let parts = handle::with(cluster, |c| Ok(c.decode_token(t)?))?;
        primary.set(parts.primary.map_or(RACAFFINITY_NO_NODE, |n| n.0))?;
        backup.set(parts.backup.map_or(RACAFFINITY_NO_NODE, |n| n.0))?;
        // SAFETY: per this function's contract.
        unsafe { write_str(&parts.session_id, buf, cap, out_len) }
    })
}

/// Routes a request that carries several tokens (`tokens[0..count]`, in the
/// order the client sent them: a browser sends one cookie per path it holds,
/// the longest path first, so a stale token may come before the current
/// one). The core chooses (docs/wls-routing.md): the first token that names
/// a node of this cluster as primary or backup, else the first well-formed
/// one; then routes it as `racaffinity_session_token_route` does. Writes
/// the chosen token's index to `*out_index`, its node to `*out`, and the
/// token the client must keep into `buf` (`*out_changed`: whether it differs
/// from `tokens[*out_index]`). A candidate that is not valid UTF-8, or is
/// longer than `RACAFFINITY_MAX_STRING_BYTES` (1 MiB; no token is), counts
/// as malformed; a NULL one is NULL_ARGUMENT. When no candidate is
/// well-formed (or `count` is 0) the result
/// is INVALID_ARGUMENT and `*out_index` is `count`: start a new session
/// (`racaffinity_session_token_new`). A refusal (STRICT_AFFINITY,
/// NO_NODE_AVAILABLE) still writes `*out_index`: the client keeps that
/// token. A buffer of the longest candidate's `strlen + 5` always fits;
/// BUFFER_TOO_SMALL comes after the route, as for
/// `racaffinity_session_token_route`; `buf` may be a candidate's storage.
///
/// # Safety
/// `tokens` NULL (only when `count` is 0) or valid for `count` pointers,
/// each NULL or NUL-terminated; `out_index`, `out` and `out_changed` NULL or
/// writable; `buf` NULL or valid for `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_session_tokens_route(
    cluster: *const racaffinity_cluster,
    tokens: *const *const c_char,
    count: usize,
    out_index: *mut usize,
    out: *mut racaffinity_route,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
    out_changed: *mut bool,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let index = unsafe { out_arg(out_index, "out_index")? };
        // SAFETY: per this function's contract.
        let outputs = unsafe { RouteOutputs::check(out, out_changed, buf, cap, out_len)? };
        // Checked before routing: an argument error must not leave a counted
        // route behind.
        if count > 0 && tokens.is_null() {
            return Err(Failure::null("tokens"));
        }
        let mut candidates = Vec::with_capacity(count.min(64));
        for i in 0..count {
            // SAFETY: `tokens` holds `count` pointers per the contract.
            let p = unsafe { *tokens.add(i) };
            // SAFETY: each is NULL or NUL-terminated per the contract.
            match unsafe { str_arg(p, "tokens[i]") } {
                Ok(t) => candidates.push(t),
                Err(f) if f.code == racaffinity_result::NullArgument => {
                    return Err(Failure::null(&format!("tokens[{i}]")));
                }
                // Not text: a token of no cluster, as a malformed one is.
                Err(_) => candidates.push(""),
            }
        }
        let chosen = handle::with(cluster, |c| Ok(c.route_tokens(&candidates)))?;
        let Some(chosen) = chosen else {
            index.set(count)?;
            return Err(Failure::new(
                racaffinity_result::InvalidArgument,
                format!("none of the {count} tokens is a well-formed session token: start a new session"),
            ));
        };
        index.set(chosen.index)?;
        outputs.write(chosen.route?, candidates[chosen.index])
    })
}

/// The outputs of a routed session token (`racaffinity_session_token_route`,
/// `racaffinity_session_tokens_route`), checked before routing: an argument
/// error must not leave a counted route behind.
struct RouteOutputs {
    out: Out<racaffinity_route>,
    changed: Out<bool>,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
}

impl RouteOutputs {
    /// # Safety
    /// `out` and `out_changed` NULL or writable; `buf` NULL or valid for `cap`
    /// bytes; `out_len` NULL or writable; all until the call returns.
    unsafe fn check(
        out: *mut racaffinity_route,
        out_changed: *mut bool,
        buf: *mut c_char,
        cap: usize,
        out_len: *mut usize,
    ) -> Result<Self, Failure> {
        // SAFETY: per this function's contract.
        let (out, changed) = unsafe { (out_arg(out, "out")?, out_arg(out_changed, "out_changed")?) };
        // A NULL buffer would otherwise surface in write_str, after the route.
        if buf.is_null() {
            return Err(Failure::null("buf"));
        }
        Ok(RouteOutputs { out, changed, buf, cap, out_len })
    }

    /// Writes the node, whether the token changed and the token to keep;
    /// `sent` is the token as the caller sent it.
    fn write(self, r: TokenRoute, sent: &str) -> Result<(), Failure> {
        // Written first: a too-small buffer still tells the caller the node.
        self.out.set(r.route.into())?;
        self.changed.set(r.token.is_some())?;
        // An unchanged token is the caller's text, and `buf` may be where it
        // lives (routed in place): copied out first, as write_str's copy must
        // not overlap its source.
        let text = r.token.unwrap_or_else(|| sent.to_owned());
        // SAFETY: `check` holds `buf`, `cap` and `out_len` to the contract
        // of the call that made it, which has not returned.
        unsafe { write_str(&text, self.buf, self.cap, self.out_len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::cluster::{racaffinity_cluster_free, racaffinity_cluster_new};
    use crate::capi::types::racaffinity_route_kind;

    /// Routing a cookie in place: the buffer for the token to keep is the
    /// storage of the token sent (sized by the header's bound, as a C caller
    /// routing a fixed `char[]` does). An unchanged token must not be copied
    /// onto itself with `copy_nonoverlapping` (undefined behaviour).
    #[test]
    fn a_token_routed_in_place_is_written_into_its_own_storage() {
        let _turn = crate::capi::handle::tests::serial();
        let mut c: *mut racaffinity_cluster = std::ptr::null_mut();
        // SAFETY: the config is a NUL-terminated literal and `c` is writable.
        assert_eq!(unsafe { racaffinity_cluster_new(c"nodes = S1, S2".as_ptr(), &mut c) }, racaffinity_result::Ok);
        let mut tok = [0 as c_char; 64];
        let mut len = 0usize;
        // SAFETY: literals are NUL-terminated; `tok` holds 64 bytes; `len` is writable.
        let rc = unsafe { racaffinity_session_token_new(c, c"sess".as_ptr(), tok.as_mut_ptr(), tok.len(), &mut len) };
        assert_eq!(rc, racaffinity_result::Ok);
        let sent = tok;
        let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
        let mut changed = true;
        let p = tok.as_mut_ptr();
        // SAFETY: `p` is the NUL-terminated token and 64 writable bytes; the outputs are writable.
        let rc = unsafe { racaffinity_session_token_route(c, p, &mut route, p, 64, &mut len, &mut changed) };
        assert_eq!((rc, changed), (racaffinity_result::Ok, false));
        assert_eq!(tok, sent, "one token, in place");
        let held = [c"garbage".as_ptr(), p.cast_const()];
        let mut index = usize::MAX;
        changed = true;
        // SAFETY: as above; `held` holds 2 NUL-terminated strings.
        let rc = unsafe {
            racaffinity_session_tokens_route(c, held.as_ptr(), 2, &mut index, &mut route, p, 64, &mut len, &mut changed)
        };
        assert_eq!((rc, index, changed), (racaffinity_result::Ok, 1, false));
        assert_eq!(tok, sent, "one of several, in place");
        assert_eq!(racaffinity_cluster_free(c), racaffinity_result::Ok);
    }
}
