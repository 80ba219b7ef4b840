//! Link options of the `toolgate` binary.

include!("../executor/packed_relocs.rs");

fn main() {
    pack_relative_relocs("toolgate");
}
