//! The `cordon` binary: every backend this build knows.

fn main() -> std::process::ExitCode {
    cordon_cli::main_with(cordon_host::builtin_registry)
}
