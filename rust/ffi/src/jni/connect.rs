//! Oracle per-instance connect strings for `io.racaffinity.oracle.OracleUrls`,
//! built and validated by the core (no string building in Java).

use jni::objects::JString;
use jni::sys::jint;
use racaffinity_core::connect::InstanceAddress;

use super::{enum_arg, run, string};
use crate::capi::connect::racaffinity_connect_form;
use crate::capi::result::{racaffinity_result, Failure};

jni_export! {
    /// `OracleUrls.connectString(int form, String host, int port, String service,
    /// String instance)`: `form` is a `racaffinity_connect_form` value.
    fn Java_io_racaffinity_oracle_OracleUrls_connectString<'l>(
        env,
        form: jint,
        host: JString<'l>,
        port: jint,
        service: JString<'l>,
        instance: JString<'l>,
    ) -> JString<'l> {
        run(&mut env, |env| {
            let (host, service, instance) =
                (string(env, &host, "host")?, string(env, &service, "service")?, string(env, &instance, "instance")?);
            let port = u16::try_from(port).map_err(|_| {
                Failure::new(racaffinity_result::InvalidArgument, format!("port {port} is out of range 0..=65535"))
            })?;
            let addr = InstanceAddress { host: &host, port, service: &service, instance: &instance };
            let s = enum_arg::<racaffinity_connect_form, racaffinity_connect_form>(form)?.build(&addr)?;
            Ok(JString::from_str(env, s)?)
        })
    }
}
