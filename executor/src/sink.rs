//! A stream of output (stdout, stderr, a response body) on its way to the artifact store:
//! capped, redacted, hashed and uploaded in parts as it arrives, so memory stays bounded
//! whatever the size. A preview of the head is kept for the result.

use object_store::path::Path;
use object_store::{Attribute, Attributes, PutMultipartOptions, WriteMultipart};
use sha2::{Digest, Sha256};
use toolgate_contract::redact::{Redactor, StreamRedactor};
use toolgate_crds::{ArtifactKind, ArtifactRef};

use toolgate_artifacts::ArtifactStore;

/// Upload parts of this size; at most this many in flight.
const PART_BYTES: usize = 5 * 1024 * 1024;
const PARTS_IN_FLIGHT: usize = 2;

/// An artifact upload failed.
#[derive(Debug, thiserror::Error)]
#[error("storing artifact {key}: {source}")]
pub struct SinkError {
    /// The object key.
    pub key: String,
    /// Why.
    #[source]
    pub source: object_store::Error,
}

/// What one stream produced.
#[derive(Debug, Clone)]
pub struct SinkOutcome {
    /// The stored artifact.
    pub artifact: ArtifactRef,
    /// The head of the redacted content.
    pub preview: Vec<u8>,
    /// Bytes the source produced (before the cap).
    pub produced: u64,
    /// Whether the cap cut the stream.
    pub truncated: bool,
}

/// One output stream being stored.
pub struct Sink<'r> {
    key: String,
    uri: String,
    artifact_id: String,
    kind: ArtifactKind,
    content_type: &'static str,
    event_id: String,
    cap: u64,
    produced: u64,
    stored: u64,
    hasher: Sha256,
    redact: Option<StreamRedactor<'r>>,
    preview: Vec<u8>,
    preview_limit: usize,
    upload: WriteMultipart,
}

/// Where and what a sink stores.
pub struct SinkTarget<'a> {
    /// Namespace of the call.
    pub namespace: &'a str,
    /// Name of the call.
    pub call: &'a str,
    /// The event the artifact belongs to.
    pub event_id: &'a str,
    /// Artifact id within the call (`stdout`).
    pub artifact_id: &'a str,
    /// Kind.
    pub kind: ArtifactKind,
    /// MIME type.
    pub content_type: &'static str,
    /// Bytes kept; the rest is counted and dropped.
    pub cap: u64,
    /// Bytes of preview kept in memory.
    pub preview_limit: usize,
}

impl<'r> Sink<'r> {
    /// Start an upload at `<namespace>/<call>/<artifact>`.
    pub async fn open(
        store: &ArtifactStore,
        t: SinkTarget<'_>,
        redactor: &'r Redactor,
    ) -> Result<Sink<'r>, SinkError> {
        let key = format!("{}/{}/{}", t.namespace, t.call, t.artifact_id);
        let mut attributes = Attributes::new();
        if store.attributes {
            attributes.insert(Attribute::ContentType, t.content_type.into());
        }
        let opts = PutMultipartOptions {
            attributes,
            ..Default::default()
        };
        let upload = store
            .store
            .put_multipart_opts(&Path::from(key.as_str()), opts)
            .await
            .map_err(|source| SinkError {
                key: key.clone(),
                source,
            })?;
        Ok(Sink {
            uri: format!("{}/{key}", store.uri_prefix),
            key,
            artifact_id: t.artifact_id.to_string(),
            kind: t.kind,
            content_type: t.content_type,
            event_id: t.event_id.to_string(),
            cap: t.cap,
            produced: 0,
            stored: 0,
            hasher: Sha256::new(),
            redact: Some(redactor.stream()),
            preview: Vec::new(),
            preview_limit: t.preview_limit,
            upload: WriteMultipart::new_with_chunk_size(upload, PART_BYTES),
        })
    }

    /// Take a chunk of output.
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), SinkError> {
        let room = self.cap.saturating_sub(self.produced);
        let keep = chunk.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        self.produced += chunk.len() as u64;
        if keep == 0 {
            return Ok(());
        }
        let clean = match self.redact.as_mut() {
            Some(r) => r.push(&chunk[..keep]),
            None => chunk[..keep].to_vec(),
        };
        self.store(&clean).await
    }

    async fn store(&mut self, clean: &[u8]) -> Result<(), SinkError> {
        if clean.is_empty() {
            return Ok(());
        }
        self.hasher.update(clean);
        self.stored += clean.len() as u64;
        if self.preview.len() < self.preview_limit {
            let take = (self.preview_limit - self.preview.len()).min(clean.len());
            self.preview.extend_from_slice(&clean[..take]);
        }
        self.upload.write(clean);
        self.upload
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(|source| SinkError {
                key: self.key.clone(),
                source,
            })
    }

    /// Flush the redactor, complete the upload and describe the artifact.
    pub async fn finish(mut self, summary: Option<String>) -> Result<SinkOutcome, SinkError> {
        let tail = self
            .redact
            .take()
            .map(StreamRedactor::finish)
            .unwrap_or_default();
        self.store(&tail).await?;
        let key = self.key.clone();
        self.upload
            .finish()
            .await
            .map_err(|source| SinkError { key, source })?;
        let truncated = self.produced > self.cap;
        Ok(SinkOutcome {
            artifact: ArtifactRef {
                artifact_id: self.artifact_id,
                kind: self.kind,
                uri: self.uri,
                content_hash: format!("sha256:{}", hex::encode(self.hasher.finalize())),
                size_bytes: self.stored,
                content_type: Some(self.content_type.into()),
                event_id: self.event_id,
                summary,
            },
            preview: self.preview,
            produced: self.produced,
            truncated,
        })
    }
}
