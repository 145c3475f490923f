//! Issue 34, mistake 8: `.without_tool_list()`, the opt-out the `MissingToolList` error
//! suggested and `examples/quickstart.rs` used. A destructive tool with no policy, or one whose
//! policy was misspelt, ran unconfirmed until a `tools/list` answer had passed through that
//! instance. The opt-out is now `without_tool_list_unchecked`, no error message suggests an
//! opt-out, and the quickstart gives its tool list.

use mcp_confirm::{ConfigError, ConfirmLayer, KeyRing, ToolPolicy};
use serde_json::json;

/// The opt-outs that remove a guarantee: no error message may offer one as the fix.
const OPT_OUTS: [&str; 6] = [
    "without_tool_list",
    "skip_handler_guards",
    "unauthenticated_local_principal",
    "local_principal",
    "without_versions",
    "without_challenge_rate_limit",
];

fn assert_suggests_no_opt_out(error: &dyn std::fmt::Display) {
    let message = error.to_string();
    for opt_out in OPT_OUTS {
        assert!(!message.contains(opt_out), "{message:?} suggests {opt_out}");
    }
}

/// As a hurried user writes it: a misspelt tool name and no tool list.
#[test]
fn a_misspelt_policy_without_a_tool_list_does_not_build_and_the_error_names_the_real_fix() {
    let error = ConfirmLayer::builder(KeyRing::random())
        .audience("https://files.example/mcp")
        .tool("files_delte", ToolPolicy::confirm_only())
        .try_build()
        .unwrap_err();
    assert_eq!(error, ConfigError::MissingToolList);
    let message = error.to_string();
    assert!(
        message.contains(".declarations(") && message.contains(".tool_list("),
        "{message}"
    );
    assert_suggests_no_opt_out(&error);
    // With the list, the typo is named.
    let error = ConfirmLayer::builder(KeyRing::random())
        .audience("https://files.example/mcp")
        .tool_list(json!([{"name": "files_delete", "inputSchema": {"type": "object"}}]))
        .tool("files_delte", ToolPolicy::confirm_only())
        .try_build()
        .unwrap_err();
    assert!(error.to_string().contains("files_delte"), "{error}");
}

#[test]
fn no_configuration_error_offers_an_opt_out_as_the_fix() {
    let errors = [
        ConfigError::MissingAudience,
        ConfigError::InvalidAudience("notes.example".into()),
        ConfigError::MissingToolList,
        ConfigError::DeclaredWithoutPolicy("notes_delete".into()),
        ConfigError::UnconfirmedDestructiveTool("files_wipe".into()),
        ConfigError::UnguardedTool("ledger_purge".into()),
        ConfigError::MissingGrantStore,
        ConfigError::MissingApprovalStore,
        ConfigError::MissingStandingStore,
        ConfigError::InvalidApprovalUrl,
        ConfigError::MissingPasskeys,
    ];
    for error in &errors {
        assert_suggests_no_opt_out(error);
    }
    assert_suggests_no_opt_out(&mcp_confirm::KeyError::WeakSecret("k1".into()));
}

#[test]
fn the_quickstart_uses_no_opt_out() {
    let quickstart = include_str!("../../../examples/quickstart.rs");
    for opt_out in OPT_OUTS.iter().chain(&["claimed_by_handler", "exempt("]) {
        assert!(
            !quickstart.contains(opt_out),
            "the quickstart uses {opt_out}"
        );
    }
    assert!(quickstart.contains(".tool_list(tools())"));
}
