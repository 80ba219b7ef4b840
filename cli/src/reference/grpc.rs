//! The gRPC API's reference, read from the compiled proto's file descriptor set (protox keeps
//! the source comments in it).

use std::collections::HashMap;
use std::fmt::Write as _;

use anyhow::Context;
use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{FieldDescriptorProto, FileDescriptorSet};

use super::cell;

// Paths into a FileDescriptorProto (descriptor.proto's field numbers), as source locations name
// what they comment on.
const MESSAGE: i32 = 4;
const ENUM: i32 = 5;
const SERVICE: i32 = 6;
const MESSAGE_FIELD: i32 = 2;
const ENUM_VALUE: i32 = 2;
const SERVICE_METHOD: i32 = 2;

pub fn page() -> anyhow::Result<String> {
    let set = FileDescriptorSet::decode(toolgate_proto::FILE_DESCRIPTOR_SET)
        .context("decoding the API's file descriptor set")?;
    let file = set
        .file
        .iter()
        .find(|f| f.package() == "toolgate.v1")
        .context("the descriptor set has no toolgate.v1 file")?;
    let comments: HashMap<Vec<i32>, String> = file
        .source_code_info
        .iter()
        .flat_map(|i| &i.location)
        .filter_map(|l| {
            let text = [l.leading_comments(), l.trailing_comments()]
                .iter()
                .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            (!text.is_empty()).then(|| (l.path.clone(), text))
        })
        .collect();
    let comment = |path: &[i32]| comments.get(path).cloned().unwrap_or_default();
    let package = file.package();
    let mut s = format!(
        "# gRPC API (`{package}`)\n\n\
         For agent developers and client authors: every method and message of the API that \
         `toolgate local` and the operator serve alike, from `{name}`. Each request carries \
         `authorization: Bearer <token>`; errors are gRPC statuses with `google.rpc.ErrorInfo` \
         (a stable reason) and `google.rpc.BadRequest` (the field) details. The servers also \
         answer gRPC reflection and `grpc.health.v1`.\n",
        name = file.name(),
    );
    let file_comment = comment(&[12]); // the `syntax` statement's leading comment
    if !file_comment.is_empty() {
        let _ = writeln!(s, "\n{file_comment}");
    }
    for (si, service) in file.service.iter().enumerate() {
        let si = index(si);
        let _ = writeln!(s, "\n## Service `{package}.{}`\n", service.name());
        let c = comment(&[SERVICE, si]);
        if !c.is_empty() {
            let _ = writeln!(s, "{c}\n");
        }
        s.push_str("| method | request | response | description |\n| --- | --- | --- | --- |\n");
        for (mi, m) in service.method.iter().enumerate() {
            let stream = |yes: bool| if yes { "stream " } else { "" };
            let _ = writeln!(
                s,
                "| `{}` | [`{}{}`](#{}) | [`{}{}`](#{}) | {} |",
                m.name(),
                stream(m.client_streaming()),
                short(m.input_type()),
                short(m.input_type()).to_lowercase(),
                stream(m.server_streaming()),
                short(m.output_type()),
                short(m.output_type()).to_lowercase(),
                cell(&comment(&[SERVICE, si, SERVICE_METHOD, index(mi)]))
            );
        }
    }
    s.push_str("\n## Messages\n");
    for (mi, msg) in file.message_type.iter().enumerate() {
        let mi = index(mi);
        let _ = writeln!(s, "\n### {}\n", msg.name());
        let c = comment(&[MESSAGE, mi]);
        if !c.is_empty() {
            let _ = writeln!(s, "{c}\n");
        }
        if msg.field.is_empty() {
            s.push_str("No fields.\n");
            continue;
        }
        s.push_str("| field | number | type | description |\n| --- | --- | --- | --- |\n");
        for (fi, f) in msg.field.iter().enumerate() {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} |",
                f.name(),
                f.number(),
                field_type(f),
                cell(&comment(&[MESSAGE, mi, MESSAGE_FIELD, index(fi)]))
            );
        }
    }
    s.push_str("\n## Enums\n");
    for (ei, e) in file.enum_type.iter().enumerate() {
        let ei = index(ei);
        let _ = writeln!(s, "\n### {}\n", e.name());
        let c = comment(&[ENUM, ei]);
        if !c.is_empty() {
            let _ = writeln!(s, "{c}\n");
        }
        s.push_str("| value | number | description |\n| --- | --- | --- |\n");
        for (vi, v) in e.value.iter().enumerate() {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} |",
                v.name(),
                v.number(),
                cell(&comment(&[ENUM, ei, ENUM_VALUE, index(vi)]))
            );
        }
    }
    Ok(s)
}

fn index(i: usize) -> i32 {
    i32::try_from(i).unwrap_or(i32::MAX)
}

/// `.toolgate.v1.Call` → `Call`.
fn short(type_name: &str) -> &str {
    type_name.rsplit('.').next().unwrap_or(type_name)
}

fn field_type(f: &FieldDescriptorProto) -> String {
    let base = match f.r#type() {
        Type::Message | Type::Enum => {
            let name = short(f.type_name());
            format!("[`{name}`](#{})", name.to_lowercase())
        }
        other => format!(
            "`{}`",
            other
                .as_str_name()
                .trim_start_matches("TYPE_")
                .to_lowercase()
        ),
    };
    if f.label() == Label::Repeated {
        format!("repeated {base}")
    } else {
        base
    }
}
