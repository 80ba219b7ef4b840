//! Link options of the `toolgate` and `toolgate-full` binaries.

include!("../executor/packed_relocs.rs");

fn main() {
    pack_relative_relocs("toolgate");
    pack_relative_relocs("toolgate-full");
}
