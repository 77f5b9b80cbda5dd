//! `ibcm`: the command-line tool. `main` only dispatches on the first
//! argument; each subcommand lives in its own module (`<cmd>.rs`) with a
//! `pub fn main(args: &[OsString]) -> i32` that receives the arguments after
//! the subcommand name and returns the exit status.

use std::ffi::OsString;

mod baseline;
mod bench;
mod cm;
mod decode;

/// Exit status for usage errors (and `--help`).
pub const EXIT_USAGE: i32 = 2;

const USAGE: &str = "\
usage: ibcm <command> [options] [args]

commands:
  decode    print the CM MADs found in pcap / pcapng captures of RoCEv2 traffic
  listen    listen for connections on a service ID
  connect   connect to a remote service
  bench     connection setup / teardown benchmark
  devices   list the devices ibcm can use

'ibcm <command> --help' shows the options of a command.
";

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let code = match args.first().map(|a| a.to_string_lossy()) {
        Some(cmd) => match cmd.as_ref() {
            "decode" => decode::main(&args[1..]),
            "-h" | "--help" | "help" => {
                print!("{USAGE}");
                EXIT_USAGE
            }
            "listen" => cm::listen_main(&args[1..]),
            "connect" => cm::connect_main(&args[1..]),
            "bench" => bench::main(&args[1..]),
            "devices" => {
                eprintln!("ibcm: '{cmd}' is not available in this build yet");
                EXIT_USAGE
            }
            other => {
                eprintln!("ibcm: unknown command '{other}'\n");
                eprint!("{USAGE}");
                EXIT_USAGE
            }
        },
        None => {
            eprint!("{USAGE}");
            EXIT_USAGE
        }
    };
    std::process::exit(code);
}
