//! `ibcm`: the command-line tool. The command line is parsed by clap into
//! one `Args` struct per subcommand (each module's `Args`, with its own
//! `pub fn main(args: &Args) -> i32`), which `main` dispatches to; the exit
//! status is the subcommand's (0 ok, 1 runtime failure) or 2 for a usage
//! error (clap's status for every parse error).

use std::ffi::OsString;
use std::io::Write;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod args;
mod baseline;
mod bench;
mod cm;
mod daemon;
mod decode;
mod devices;
mod svc;

/// Exit status for usage errors (clap exits with it for every parse error).
pub const EXIT_USAGE: i32 = 2;

const EXIT_STATUS: &str = "\
Exit status:
  0  success
  1  runtime failure (a device that cannot be opened, a connection or
     capture that failed, a benchmark mismatch, ...)
  2  usage error (unknown option, missing or invalid value)

'ibcm <command> --help' shows the options of a command;
'ibcm completions bash|zsh|fish' prints a shell completion script.";

/// Userspace InfiniBand / RoCE Communication Manager: connect, listen,
/// benchmark, decode captures, list devices.
#[derive(Parser, Debug)]
#[command(
    name = "ibcm",
    version,
    after_help = EXIT_STATUS,
    subcommand_required = true,
    arg_required_else_help = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// print the CM MADs found in pcap / pcapng captures of RoCEv2 traffic
    #[command(long_about = decode::ABOUT)]
    Decode(decode::Args),
    /// listen for connections on a service ID
    #[command(long_about = cm::LISTEN_ABOUT)]
    Listen(cm::ListenArgs),
    /// connect to a remote service
    #[command(long_about = cm::CONNECT_ABOUT)]
    Connect(cm::ConnectArgs),
    /// connection setup / teardown benchmark
    #[command(long_about = bench::ABOUT)]
    Bench(bench::Args),
    /// list the devices ibcm can use
    #[command(long_about = devices::ABOUT)]
    Devices(devices::Args),
    /// run the host CM service (one CM per host, shared by processes)
    #[command(long_about = daemon::ABOUT)]
    Daemon(daemon::Args),
    /// list every id the host CM service holds (all processes)
    #[command(long_about = svc::IDS_ABOUT)]
    Ids(svc::Args),
    /// print the counters of every device the host CM service serves
    #[command(long_about = svc::STAT_ABOUT)]
    Stat(svc::Args),
    /// print a shell completion script (bash, zsh, fish, ...)
    Completions(CompletionsArgs),
}

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Install, e.g.:
  bash: ibcm completions bash > ~/.local/share/bash-completion/completions/ibcm
  zsh:  ibcm completions zsh > ~/.zfunc/_ibcm   (with ~/.zfunc in $fpath)
  fish: ibcm completions fish > ~/.config/fish/completions/ibcm.fish")]
struct CompletionsArgs {
    /// the shell to write the script for
    shell: clap_complete::Shell,
}

/// Writes the completion script for `shell` to stdout.
fn completions(a: &CompletionsArgs) -> i32 {
    let mut cmd = command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "ibcm", &mut out);
    match std::io::stdout().write_all(&out) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("ibcm completions: cannot write the output: {e}");
            1
        }
    }
}

/// The command line's grammar. An option given twice takes its last
/// value (`ibcm listen --timeout 20 ... --timeout 2`), as scripts that add
/// options to a fixed set expect.
fn command() -> clap::Command {
    Cli::command().mut_subcommands(|s| s.args_override_self(true))
}

fn parse(argv: Vec<OsString>) -> Result<Cli, clap::Error> {
    let mut cmd = command();
    let m = cmd.try_get_matches_from_mut(argv)?;
    Cli::from_arg_matches(&m).map_err(|e| e.format(&mut cmd))
}

fn run(argv: Vec<OsString>) -> i32 {
    let cli = match parse(argv) {
        Ok(cli) => cli,
        // Help and version go to stdout with status 0, errors to stderr
        // with status 2 (clap's convention).
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    match &cli.command {
        Command::Decode(a) => decode::main(a),
        Command::Listen(a) => cm::listen_main(a),
        Command::Connect(a) => cm::connect_main(a),
        Command::Bench(a) => bench::main(a),
        Command::Devices(a) => devices::main(a),
        Command::Daemon(a) => daemon::main(a),
        Command::Ids(a) => svc::ids_main(a),
        Command::Stat(a) => svc::stat_main(a),
        Command::Completions(a) => completions(a),
    }
}

fn main() {
    std::process::exit(run(std::env::args_os().collect()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn usage_errors_have_status_2() {
        let e = parse(vec!["ibcm".into(), "frobnicate".into()]).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_USAGE);
        let e = parse(vec!["ibcm".into(), "--help".into()]).unwrap_err();
        assert_eq!(e.exit_code(), 0);
    }

    #[test]
    fn the_last_of_a_repeated_option_wins() {
        let argv = "ibcm listen --timeout 20 --count 0 --timeout 2";
        let cli = parse(argv.split(' ').map(OsString::from).collect()).unwrap();
        let Command::Listen(a) = cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(a.common.timeout, std::time::Duration::from_secs(2));
    }

    /// Every command line the scripts and docs use (interop/run.sh,
    /// tests/netns/run.sh, python/tests, README) still parses.
    #[test]
    fn the_scripts_command_lines_parse() {
        for line in [
            "connect --device soft:10.77.5.254 --dest 10.77.5.1 --rdma-cm --private-data ibcm --timeout 20",
            "connect --device soft:10.77.5.254 --dest 10.77.5.1 --port 7471 --rdma-cm --wait-disconnect --timeout 20",
            "listen --device soft:10.77.5.254 --port 7471 --rdma-cm --disconnect --timeout 20",
            "listen --device soft:10.77.5.254 --rdma-cm --disconnect-delay 1000 --private-data ibcm --timeout 20",
            "listen --device soft:10.77.5.254 --port 7471 --rdma-cm --reject 28 --private-data x --timeout 20",
            "listen --device soft:10.77.5.254 --sidr --port 7174 --rdma-cm --timeout 20",
            "listen --device soft:10.77.5.254 --sidr --port 7174 --rdma-cm --reject 2 --timeout 20",
            "listen --device soft:10.77.5.254 --port 7175 --count 0 --timeout 20",
            "connect --device soft:10.77.5.254 --dest 10.77.5.1 --sidr --rdma-cm --timeout 20",
            "connect --dest 127.0.0.2 --device soft:127.0.0.3 --service-id 0x7a7a --private-data x --timeout 10",
            "listen --device soft:127.0.0.2 --service-id 0x7b7b --count 1 --private-data x --timeout 10",
            "connect -d soft:127.0.0.3 --dest 127.0.0.2 -c 2 -p hi -q --response-timeout 16 --expect-reject 8",
            "bench --client soft:[fd00:88:1::1] --server soft:[fd00:88:2::1] --server-wrap ip_netns_exec_B \
             --verify --json --timeout 120 --connections 100 --concurrency 32 --cm-timeout 17 \
             --cm-local-timeout 17 --cm-retries 15",
            "bench --serve --server soft:127.0.77.2 --verify --settle 5 --threads 1",
            "bench --serve-baseline --server soft:127.0.0.2 --threads 1 --settle 20",
            "bench --baseline --json -n 10 -c 4 --fabric loopback --threads 2 --processes 1",
            "bench --scale --connections 1000000",
            "decode --json --summary a.pcap -",
            "decode --oneline a.pcap",
            "decode --summary --svg ladder.svg --conn 0 --conn 2 a.pcap b.pcapng",
            "bench --baseline --svg bench.svg -n 100",
            "devices --json",
            "completions bash",
        ] {
            let mut argv = vec![OsString::from("ibcm")];
            argv.extend(line.split_whitespace().map(OsString::from));
            if let Err(e) = parse(argv) {
                panic!("{line}: {e}");
            }
        }
    }
}
