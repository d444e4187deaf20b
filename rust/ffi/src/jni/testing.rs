//! Test-only export (feature `testing`, never in releases): proves that a
//! panic inside a JNI call becomes `NativePanicException`, not a JVM crash.

use jni::objects::JString;
use jni::sys::jlong;

use super::{run, string};

jni_export! {
    /// `long testPanic(String message)`: panics with `message`.
    fn Java_io_racaffinity_Native_testPanic<'l>(env, message: JString<'l>) -> jlong {
        run(&mut env, |env| {
            let m = string(env, &message, "message")?;
            panic!("{m}")
        })
    }

    /// `long testPanicFast(long code)`: panics inside a primitive-only export (the
    /// `run_fast` path, whose panic is resumed inside `with_env`).
    fn Java_io_racaffinity_Native_testPanicFast<'l>(env, code: jlong) -> jlong {
        super::run_fast(&mut env, || panic!("fast path panic {code}"))
    }
}
