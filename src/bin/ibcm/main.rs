fn main() {
    eprintln!("ibcm: not yet implemented");
    std::process::exit(2);
}
