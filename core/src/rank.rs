//! How well a tool's words fit an intent: field-weighted BM25 (BM25F) over what a descriptor
//! says of itself, the intent's action read from its verbs, and a plain BM25 over name and
//! description that `toolgate eval` reports beside it.
//!
//! A tool's text is split into fields a model-facing description is made of: its name (split on
//! `.`, `_`, `-` and camelCase), its summary, when to use it (use-when hints and example
//! requests), its parameters (names and descriptions) and its domains. Each field's term
//! frequency saturates (`k1`) and is normalised by the field's length against the namespace's
//! average (`b`); a term's weight is its inverse document frequency over the namespace, so a
//! word every tool has tells tools apart no better than a stop word. Words are lowercased,
//! stop words dropped and stemmed (Snowball English) so `files` meets `file` and `deleted`
//! meets `delete`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};
use serde::Serialize;
use serde_json::Value;
use toolgate_crds::{ActionType, ToolDescriptorSpec};

/// The fields of a tool's text, in the order of [`FIELD_WEIGHTS`].
pub const FIELDS: [&str; 5] = ["name", "summary", "useWhen", "parameters", "domains"];
/// How much a match in each field counts: the name says what the tool is; use-when hints and
/// examples say when to pick it; parameters are many and loosely worded.
const FIELD_WEIGHTS: [f64; 5] = [3.0, 1.0, 1.5, 0.4, 0.5];
/// How much each field's length normalises its counts (0: not at all, 1: fully). Names are
/// short and their length says little.
const FIELD_B: [f64; 5] = [0.3, 0.75, 0.75, 0.75, 0.0];
/// Term-frequency saturation.
const K1: f64 = 1.2;

static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Words that say nothing about which tool fits.
const STOP: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has",
    "have", "he", "her", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just",
    "let", "me", "my", "need", "not", "of", "on", "one", "or", "our", "please", "she", "should",
    "so", "some", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this",
    "those", "to", "tool", "tools", "up", "us", "use", "used", "using", "want", "was", "we",
    "were", "what", "when", "where", "which", "who", "will", "with", "would", "you", "your",
];

/// The words of a text in order, as ranking compares them: split on anything that is not a
/// letter or digit and between a lower-case letter and an upper-case one (`getCurrentTime`),
/// lowercased, stop words and one-letter words dropped, stemmed.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    let flush = |word: &mut String, out: &mut Vec<String>| {
        if word.chars().count() >= 2 {
            let lower = word.to_lowercase();
            if !STOP.contains(&lower.as_str()) {
                out.push(STEMMER.stem(&lower).into_owned());
            }
        }
        word.clear();
    };
    for c in text.chars() {
        if !c.is_alphanumeric() {
            flush(&mut word, &mut out);
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            flush(&mut word, &mut out);
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.push(c);
    }
    flush(&mut word, &mut out);
    out
}

/// The distinct words of a text ([`tokens`]).
pub fn terms(text: &str) -> BTreeSet<String> {
    tokens(text).into_iter().collect()
}

/// Words of everyday requests and the word tools use for the same thing: a request says "now",
/// a tool says "current". Each adds the tool's word to the query at half weight.
const EVERYDAY: &[(&str, &str)] = &[
    ("now", "current"),
    ("today", "current"),
    ("currently", "current"),
];

/// [`EVERYDAY`], stemmed once.
static EVERYDAY_STEMS: LazyLock<Vec<(String, String)>> = LazyLock::new(|| {
    EVERYDAY
        .iter()
        .map(|(said, meant)| {
            (
                STEMMER.stem(said).into_owned(),
                STEMMER.stem(meant).into_owned(),
            )
        })
        .collect()
});

/// The tool words an intent's everyday words stand for ([`EVERYDAY`]), given the intent's
/// [`terms`].
pub fn everyday_terms(words: &BTreeSet<String>) -> BTreeSet<String> {
    EVERYDAY_STEMS
        .iter()
        .filter(|(said, _)| words.contains(said))
        .map(|(_, meant)| meant.clone())
        .filter(|t| !words.contains(t))
        .collect()
}

/// A tool's words by field: term counts and field lengths.
#[derive(Debug, Clone, Default)]
pub struct ToolText {
    counts: [BTreeMap<String, u32>; 5],
    /// Words per field.
    pub lengths: [u32; 5],
}

impl ToolText {
    /// The fields of a descriptor.
    pub fn of(spec: &ToolDescriptorSpec) -> Self {
        let mut t = ToolText::default();
        t.add(0, &spec.canonical_name);
        if let Some(n) = &spec.display_name {
            t.add(0, n);
        }
        t.add(1, &spec.description.summary);
        for s in &spec.description.use_when {
            t.add(2, s);
        }
        for e in &spec.description.examples {
            t.add(2, &e.user_request);
        }
        if let Some(Value::Object(props)) = spec.schemas.input_schema.get("properties") {
            for (name, schema) in props {
                t.add(3, name);
                if let Some(d) = schema.get("description").and_then(Value::as_str) {
                    t.add(3, d);
                }
                // The values an arg takes say what the tool does (`method: get_diff`).
                for v in schema
                    .get("enum")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    t.add(3, v);
                }
            }
        }
        for d in &spec.intent.domains {
            t.add(4, d);
        }
        t
    }

    fn add(&mut self, field: usize, text: &str) {
        for w in tokens(text) {
            *self.counts[field].entry(w).or_default() += 1;
            self.lengths[field] += 1;
        }
    }

    /// Every word of every field.
    pub fn terms(&self) -> BTreeSet<String> {
        self.counts.iter().flat_map(|m| m.keys().cloned()).collect()
    }

    /// Every word's weighted, length-normalised frequency over the fields, given the namespace's
    /// average field lengths: what [`contribution`] takes, computed once per registry.
    pub fn weights(&self, average: &[f64; 5]) -> BTreeMap<String, f64> {
        self.terms()
            .into_iter()
            .map(|t| {
                let (tf, _) = self.frequency(&t, average);
                (t, tf)
            })
            .collect()
    }

    /// The term's weighted, length-normalised frequency over the fields, and its part per field.
    fn frequency(&self, term: &str, average: &[f64; 5]) -> (f64, [f64; 5]) {
        let mut parts = [0.0; 5];
        for f in 0..5 {
            let Some(&tf) = self.counts[f].get(term) else {
                continue;
            };
            let avg = average[f].max(1.0);
            let norm = 1.0 - FIELD_B[f] + FIELD_B[f] * f64::from(self.lengths[f]) / avg;
            parts[f] = FIELD_WEIGHTS[f] * f64::from(tf) / norm;
        }
        (parts.iter().sum(), parts)
    }
}

/// What the namespace's tools look like as a whole: how many, and their mean field lengths.
#[derive(Debug, Clone, Copy, Default)]
pub struct Corpus {
    /// Tools in the namespace.
    pub tools: u32,
    /// Words per field over all of them.
    pub total_lengths: [u64; 5],
}

impl Corpus {
    /// Count a tool in.
    pub fn add(&mut self, text: &ToolText) {
        self.tools += 1;
        for f in 0..5 {
            self.total_lengths[f] += u64::from(text.lengths[f]);
        }
    }

    /// Mean words per field.
    pub fn average(&self) -> [f64; 5] {
        let n = f64::from(self.tools.max(1));
        self.total_lengths.map(|l| l as f64 / n)
    }

    /// Inverse document frequency of a word found in `df` of the namespace's tools.
    pub fn idf(&self, df: usize) -> f64 {
        let n = f64::from(self.tools);
        let df = df as f64;
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }
}

/// A tool's fit to an intent, with the part each field contributed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Fit {
    /// The BM25F score.
    pub score: f64,
    /// Per field of [`FIELDS`].
    pub parts: [f64; 5],
}

impl Fit {
    /// `name 2.10 + summary 0.91`: the fields that contributed, for a view's reasons.
    pub fn explain(&self) -> String {
        FIELDS
            .iter()
            .zip(self.parts)
            .filter(|(_, p)| *p > 0.0005)
            .map(|(f, p)| format!("{f} {p:.2}"))
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

/// The fit of one tool to query words, each given with its inverse document frequency.
pub fn fit(text: &ToolText, query: &[(String, f64)], corpus: &Corpus) -> Fit {
    let average = corpus.average();
    let mut out = Fit::default();
    for (term, idf) in query {
        let (tf, parts) = text.frequency(term, &average);
        if tf <= 0.0 {
            continue;
        }
        let weight = idf * (K1 + 1.0) / (K1 + tf);
        out.score += contribution(tf, *idf);
        for (sum, part) in out.parts.iter_mut().zip(parts) {
            *sum += weight * part;
        }
    }
    out
}

/// What one word adds to a tool's score: its weighted frequency `tf`, saturated, times its
/// inverse document frequency.
pub fn contribution(tf: f64, idf: f64) -> f64 {
    idf * (K1 + 1.0) / (K1 + tf) * tf
}

/// What an intent asks to do, as far as the risk of the tools that fit it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum IntentAction {
    /// Look, list, search: nothing should change.
    Read,
    /// Create, change, send, run: a change, nothing destroyed.
    Write,
    /// Delete, remove, drop: a destruction is what is asked.
    Delete,
    /// The words do not say.
    Unknown,
}

const DELETE_VERBS: &[&str] = &[
    "delete",
    "remove",
    "drop",
    "destroy",
    "erase",
    "purge",
    "wipe",
    "uninstall",
    "rm",
    "unlink",
    "truncate",
    "discard",
    "kill",
    "terminate",
    "revoke",
    "prune",
    "evict",
    "clear",
];
const WRITE_VERBS: &[&str] = &[
    "add",
    "append",
    "apply",
    "approve",
    "archive",
    "assign",
    "book",
    "buy",
    "cancel",
    "change",
    "click",
    "close",
    "comment",
    "commit",
    "configure",
    "create",
    "deploy",
    "disable",
    "drag",
    "edit",
    "enable",
    "execute",
    "fill",
    "fix",
    "fork",
    "install",
    "insert",
    "invite",
    "label",
    "link",
    "lock",
    "make",
    "mark",
    "merge",
    "modify",
    "move",
    "navigate",
    "open",
    "patch",
    "pay",
    "post",
    "press",
    "publish",
    "push",
    "react",
    "record",
    "remember",
    "rename",
    "reopen",
    "replace",
    "reply",
    "request",
    "reset",
    "restart",
    "rerun",
    "resolve",
    "run",
    "save",
    "scale",
    "schedule",
    "select",
    "send",
    "set",
    "star",
    "start",
    "stop",
    "store",
    "submit",
    "tag",
    "transfer",
    "trigger",
    "type",
    "unlock",
    "update",
    "upload",
    "write",
];
const READ_VERBS: &[&str] = &[
    "browse",
    "check",
    "compare",
    "count",
    "describe",
    "diff",
    "display",
    "explain",
    "fetch",
    "find",
    "get",
    "inspect",
    "list",
    "look",
    "lookup",
    "query",
    "read",
    "search",
    "see",
    "show",
    "summarize",
    "summarise",
    "tell",
    "view",
];
/// Words that open a question: a read when the intent starts with one.
const QUESTION_WORDS: &[&str] = &[
    "what", "whats", "when", "where", "which", "who", "whom", "whose", "how", "is", "are", "was",
    "were", "does", "do", "did", "has", "have", "any", "why",
];

/// The stems of the verbs that destroy, change and read, computed once.
type StemSet = std::collections::HashSet<String>;
static VERB_STEMS: LazyLock<(StemSet, StemSet, StemSet)> = LazyLock::new(|| {
    let stems = |verbs: &[&str]| verbs.iter().map(|v| STEMMER.stem(v).into_owned()).collect();
    (stems(DELETE_VERBS), stems(WRITE_VERBS), stems(READ_VERBS))
});

/// The action an intent's words ask for: a destruction if any verb destroys (a risky word is
/// never overlooked); otherwise what its first verb asks (`show me the open pull requests` is a
/// read, though `open` is also a verb), a question being a read; unknown when no word says.
pub fn intent_action(intent: &str) -> IntentAction {
    let words: Vec<String> = intent
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let stems: Vec<String> = words.iter().map(|w| STEMMER.stem(w).into_owned()).collect();
    if stems.iter().any(|s| VERB_STEMS.0.contains(s.as_str())) {
        return IntentAction::Delete;
    }
    if words
        .first()
        .is_some_and(|w| QUESTION_WORDS.contains(&w.as_str()))
    {
        return IntentAction::Read;
    }
    for s in &stems {
        if VERB_STEMS.1.contains(s.as_str()) {
            return IntentAction::Write;
        }
        if VERB_STEMS.2.contains(s.as_str()) {
            return IntentAction::Read;
        }
    }
    IntentAction::Unknown
}

/// The action a declared action type asks for.
pub fn declared_action(action: ActionType) -> IntentAction {
    use ActionType::*;
    match action {
        Read | Search | Inspect | MemoryRead => IntentAction::Read,
        Delete | Admin | Deploy | Purchase | Auth => IntentAction::Delete,
        Compute | Transform | Generate | Execute | SubagentDelegate | Write | Patch
        | MemoryWrite | ExternalSend => IntentAction::Write,
    }
}

/// Whether a tool declares it does more than a read: an action type that changes, sends or
/// destroys, or a destructive risk. A tool that only says it executes something (`execute`,
/// `compute`: a test runner, or an MCP tool whose author did not say) is not known to.
pub fn declares_change(spec: &ToolDescriptorSpec) -> bool {
    use ActionType::*;
    destroys(spec)
        || spec.intent.action_types.iter().any(|a| {
            matches!(
                a,
                Write
                    | Patch
                    | MemoryWrite
                    | ExternalSend
                    | Delete
                    | Admin
                    | Deploy
                    | Purchase
                    | Auth
            )
        })
}

/// Whether a tool declares it destroys.
pub fn destroys(spec: &ToolDescriptorSpec) -> bool {
    spec.risk.destructive
        || !spec.effects.deletes.is_empty()
        || spec.intent.action_types.contains(&ActionType::Delete)
}

/// How a tool's risk weighs on its rank for an intent: for a read, a tool that declares a
/// change ranks after every tool that does not ([`Demotion::After`]); for a change, a tool that
/// declares it destroys has its score lowered ([`Demotion::Lowered`]: many real tools that
/// overwrite or navigate declare themselves destructive, and a change may need one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demotion {
    /// Ranked as its fit says.
    None,
    /// Its score multiplied by [`LOWERED`].
    Lowered,
    /// After every tool that fits and is not riskier.
    After,
}

/// The factor a [`Demotion::Lowered`] tool's score is multiplied by.
pub const LOWERED: f64 = 0.6;

/// How much more than the intent asks a tool declares it does.
pub fn demotion(spec: &ToolDescriptorSpec, action: IntentAction) -> Demotion {
    match action {
        IntentAction::Read if declares_change(spec) => Demotion::After,
        IntentAction::Write if destroys(spec) => Demotion::Lowered,
        _ => Demotion::None,
    }
}

/// Plain BM25 (k1 = 1.2, b = 0.75) over a tool's name and description, words split on anything
/// that is not a letter or digit and lowercased, nothing else: the baseline a ranking must
/// beat. Returns the documents' scores, in their order.
pub fn bm25_baseline(documents: &[String], query: &str) -> Vec<f64> {
    let split = |t: &str| -> Vec<String> {
        t.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let docs: Vec<Vec<String>> = documents.iter().map(|d| split(d)).collect();
    let n = docs.len() as f64;
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n.max(1.0);
    let query: BTreeSet<String> = split(query).into_iter().collect();
    let df: BTreeMap<&str, usize> = query
        .iter()
        .map(|q| (q.as_str(), docs.iter().filter(|d| d.contains(q)).count()))
        .collect();
    docs.iter()
        .map(|d| {
            let len = d.len() as f64;
            query
                .iter()
                .map(|q| {
                    let tf = d.iter().filter(|w| *w == q).count() as f64;
                    if tf == 0.0 {
                        return 0.0;
                    }
                    let df = df.get(q.as_str()).copied().unwrap_or(0) as f64;
                    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - 0.75 + 0.75 * len / avg.max(1.0)))
                })
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_as_names_and_sentences_are_written() {
        assert_eq!(tokens("getCurrentTime"), ["get", "current", "time"]);
        assert_eq!(
            tokens("github.get_file_contents"),
            ["github", "get", "file", "content"]
        );
        assert_eq!(
            tokens("Run the Test-suite for one file"),
            ["run", "test", "suit", "file"]
        );
        assert_eq!(terms("files deleted"), terms("file delete"));
        assert_eq!(tokens("HTTPServer"), ["httpserver"]);
    }

    #[test]
    fn intents_say_what_they_ask_for() {
        for (intent, want) in [
            ("show me the open pull requests", IntentAction::Read),
            (
                "find the stale branches and delete them",
                IntentAction::Delete,
            ),
            ("is the deployment healthy", IntentAction::Read),
            ("list the pods in the default namespace", IntentAction::Read),
            ("What time is it now?", IntentAction::Read),
            ("delete the stale branch", IntentAction::Delete),
            (
                "comment on the login issue that it is fixed",
                IntentAction::Write,
            ),
            ("hello there", IntentAction::Unknown),
            ("Removing old snapshots", IntentAction::Delete),
        ] {
            assert_eq!(intent_action(intent), want, "{intent}");
        }
    }

    #[test]
    fn the_rarer_word_and_the_shorter_field_count_more() {
        let docs = [
            "get_current_time Get the current time in a time zone".to_string(),
            "convert_time Convert a time between two time zones".to_string(),
            "list_files List the files of a folder".to_string(),
        ];
        let s = bm25_baseline(&docs, "current time");
        assert!(s[0] > s[1] && s[1] > 0.0 && s[2] == 0.0, "{s:?}");
        assert!(bm25_baseline(&[], "x").is_empty());
    }
}
