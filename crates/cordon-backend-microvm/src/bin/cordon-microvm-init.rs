//! The init program for this crate's own tests (the `cordon` binary embeds
//! the same entry point behind a hidden subcommand).

fn main() {
    cordon_linux::init_main()
}
