//! Value parsers shared by the subcommands. Each returns a message that
//! says what was expected; clap prefixes it with the argument's name
//! (`error: invalid value 'x' for '--device <DEVICE>': ...`).

use std::time::Duration;

use ibcm::api::DeviceSpec;
use ibcm::wire::Gid;

/// A decimal or `0x` hexadecimal unsigned integer.
pub fn u64_hex_or_dec(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("not a number (decimal, or hexadecimal with 0x): {s:?}"))
}

/// A 16-bit port number, decimal or `0x` hexadecimal.
pub fn port(s: &str) -> Result<u16, String> {
    let v = u64_hex_or_dec(s)?;
    u16::try_from(v).map_err(|_| format!("too big for a port number (at most 65535): {v}"))
}

/// A 32-bit value (a Q_Key), decimal or `0x` hexadecimal.
pub fn u32_hex_or_dec(s: &str) -> Result<u32, String> {
    let v = u64_hex_or_dec(s)?;
    u32::try_from(v).map_err(|_| format!("too big for 32 bits (at most 0xffffffff): {v:#x}"))
}

/// Milliseconds, decimal or `0x` hexadecimal.
pub fn millis(s: &str) -> Result<Duration, String> {
    u64_hex_or_dec(s).map(Duration::from_millis)
}

/// Seconds, fractions allowed (`0.5`), at least 0.
pub fn seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("not a number of seconds: {s:?}"))?;
    Duration::try_from_secs_f64(v)
        .map_err(|_| format!("not a usable number of seconds (0 or more, finite): {s:?}"))
}

/// The hint appended to every device-name error.
pub const DEVICE_FORMS: &str = "expected soft:<ip>[:<udp port>] (IPv6: soft:[<ip>]:<port>), \
soft:<ip>[:<port>]@<rdma device>, loop:<ip>, or an RDMA device name such as rxe0; \
'ibcm devices' lists the ones this host has";

/// RDMA device names as the kernel makes them (`rxe0`, `mlx5_0`).
fn rdma_name(n: &str) -> bool {
    !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// A device name in one of the forms `ibcm_open_device` takes (checked for
/// syntax only: whether it exists is found out when it is opened).
pub fn device(s: &str) -> Result<String, String> {
    let ok = match s.strip_prefix("soft:") {
        Some(rest) => match rest.rsplit_once('@') {
            Some((soft, dev)) => {
                rdma_name(dev) && DeviceSpec::parse(&format!("soft:{soft}")).is_ok()
            }
            None => DeviceSpec::parse(s).is_ok(),
        },
        None if s.starts_with("loop:") => DeviceSpec::parse(s).is_ok(),
        None => rdma_name(s),
    };
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("not a device name: {s:?}; {DEVICE_FORMS}"))
    }
}

/// A soft or loop device (`soft:<ip>[:<port>]`, `loop:<ip>`): what `ibcm
/// bench` runs on.
pub fn soft_or_loop_device(s: &str) -> Result<String, String> {
    match DeviceSpec::parse(s) {
        Ok(_) => Ok(s.to_string()),
        Err(_) => Err(format!(
            "not a software-fabric device: {s:?}; expected soft:<ip>[:<udp port>] \
             (IPv6: soft:[<ip>]:<port>) or loop:<ip>"
        )),
    }
}

/// The destination of `ibcm connect`: an IP address (its GID).
pub fn dest(s: &str) -> Result<Gid, String> {
    s.parse().map_err(|_| {
        format!(
            "not an IP address: {s:?}; expected the listener's IPv4 or IPv6 address, e.g. 127.0.0.2"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(u64_hex_or_dec("0x1061c06"), Ok(0x1061c06));
        assert_eq!(u64_hex_or_dec("17"), Ok(17));
        assert!(u64_hex_or_dec("0xg").is_err());
        assert_eq!(port("7174"), Ok(7174));
        assert!(port("65536").unwrap_err().contains("65535"));
        assert_eq!(u32_hex_or_dec("0x01234567"), Ok(0x0123_4567));
        assert!(u32_hex_or_dec("0x100000000").is_err());
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert!(seconds("-1").is_err());
        assert!(seconds("inf").is_err());
        assert!(seconds("x").is_err());
    }

    #[test]
    fn device_names() {
        for ok in [
            "soft:127.0.0.1",
            "soft:127.0.0.1:4800",
            "soft:[::1]:4791",
            "soft:::1",
            "soft:[fd00:88:1::1]",
            "soft:10.0.0.2@rxe0",
            "soft:10.0.0.2:4793@mlx5_0",
            "loop:10.0.0.1",
            "rxe0",
            "mlx5_0",
        ] {
            assert_eq!(device(ok).as_deref(), Ok(ok), "{ok}");
        }
        for bad in [
            "",
            "soft:",
            "soft:host",
            "soft:1.2.3.4@",
            "soft:1.2.3.4@a/b",
            "loop:x",
            "a b",
        ] {
            let e = device(bad).unwrap_err();
            assert!(e.contains("ibcm devices"), "{bad}: {e}");
        }
        assert!(soft_or_loop_device("rxe0").is_err());
        assert!(soft_or_loop_device("loop:10.0.0.1").is_ok());
    }
}
