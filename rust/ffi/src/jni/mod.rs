//! The JNI exports of `libracaffinity`, behind the Java classes
//! `io.racaffinity.Native` and `io.racaffinity.oracle.OracleUrls` (jar
//! `racaffinity.jar`, `java/` in the repository).
//!
//! Like the C ABI beside it, this layer holds no routing logic: it converts
//! Java arguments, calls the core and maps errors. A cluster crosses to Java
//! as a `long` that is exactly the C ABI's `racaffinity_cluster *` handle, and
//! every call resolves it through [`crate::capi::handle`], so a closed, stale
//! or foreign handle is detected exactly as in C (`ClusterClosedException`).
//!
//! Errors:
//! - every core error becomes a [`Failure`] through the C ABI's one
//!   kind → code table ([`crate::capi::result`]), and [`exception_class`] is
//!   the one code → Java class table;
//! - every export runs inside `EnvUnowned::with_env` (which catches panics)
//!   and resolves with the [`ThrowAffinity`] error policy, so no panic and no
//!   error escapes as a crash: a panic becomes `NativePanicException`.
//!   Exports with primitive arguments and results ([`run_fast`]: picks, pins,
//!   leases) run their body under `catch_unwind` and enter `with_env` only
//!   to throw, which saves the attach-guard bookkeeping on the success path.
//!
//! Hot calls take and return primitives only: a route is packed into one
//! `long` ([`pack`]), a pin context is the core's `ContextKey` as a `long`.

use std::any::Any;

use jni::errors::ErrorPolicy;
use jni::objects::{JByteArray, JString};
use jni::strings::{JNIStr, JNIString};
use jni::sys::{jint, jlong};
use jni::{jni_str, Env, EnvUnowned};
use racaffinity_core::{Cluster, NodeId, Route};

use crate::capi::buffer::{too_long, RACAFFINITY_MAX_STRING_BYTES};
use crate::capi::handle::{self, racaffinity_cluster};
use crate::capi::result::{bad_enum, panic_message, racaffinity_result, CEnum, Failure};
use crate::capi::types::{node_id, racaffinity_route};
use crate::ops;

/// Declares the exports of `native` methods (all `static`, in `io.racaffinity.Native` and
/// `OracleUrls`): each `fn Java_<class>_<method><'l>(env, args…) -> R { body }` becomes an unmangled
/// `extern "system"` function taking `mut env: EnvUnowned<'l>` and the (unused) `JClass<'l>` before
/// `args`, so the body names only what differs. Each export keeps its full JNI name, and
/// `tools/check_jni_exports.py` (`make lint`) reads this form: it checks every export against its
/// Java method both ways, parameters included, and that this macro still expands as written here.
macro_rules! jni_export {
    ($(
        $(#[$attr:meta])*
        fn $name:ident<$l:lifetime>($env:ident $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)? $body:block
    )*) => {
        $(
            $(#[$attr])*
            #[no_mangle]
            pub extern "system" fn $name<$l>(
                mut $env: ::jni::EnvUnowned<$l>,
                _c: ::jni::objects::JClass<$l>
                $(, $arg: $ty)*
            ) $(-> $ret)? $body
        )*
    };
}

mod cluster;
mod connect;
mod continuity;
mod epoch;
mod routing;
#[cfg(feature = "testing")]
mod testing;
mod token;
mod ucp;
mod xa;

/// Why a JNI call failed: a routing failure (mapped through the one table) or
/// a JNI-level error (usually a Java exception that is already pending).
pub(crate) enum Fail {
    Core(Failure),
    Jni(jni::errors::Error),
}

impl From<jni::errors::Error> for Fail {
    fn from(e: jni::errors::Error) -> Self {
        Fail::Jni(e)
    }
}

impl From<Failure> for Fail {
    fn from(f: Failure) -> Self {
        Fail::Core(f)
    }
}

impl From<racaffinity_core::Error> for Fail {
    fn from(e: racaffinity_core::Error) -> Self {
        Fail::Core(e.into())
    }
}

pub(crate) type JResult<T> = Result<T, Fail>;

/// The one table from result codes to Java exception classes. Every class
/// extends `io.racaffinity.AffinityException` and has a `(String)`
/// constructor. The match is exhaustive: a new result code does not compile
/// until it has a class.
pub(crate) fn exception_class(code: racaffinity_result) -> &'static JNIStr {
    use racaffinity_result::*;
    match code {
        Ok => jni_str!("io/racaffinity/AffinityException"),
        NullArgument | InvalidUtf8 | InvalidArgument | BufferTooSmall => {
            jni_str!("io/racaffinity/InvalidArgumentException")
        }
        InvalidHandle => jni_str!("io/racaffinity/ClusterClosedException"),
        Panic => jni_str!("io/racaffinity/NativePanicException"),
        Config => jni_str!("io/racaffinity/InvalidConfigException"),
        UnknownNode => jni_str!("io/racaffinity/UnknownNodeException"),
        DuplicateNode => jni_str!("io/racaffinity/DuplicateNodeException"),
        NoNodeAvailable => jni_str!("io/racaffinity/NoNodeAvailableException"),
        StrictAffinity => jni_str!("io/racaffinity/StrictAffinityException"),
        PreparedNodeUnavailable => jni_str!("io/racaffinity/PreparedNodeUnavailableException"),
        UnknownTransaction => jni_str!("io/racaffinity/UnknownTransactionException"),
        EventParse => jni_str!("io/racaffinity/EventParseException"),
        ForeignEvent => jni_str!("io/racaffinity/ForeignEventException"),
        TooManyHandles => jni_str!("io/racaffinity/TooManyClustersException"),
        InvalidLease => jni_str!("io/racaffinity/InvalidLeaseException"),
        FeedUnavailable => jni_str!("io/racaffinity/FeedUnavailableException"),
    }
}

/// Throws the Java exception for a failed call unless one is already pending
/// (a Java exception raised by a JNI call wins: it is the real cause).
fn throw(env: &mut Env<'_>, class: &JNIStr, msg: String) {
    if env.exception_check() {
        return;
    }
    let msg = JNIString::from(msg);
    // `throw_new` reports the (now pending) exception as an Err; that is the
    // success case here. If the class cannot be found (a broken jar), fall
    // back to the base class, then to RuntimeException.
    let _ = env.throw_new(class, &msg);
    if !env.exception_check() {
        let _ = env.throw_new(jni_str!("io/racaffinity/AffinityException"), &msg);
    }
    if !env.exception_check() {
        let _ = env.throw_new(jni_str!("java/lang/RuntimeException"), &msg);
    }
}

/// The error policy of every export: a [`Fail`] becomes the exception of
/// its class (via [`exception_class`]), a panic becomes `NativePanicException`,
/// and the call returns the type's default value, which Java never sees.
pub(crate) struct ThrowAffinity;

impl<T: Default> ErrorPolicy<T, Fail> for ThrowAffinity {
    type Captures<'unowned_env_local: 'native_method, 'native_method> = ();

    fn on_error<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        err: Fail,
    ) -> jni::errors::Result<T> {
        match err {
            Fail::Core(f) => {
                let code = f.code;
                let msg = match code {
                    racaffinity_result::InvalidHandle => {
                        "racaffinity cluster is closed (its handle is stale or freed)".to_string()
                    }
                    _ => f.into_detail(),
                };
                throw(env, exception_class(code), msg)
            }
            Fail::Jni(jni::errors::Error::NullPtr(what)) => {
                throw(env, jni_str!("java/lang/NullPointerException"), format!("racaffinity: {what} is null"))
            }
            Fail::Jni(e) => throw(env, exception_class(racaffinity_result::Ok), format!("racaffinity: JNI error: {e}")),
        }
        Ok(T::default())
    }

    fn on_panic<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        payload: Box<dyn Any + Send + 'static>,
    ) -> jni::errors::Result<T> {
        let msg = panic_message(&*payload);
        // Dropping a payload may itself panic; leak it rather than unwind.
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(payload))) {
            std::mem::forget(p);
        }
        throw(env, exception_class(racaffinity_result::Panic), msg);
        Ok(T::default())
    }
}

/// Runs an export's body under `with_env` and the [`ThrowAffinity`] policy.
#[inline(always)]
pub(crate) fn run<'local, T: Default>(
    env: &mut EnvUnowned<'local>,
    f: impl FnOnce(&mut Env<'local>) -> JResult<T>,
) -> T {
    env.with_env(f).resolve::<ThrowAffinity>()
}

/// Like [`run`], for hot exports whose arguments and result are primitives
/// (picks, pins, leases, integer keys): the body runs under `catch_unwind`
/// alone, and only a failure or a panic enters `with_env`, where the
/// [`ThrowAffinity`] policy throws exactly as [`run`] would (a caught panic is
/// resumed inside `with_env`, which catches it again and hands it to the
/// policy). `with_env` and `resolve` each set up an attach guard and
/// thread-local bookkeeping, about 40 ns per call here; a successful pick
/// does not need them.
#[inline(always)]
pub(crate) fn run_fast<'local, T: Default>(env: &mut EnvUnowned<'local>, f: impl FnOnce() -> JResult<T>) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(fail)) => env.with_env(|_| Err::<T, Fail>(fail)).resolve::<ThrowAffinity>(),
        Err(payload) => {
            env.with_env(|_| -> JResult<T> { std::panic::resume_unwind(payload) }).resolve::<ThrowAffinity>()
        }
    }
}

/// Runs `f` on the cluster behind a Java handle, through the C ABI's handle
/// table (same stale/freed/foreign detection as C).
#[inline(always)]
pub(crate) fn with_cluster<R>(h: jlong, f: impl FnOnce(&Cluster) -> Result<R, Failure>) -> JResult<R> {
    handle::with(h as usize as *const racaffinity_cluster, f).map_err(Fail::Core)
}

/// [`run_fast`] on the cluster behind a handle: the shape of most hot exports.
#[inline(always)]
pub(crate) fn run_cluster_fast<T: Default>(
    env: &mut EnvUnowned<'_>,
    h: jlong,
    f: impl FnOnce(&Cluster) -> Result<T, Failure>,
) -> T {
    run_fast(env, || with_cluster(h, f))
}

/// [`run_cluster_fast`] for a call on one node: the node id is checked before
/// the handle, so a negative id is reported even on a closed cluster.
#[inline(always)]
pub(crate) fn run_node_fast<T: Default>(
    env: &mut EnvUnowned<'_>,
    h: jlong,
    node: jint,
    f: impl FnOnce(&Cluster, NodeId) -> Result<T, Failure>,
) -> T {
    run_fast(env, || {
        let node = node_id(node_arg(node)?);
        with_cluster(h, |c| f(c, node))
    })
}

/// [`run`] for a call keyed by a Java `byte[]` (gtrid, session or data key).
#[inline(always)]
pub(crate) fn run_bytes<T: Default>(
    env: &mut EnvUnowned<'_>,
    h: jlong,
    arr: &JByteArray<'_>,
    name: &str,
    f: impl FnOnce(&Cluster, &[u8]) -> Result<T, Failure>,
) -> T {
    run(env, |env| with_bytes(env, arr, name, |b| with_cluster(h, |c| f(c, b))))
}

/// [`run`] for a call that takes one Java `String` (a node name, an event line).
pub(crate) fn run_str<T: Default>(
    env: &mut EnvUnowned<'_>,
    h: jlong,
    s: &JString<'_>,
    name: &str,
    f: impl FnOnce(&Cluster, &str) -> Result<T, Failure>,
) -> T {
    run(env, |env| {
        let s = string(env, s, name)?;
        with_cluster(h, |c| f(c, &s))
    })
}

/// [`run`] for a call that returns a Java `String`: `f` produces the text
/// before any JNI allocation.
pub(crate) fn run_to_string<'local>(
    env: &mut EnvUnowned<'local>,
    f: impl FnOnce() -> JResult<String>,
) -> JString<'local> {
    run(env, |env| {
        let text = f()?;
        Ok(JString::from_str(env, text)?)
    })
}

/// A route as one `long`: bits 0..32 node id, bits 32..40 the C ABI's
/// `racaffinity_route_kind` value.
#[inline(always)]
pub(crate) fn pack(r: Route) -> jlong {
    let c: racaffinity_route = r.into();
    ((c.kind as i64) << 32) | i64::from(c.node)
}

fn null_arg(name: &str) -> Fail {
    Fail::Core(Failure::new(racaffinity_result::NullArgument, format!("`{name}` is null")))
}

/// Bytes small enough for the stack: gtrids (64) and typical keys.
const STACK_BYTES: usize = 128;

/// Calls `f` with the contents of a Java `byte[]`, copied to the stack when
/// small. A null array is INVALID_ARGUMENT (NullArgument); the size cap is the
/// C ABI's, so the core sees the same inputs as from C and gives the same
/// errors for empty or oversized keys.
#[inline]
pub(crate) fn with_bytes<R>(
    env: &Env<'_>,
    arr: &JByteArray<'_>,
    name: &str,
    f: impl FnOnce(&[u8]) -> JResult<R>,
) -> JResult<R> {
    if arr.is_null() {
        return Err(null_arg(name));
    }
    let len = arr.len(env)?;
    if len > RACAFFINITY_MAX_STRING_BYTES {
        return Err(too_long(name, len).into());
    }
    if len <= STACK_BYTES {
        let mut buf = [0i8; STACK_BYTES];
        arr.get_region(env, 0, &mut buf[..len])?;
        // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid for both.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), len) };
        f(bytes)
    } else {
        let mut buf = vec![0i8; len];
        arr.get_region(env, 0, &mut buf)?;
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), len) };
        f(bytes)
    }
}

/// Like [`with_bytes`] for an optional argument: a null array is `None`.
#[inline]
pub(crate) fn with_opt_bytes<R>(
    env: &Env<'_>,
    arr: &JByteArray<'_>,
    name: &str,
    f: impl FnOnce(Option<&[u8]>) -> JResult<R>,
) -> JResult<R> {
    if arr.is_null() {
        f(None)
    } else {
        with_bytes(env, arr, name, |b| f(Some(b)))
    }
}

/// A Java `String` argument as Rust UTF-8 (converted from modified UTF-8).
/// A Java string may hold lone surrogates, which are not Unicode text: they
/// are INVALID_UTF8, as invalid UTF-8 is from C and Python (jni's own
/// conversion makes them U+FFFD, so two different strings named one key).
pub(crate) fn string(env: &Env<'_>, s: &JString<'_>, name: &str) -> JResult<String> {
    if s.is_null() {
        return Err(null_arg(name));
    }
    // Every UTF-16 unit is at least one UTF-8 byte: a string longer than the limit in units is refused
    // before it is copied and decoded whole (a 200 MB key would be), and for its length, as from C.
    let units = utf16_len(env, s)?;
    if units > RACAFFINITY_MAX_STRING_BYTES {
        return Err(Fail::Core(Failure::new(
            racaffinity_result::InvalidArgument,
            format!("`{name}` is {units} UTF-16 units, so more bytes than the limit; the limit is {RACAFFINITY_MAX_STRING_BYTES}"),
        )));
    }
    let chars = s.mutf8_chars(env)?;
    let text = mutf8_text(chars.to_bytes()).map_err(|e| Fail::Core(e.at(name)))?;
    if text.len() > RACAFFINITY_MAX_STRING_BYTES {
        return Err(too_long(name, text.len()).into());
    }
    Ok(text)
}

/// `GetStringLength`: a Java string's length in UTF-16 units, read without copying it.
fn utf16_len(env: &Env<'_>, s: &JString<'_>) -> JResult<usize> {
    if env.exception_check() {
        return Err(jni::errors::Error::JavaException.into());
    }
    let raw = env.get_raw();
    // SAFETY: `raw` is this thread's valid JNIEnv (Env's contract) and `s` a live, non-null reference to a
    // java.lang.String; GetStringLength neither throws nor keeps the reference.
    let units = unsafe { ((**raw).v1_1.GetStringLength)(raw, s.as_raw()) };
    Ok(usize::try_from(units).unwrap_or(0))
}

/// Lone surrogates in a Java string's modified UTF-8.
struct LoneSurrogate;

impl LoneSurrogate {
    fn at(self, name: &str) -> Failure {
        Failure::new(
            racaffinity_result::InvalidUtf8,
            format!("`{name}` is not valid Unicode: it holds a lone surrogate"),
        )
    }
}

/// Strict modified UTF-8 (what `GetStringUTFChars` writes) to UTF-8: a
/// surrogate pair becomes its supplementary character; a lone surrogate is
/// refused.
fn mutf8_text(bytes: &[u8]) -> Result<String, LoneSurrogate> {
    simd_cesu8::mutf8::decode(bytes).map(|t| t.into_owned()).map_err(|_| LoneSurrogate)
}

/// A node id argument: Java `int`, which must be non-negative.
pub(crate) fn node_arg(node: i32) -> JResult<u32> {
    u32::try_from(node).map_err(|_| Fail::Core(ops::unknown_node(node)))
}

/// An enum argument (Java `int`) as the core's type: `C` is the C ABI's enum
/// of the same values. A negative value is named as Java passed it.
pub(crate) fn enum_arg<C: CEnum, T: From<C>>(v: jint) -> Result<T, Failure> {
    let v = u32::try_from(v).map_err(|_| bad_enum(C::NAME, v))?;
    Ok(T::from(C::try_from(v)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::types::racaffinity_scope;
    use racaffinity_core::Scope;

    #[test]
    fn every_code_has_a_java_exception_class_in_the_jar_sources() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../java/src/main/java");
        for &code in racaffinity_result::ALL {
            let class = exception_class(code).to_str().to_string();
            assert!(class.starts_with("io/racaffinity/"), "{code:?} -> {class}");
            let file = root.join(format!("{class}.java"));
            let src = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{code:?} -> {class}: {e}"));
            let simple = class.rsplit('/').next().unwrap();
            assert!(src.contains(&format!("class {simple} ")), "{} declares no class {simple}", file.display());
        }
    }

    #[test]
    fn a_negative_enum_argument_is_named_as_java_passed_it() {
        assert_eq!(enum_arg::<racaffinity_scope, Scope>(3).unwrap(), Scope::Data);
        let f = enum_arg::<racaffinity_scope, Scope>(-1).unwrap_err();
        assert_eq!(f.code, racaffinity_result::InvalidArgument);
        assert_eq!(f.detail, "-1 is not a valid racaffinity_scope");
        assert_eq!(enum_arg::<racaffinity_scope, Scope>(4).unwrap_err().detail, "4 is not a valid racaffinity_scope");
    }

    #[test]
    fn java_text_with_a_lone_surrogate_is_invalid_utf8() {
        // modified UTF-8 as GetStringUTFChars writes it: U+D800 alone, U+DBFF
        // alone, a low surrogate alone, a reversed pair
        for bad in [&b"user-\xed\xa0\x80"[..], b"user-\xed\xaf\xbf", b"\xed\xb0\x80x", b"\xed\xb8\x80\xed\xa0\xbd"] {
            let f = mutf8_text(bad).map_err(|e| e.at("sessionKey")).unwrap_err();
            assert_eq!(f.code, racaffinity_result::InvalidUtf8, "{bad:?}");
            assert!(f.detail.contains("`sessionKey`"), "{}", f.detail);
        }
        // a surrogate pair is its supplementary character; NUL is C0 80
        assert_eq!(mutf8_text(b"a\xed\xa0\xbd\xed\xb8\x80").ok().as_deref(), Some("a\u{1F600}"));
        assert_eq!(mutf8_text(b"a\xc0\x80b").ok().as_deref(), Some("a\0b"));
        assert_eq!(mutf8_text("MYDB1 \u{e9}".as_bytes()).ok().as_deref(), Some("MYDB1 \u{e9}"));
    }

    #[test]
    fn a_negative_node_id_is_an_unknown_node() {
        let Err(Fail::Core(f)) = node_arg(-2) else { panic!("accepted -2") };
        assert_eq!((f.code, f.detail.as_str()), (racaffinity_result::UnknownNode, "no node with id -2"));
    }
}
