//! What a notice becomes on the wire: the Standard Webhooks event shape, or a message a Slack
//! incoming webhook accepts (`text` and `blocks`; Slack ignores the signature headers, so verify
//! with a receiver of your own where the signature matters).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::ApprovalNotice;

/// The event type of a new approval.
pub const APPROVAL_REQUESTED: &str = "approval.requested";

/// The shape of a notification's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Payload {
    /// `{"type": "approval.requested", "timestamp": RFC 3339, "data": {…}}`, the Standard
    /// Webhooks event shape.
    #[default]
    Standard,
    /// A Slack message: a line of text and a button to the page (Slack's incoming webhooks).
    Slack,
}

impl Payload {
    /// The body of the notification of `notice`, sent at `now`.
    pub fn body(self, notice: &ApprovalNotice, now: SystemTime) -> Vec<u8> {
        let value = match self {
            Payload::Standard => standard(notice, now),
            Payload::Slack => slack(notice),
        };
        serde_json::to_vec(&value).unwrap_or_default()
    }
}

fn standard(notice: &ApprovalNotice, now: SystemTime) -> Value {
    let mut data = json!({
        "id": notice.id,
        "audience": notice.audience,
        "url": notice.url,
        "tool": notice.tool,
        "requested_by": notice.requested_by,
        "approvers": notice.approvers,
        "required": notice.required,
        "passkey": notice.passkey,
        "expires_at": rfc3339(notice.expires_at),
    });
    if let (Some(details), Some(map)) = (&notice.details, data.as_object_mut()) {
        let mut shared = json!({"message": details.message});
        if let Some(shared) = shared.as_object_mut() {
            if let Some(records) = &details.records {
                shared.insert("records".into(), json!(records));
            }
            if let Some(arguments) = &details.arguments {
                shared.insert("arguments".into(), json!(arguments));
            }
        }
        map.insert("details".into(), shared);
    }
    json!({"type": APPROVAL_REQUESTED, "timestamp": rfc3339(now), "data": data})
}

fn slack(notice: &ApprovalNotice) -> Value {
    let mut text = format!(
        "*{}* asks to run `{}` on {}. Approvers: {}{}; expires {}.",
        mrkdwn(&notice.requested_by),
        mrkdwn(&notice.tool),
        mrkdwn(&notice.audience),
        mrkdwn(&notice.approvers),
        if notice.passkey {
            ", with a passkey"
        } else {
            ""
        },
        rfc3339(notice.expires_at),
    );
    if let Some(details) = &notice.details {
        text.push('\n');
        text.push_str(&mrkdwn(&details.message));
        for record in details.records.iter().flatten() {
            text.push_str("\n• ");
            text.push_str(&mrkdwn(record));
        }
        if let Some(arguments) = &details.arguments {
            text.push_str("\nArguments:");
            for line in arguments {
                text.push_str("\n• ");
                text.push_str(&mrkdwn(line));
            }
        }
    }
    json!({
        "text": format!("Approval requested: {} by {}", mrkdwn(&notice.tool), mrkdwn(&notice.requested_by)),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "actions", "elements": [{
                "type": "button",
                "text": {"type": "plain_text", "text": "Open the approval page"},
                "url": notice.url,
            }]},
        ],
    })
}

/// Slack's three control characters escaped, so a label cannot become a link or a mention.
fn mrkdwn(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `at` as RFC 3339 in UTC, to the second (`2026-12-05T09:30:00Z`).
pub(crate) fn rfc3339(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::notify::Details;

    /// Labels and argument values no other part of a notice holds.
    const LABEL: &str = "Groceries <https://evil.example|click> & more";
    const ARGUMENT: &str = "title: \"Groceries from the workspace\"";

    /// A notice whose rule shares the records' labels (`labels`) and the argument values
    /// (`values`).
    fn notice(labels: bool, values: bool) -> ApprovalNotice {
        ApprovalNotice {
            id: "00ff".into(),
            audience: "notes.example".into(),
            url: "https://notes.example/approve/00ff".into(),
            tool: "notes_delete".into(),
            requested_by: "alice".into(),
            approvers: "anyone but the caller".into(),
            required: 2,
            passkey: true,
            expires_at: UNIX_EPOCH + Duration::from_secs(1_796_000_000),
            details: (labels || values).then(|| Details {
                message: "Delete one note".into(),
                records: labels.then(|| vec![LABEL.into()]),
                arguments: values.then(|| vec![ARGUMENT.into()]),
            }),
        }
    }

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_796_000_000)),
            "2026-11-30T00:53:20Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_825_600)),
            "2000-02-29T12:00:00Z"
        );
    }

    #[test]
    fn the_standard_event_carries_no_details_unless_shared() {
        let now = UNIX_EPOCH + Duration::from_secs(1_795_999_000);
        let body = |labels, values| -> Value {
            serde_json::from_slice(&Payload::Standard.body(&notice(labels, values), now))
                .unwrap_or_default()
        };
        let plain = body(false, false);
        assert_eq!(plain["type"], APPROVAL_REQUESTED);
        assert_eq!(plain["data"]["url"], "https://notes.example/approve/00ff");
        assert_eq!(plain["data"]["required"], 2);
        assert!(plain["data"].get("details").is_none());
        assert!(!plain.to_string().contains("Groceries"));
        let labels = body(true, false);
        assert_eq!(labels["data"]["details"]["message"], "Delete one note");
        assert_eq!(labels["data"]["details"]["records"][0], LABEL);
        assert!(labels["data"]["details"].get("arguments").is_none());
        let values = body(false, true);
        assert_eq!(values["data"]["details"]["arguments"][0], ARGUMENT);
        assert!(values["data"]["details"].get("records").is_none());
        assert!(!values.to_string().contains("<https://evil"));
    }

    #[test]
    fn slack_shares_exactly_what_the_rule_shares() {
        let text = |labels, values| -> String {
            let body: Value =
                serde_json::from_slice(&Payload::Slack.body(&notice(labels, values), UNIX_EPOCH))
                    .unwrap_or_default();
            body.to_string()
        };
        let plain = text(false, false);
        assert!(!plain.contains("Groceries") && !plain.contains("Delete one note"));
        let labels = text(true, false);
        assert!(
            labels.contains("&lt;https://evil.example|click&gt;"),
            "{labels}"
        );
        assert!(!labels.contains("from the workspace"), "{labels}");
        let values = text(false, true);
        assert!(values.contains("from the workspace"), "{values}");
        assert!(!values.contains("evil.example"), "{values}");
    }

    #[test]
    fn slack_gets_text_blocks_and_a_button_and_no_injected_links() {
        let now = UNIX_EPOCH;
        let body: Value = serde_json::from_slice(&Payload::Slack.body(&notice(true, false), now))
            .unwrap_or_default();
        assert!(body["text"].is_string());
        assert_eq!(body["blocks"][0]["type"], "section");
        assert_eq!(
            body["blocks"][1]["elements"][0]["url"],
            "https://notes.example/approve/00ff"
        );
        let text = body["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.contains("&lt;https://evil.example|click&gt; &amp; more"),
            "{text}"
        );
        assert!(!text.contains("<https://evil"));
    }
}
