//! What an agent says of itself (`-o metadata`): its actions and parameters.

use super::*;

/// What an agent says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    pub name: String,
    pub shortdesc: String,
    pub actions: BTreeSet<String>,
    pub parameters: BTreeSet<String>,
}

impl Metadata {
    /// Parses `<resource-agent>` XML. Only the few attributes qfence needs are read.
    pub fn parse(xml: &str) -> Option<Self> {
        let head_start = xml.find("<resource-agent")?;
        let head = &xml[head_start..head_start + xml[head_start..].find('>')?];
        let mut md = Metadata {
            name: attr(head, "name")?,
            shortdesc: attr(head, "shortdesc").unwrap_or_default(),
            ..Default::default()
        };
        for (tag, set) in [
            ("<action ", &mut md.actions),
            ("<parameter ", &mut md.parameters),
        ] {
            let mut rest = xml;
            while let Some(i) = rest.find(tag) {
                rest = &rest[i..];
                let end = rest.find('>').unwrap_or(rest.len());
                if let Some(n) = attr(&rest[..end], "name") {
                    set.insert(n);
                }
                rest = &rest[end..];
            }
        }
        Some(md)
    }
}

pub(super) fn attr(tag: &str, name: &str) -> Option<String> {
    let pat = format!(" {name}=\"");
    let i = tag.find(&pat)? + pat.len();
    let j = tag[i..].find('"')?;
    Some(tag[i..i + j].to_owned())
}

impl FenceAgentDriver {
    pub(super) async fn metadata(&self, ctx: &CallContext) -> Result<&Metadata, DriverError> {
        self.metadata
            .get_or_try_init(|| async {
                let call = "metadata";
                let run = self.run(ctx, call, "metadata", None).await?;
                if run.code != Some(0) {
                    return Err(self.err(
                        ErrorKind::Protocol,
                        call,
                        format!(
                            "{} metadata failed ({}): {}",
                            self.agent,
                            run.code_str(),
                            run.said()
                        ),
                        false,
                    ));
                }
                Metadata::parse(&run.stdout).ok_or_else(|| {
                    self.err(
                        ErrorKind::Protocol,
                        call,
                        format!(
                            "{} metadata printed no <resource-agent> element",
                            self.agent
                        ),
                        false,
                    )
                })
            })
            .await
    }
}
