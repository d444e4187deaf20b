//! Seed 001 (WebLogic): session routing data carried in the session id, for
//! `io.racaffinity.Cluster` (`sessionRouting`, `sessionToken`, `routeToken`,
//! `routeTokens`).
//! The rules (backup on another machine, promotion, rewriting) are the core's
//! (`racaffinity_core::token`); these exports convert arguments only, like
//! `capi/token.rs` beside them.

use jni::objects::{JByteArray, JLongArray, JObjectArray, JString};
use jni::sys::jlong;

use super::{pack, run, run_bytes, string, with_cluster, Fail};
use crate::capi::result::{racaffinity_result, Failure};
use crate::capi::token::RACAFFINITY_NO_NODE;

jni_export! {
    /// `long sessionRouting(long handle, byte[] key)`: a new session's routing
    /// data, packed: bits 0..32 the primary's id, bits 32..64 the backup's, or
    /// `RACAFFINITY_NO_NODE` (Java reads `(int) (r >>> 32)` as -1) when there is none.
    fn Java_io_racaffinity_Native_sessionRouting<'l>(env, h: jlong, key: JByteArray<'l>) -> jlong {
        run_bytes(&mut env, h, &key, "key", |c, k| {
            let r = c.session_routing(k)?;
            let backup = r.backup.map_or(RACAFFINITY_NO_NODE, |b| b.0);
            Ok(((u64::from(backup) << 32) | u64::from(r.primary.0)) as jlong)
        })
    }

    /// `String sessionTokenNew(long handle, String sessionId)`: a new token,
    /// `<session-id>!ra1.<primary>.<backup>`.
    fn Java_io_racaffinity_Native_sessionTokenNew<'l>(env, h: jlong, session_id: JString<'l>) -> JString<'l> {
        run(&mut env, |env| {
            let sid = string(env, &session_id, "sessionId")?;
            let token = with_cluster(h, |c| Ok(c.session_token(&sid)?))?;
            Ok(JString::from_str(env, token)?)
        })
    }

    /// `String sessionTokenRoute(long handle, String token, long[] route)`:
    /// routes a request carrying `token`; writes the packed route (see
    /// [`super::pack`]) into `route[0]` and returns the rewritten token, or null
    /// when the client's token still holds.
    fn Java_io_racaffinity_Native_sessionTokenRoute<'l>(
        env,
        h: jlong,
        token: JString<'l>,
        route: JLongArray<'l>,
    ) -> JString<'l> {
        run(&mut env, |env| {
            if route.is_null() {
                return Err(Fail::Core(Failure::new(racaffinity_result::NullArgument, "`route` is null")));
            }
            if route.len(env)? < 1 {
                return Err(Fail::Core(Failure::new(racaffinity_result::InvalidArgument, "`route` is empty")));
            }
            let t = string(env, &token, "token")?;
            let r = with_cluster(h, |c| Ok(c.route_token(&t)?))?;
            route.set_region(env, 0, &[pack(r.route)])?;
            Ok(match r.token {
                Some(rewritten) => JString::from_str(env, rewritten)?,
                None => JString::null(),
            })
        })
    }

    /// `String sessionTokensRoute(long handle, String[] tokens, long[] out)`:
    /// the core chooses among a request's tokens
    /// ([`racaffinity_core::Cluster::route_tokens`]) and routes that one;
    /// writes the chosen index into `out[1]` (-1: none is well-formed, and
    /// nothing was routed), the packed route into `out[0]`, and returns the
    /// rewritten token, or null when the chosen one still holds. A refusal
    /// throws after `out[1]` is written.
    fn Java_io_racaffinity_Native_sessionTokensRoute<'l>(
        env,
        h: jlong,
        tokens: JObjectArray<'l, JString<'l>>,
        out: JLongArray<'l>,
    ) -> JString<'l> {
        run(&mut env, |env| {
            if tokens.is_null() || out.is_null() {
                let name = if tokens.is_null() { "tokens" } else { "out" };
                return Err(Fail::Core(Failure::null(name)));
            }
            if out.len(env)? < 2 {
                return Err(Fail::Core(Failure::new(racaffinity_result::InvalidArgument, "`out` holds fewer than 2")));
            }
            let len = tokens.len(env)?;
            let mut candidates = Vec::with_capacity(len.min(64));
            for i in 0..len {
                let t = tokens.get_element(env, i)?;
                let text = match string(env, &t, "tokens[i]") {
                    Ok(text) => text,
                    Err(Fail::Core(f)) if f.code == racaffinity_result::NullArgument => {
                        return Err(Fail::Core(Failure::null(&format!("tokens[{i}]"))));
                    }
                    // Not text (a lone surrogate): a token of no cluster.
                    Err(Fail::Core(_)) => String::new(),
                    Err(e) => return Err(e),
                };
                env.delete_local_ref(t);
                candidates.push(text);
            }
            let Some(chosen) = with_cluster(h, |c| Ok(c.route_tokens(&candidates)))? else {
                out.set_region(env, 1, &[-1])?;
                return Ok(JString::null());
            };
            out.set_region(env, 1, &[chosen.index as jlong])?;
            let r = chosen.route?;
            out.set_region(env, 0, &[pack(r.route)])?;
            Ok(match r.token {
                Some(rewritten) => JString::from_str(env, rewritten)?,
                None => JString::null(),
            })
        })
    }
}
