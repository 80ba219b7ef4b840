//! Standard output for every command. A reader that stops early (`toolgate view … | head`) closes
//! the pipe; then the command ends quietly with success, as ripgrep does, instead of panicking
//! the way `println!` does on a broken pipe.

use std::io::Write;

/// Write formatted text to stdout; see the module doc for a closed pipe.
pub fn write(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("toolgate: cannot write to standard output: {e}");
        std::process::exit(74);
    }
}

/// `print!` through [`write`].
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::out::write(format_args!($($t)*)) };
}

/// `println!` through [`write`].
#[macro_export]
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($t)*))) };
}
