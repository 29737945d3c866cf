//! The init program for cordon-linux's own tests. The `cordon` binary
//! embeds the same entry point behind a hidden subcommand.

fn main() {
    cordon_linux::init_main()
}
