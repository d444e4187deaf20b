//! Test-only export (feature `testing`, never in releases): proves that a
//! panic inside a JNI call becomes `NativePanicException`, not a JVM crash.

use jni::objects::{JClass, JString};
use jni::sys::jlong;
use jni::EnvUnowned;

use super::{run, string};

/// `long testPanic(String message)`: panics with `message`.
#[no_mangle]
pub extern "system" fn Java_io_racaffinity_Native_testPanic<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    message: JString<'l>,
) -> jlong {
    run(&mut env, |env| {
        let m = string(env, &message, "message")?;
        panic!("{m}")
    })
}

/// `long testPanicFast(long code)`: panics inside a primitive-only export (the
/// `run_fast` path, whose panic is resumed inside `with_env`).
#[no_mangle]
pub extern "system" fn Java_io_racaffinity_Native_testPanicFast<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    code: jlong,
) -> jlong {
    super::run_fast(&mut env, || panic!("fast path panic {code}"))
}
